//! The gemma4-family fixtures (`fixtures/gemma4-*`: gemma4_text with PLE + KV sharing, with MoE;
//! gemma4 with the vision tower, with standardize and bidirectional blocks) against the HF
//! transformers 5.14.1 f32 oracle: image features, embeddings, per-layer inputs, all-position
//! logits (HF forward and every bidirectional scope the oracle has), greedy tokens and every
//! KV-cache decode step. One table-driven set of checks per fixture.

mod common;

use anyhow::{bail, ensure, Context, Result};
use candle_core::Tensor;
use common::{assert_close, check_greedy, load_fixture, Fixture, FEATURES_BOUND, LOGITS_BOUND};
use onnx_parity_reference::{BidirectionalScope, ModelInputs};

/// Compares every component the oracle has (features, embeddings, PLE inputs).
fn components(f: &Fixture) -> Result<()> {
    let prepared = f.model.embed(&f.inputs)?;
    let mut checked = 0;
    match (&prepared.image_features, f.oracle.get("image_features")) {
        (Some(got), Some(want)) => {
            assert_close("image_features", got, want, FEATURES_BOUND)?;
            checked += 1;
        }
        (None, None) => {}
        (got, want) => bail!("image_features: reference has {}, oracle has {}", got.is_some(), want.is_some()),
    }
    assert_close("inputs_embeds", &prepared.inputs_embeds, f.oracle("inputs_embeds")?, FEATURES_BOUND)?;
    match (&prepared.per_layer_inputs, f.oracle.get("per_layer_inputs")) {
        (Some(got), Some(want)) => {
            assert_close("per_layer_inputs", got, want, FEATURES_BOUND)?;
            checked += 1;
        }
        (None, None) => {}
        (got, want) => bail!("per_layer_inputs: reference has {}, oracle has {}", got.is_some(), want.is_some()),
    }
    eprintln!("{} optional components checked", checked);
    Ok(())
}

/// HF's own forward (the oracle's `default_scope`) and each scope's HF code path.
fn logits(f: &Fixture) -> Result<()> {
    let scope = f.model.hf_forward_scope();
    ensure!(
        f.metadata.get("default_scope").map(String::as_str) == Some(scope.as_str()),
        "oracle default_scope {:?} vs reference {scope}",
        f.metadata.get("default_scope")
    );
    let prepared = f.model.embed(&f.inputs)?;
    assert_close("logits (HF forward)", &f.model.forward(&prepared, scope)?, f.oracle("logits")?, LOGITS_BOUND)?;
    let mut failure = None;
    for s in BidirectionalScope::ALL {
        let key = format!("logits_{}", s.as_str().replace('-', "_"));
        if let Some(want) = f.oracle.get(&key) {
            if let Err(e) = assert_close(&key, &f.model.forward(&prepared, s)?, want, LOGITS_BOUND) {
                failure = Some(e);
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

fn greedy(f: &Fixture) -> Result<()> {
    let scope: BidirectionalScope = f.metadata.get("greedy_scope").context("oracle lacks greedy_scope")?.parse()?;
    check_greedy(f, scope, LOGITS_BOUND)
}

/// KV-cache decoding computes what a prefill of the extended sequence computes (text only: the
/// extended prompt must stay the same prompt, which an image block would not).
fn decode_equals_prefill(f: &Fixture) -> Result<()> {
    if f.inputs.has_images() {
        return Ok(());
    }
    let scope = f.model.hf_forward_scope();
    let gen = f.model.greedy(&f.inputs, 8, &[], scope)?;
    let mut ids = f.inputs.input_ids.clone();
    let prompt_len = ids.len();
    ids.extend_from_slice(&gen.tokens[..gen.tokens.len() - 1]);
    let all = f.model.prefill(&ModelInputs::from_ids(ids), scope)?.squeeze(0)?;
    for (k, row) in gen.step_logits.iter().enumerate() {
        let got = Tensor::new(row.as_slice(), all.device())?;
        assert_close(&format!("decode step {k} vs prefill"), &got, &all.get(prompt_len - 1 + k)?, LOGITS_BOUND)?;
    }
    Ok(())
}

/// The scopes must differ where the masks do (guards against a scope silently collapsing onto
/// another and still passing because the oracles happen to be close). Image prompts only.
fn scopes_distinguishable(f: &Fixture) -> Result<()> {
    if !f.inputs.has_images() {
        return Ok(());
    }
    let prepared = f.model.embed(&f.inputs)?;
    let all: Vec<_> = BidirectionalScope::ALL.iter().map(|&s| f.model.forward(&prepared, s)).collect::<Result<_, _>>()?;
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        let d = common::max_abs_diff(&all[i], &all[j])?;
        ensure!(d > 1e-2, "scopes {} and {} differ by only {d:e}", BidirectionalScope::ALL[i], BidirectionalScope::ALL[j]);
    }
    Ok(())
}

macro_rules! fixture_tests {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[test]
            fn components_match_hf() -> Result<()> { components(&load_fixture($name)?) }
            #[test]
            fn logits_match_hf() -> Result<()> { logits(&load_fixture($name)?) }
            #[test]
            fn greedy_tokens_and_decode_steps_match_hf() -> Result<()> { greedy(&load_fixture($name)?) }
            #[test]
            fn decode_steps_equal_prefill_of_extended_sequence() -> Result<()> { decode_equals_prefill(&load_fixture($name)?) }
            #[test]
            fn scopes_are_distinguishable() -> Result<()> { scopes_distinguishable(&load_fixture($name)?) }
        }
    )*};
}

fixture_tests! {
    text_ple => "gemma4-text-ple",
    text_moe => "gemma4-text-moe",
    vision => "gemma4-vision",
    vision_large => "gemma4-vision-large",
}
