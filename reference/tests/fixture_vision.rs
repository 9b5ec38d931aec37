//! `fixtures/unified-vision` (gemma4_unified, two images, k_eq_v, softcapping) against the HF
//! transformers 5.14.1 oracle: image features, embeddings, all-position logits in each
//! bidirectional scope, greedy tokens and every KV-cache decode step.

mod common;

use anyhow::{ensure, Context, Result};
use candle_core::Tensor;
use common::{assert_close, load_fixture};
use onnx_parity_reference::BidirectionalScope;

const FIXTURE: &str = "unified-vision";

#[test]
fn image_features_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let px = f.inputs.pixel_values.as_ref().context("no pixel_values")?;
    let pos = f.inputs.image_position_ids.as_ref().context("no image_position_ids")?;
    let got = f.model.image_features(px, pos)?;
    assert_close("image_features", &got, f.oracle("image_features")?, 1e-5)?;
    Ok(())
}

#[test]
fn inputs_embeds_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.embed(&f.inputs)?;
    assert_close("inputs_embeds", &got, f.oracle("inputs_embeds")?, 1e-5)?;
    Ok(())
}

/// `logits` is HF's own forward; the reference's default scope for the checkpoint must give it.
#[test]
fn logits_default_scope_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let scope = f.model.hf_forward_scope();
    ensure!(
        f.metadata.get("default_scope").map(String::as_str) == Some(scope.as_str()),
        "oracle default_scope {:?} vs reference {scope}",
        f.metadata.get("default_scope")
    );
    let got = f.model.prefill(&f.inputs, scope)?;
    assert_close("logits (default scope)", &got, f.oracle("logits")?, 1e-4)?;
    Ok(())
}

#[test]
fn logits_each_scope_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let embeds = f.model.embed(&f.inputs)?;
    let types = f.inputs.mm_token_type_ids.as_deref();
    for scope in BidirectionalScope::ALL {
        let key = format!("logits_{}", scope.as_str().replace('-', "_"));
        let got = f.model.forward_embeds(&embeds, types, scope)?;
        assert_close(&key, &got, f.oracle(&key)?, 1e-4)?;
    }
    Ok(())
}

#[test]
fn greedy_and_decode_steps_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let scope: BidirectionalScope = f
        .metadata
        .get("greedy_scope")
        .context("oracle lacks greedy_scope")?
        .parse()?;
    let want_tokens = f.oracle("greedy_tokens")?.flatten_all()?.to_vec1::<i64>()?;
    let want_steps = f.oracle("step_logits")?;
    let eos = f.model.config().text().eos_token_id.as_ref().map(|e| e.to_vec()).unwrap_or_default();
    let gen = f.model.greedy(&f.inputs, want_tokens.len(), &eos, scope)?;
    ensure!(gen.tokens == want_tokens, "greedy tokens {:?} vs HF {:?}", gen.tokens, want_tokens);
    ensure!(gen.step_logits.len() == want_steps.dim(0)?, "step count");
    for (i, row) in gen.step_logits.iter().enumerate() {
        let got = Tensor::new(row.as_slice(), want_steps.device())?;
        assert_close(&format!("step_logits[{i}]"), &got, &want_steps.get(i)?, 1e-4)?;
    }
    Ok(())
}
