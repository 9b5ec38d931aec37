//! `fixtures/unified-vision` (gemma4_unified, two images, k_eq_v, softcapping) against the HF
//! transformers 5.14.1 f32 oracle: image features, embeddings, all-position logits in each
//! bidirectional scope, greedy tokens and every KV-cache decode step.

mod common;

use anyhow::{ensure, Context, Result};
use common::{assert_close, check_greedy, load_fixture, FEATURES_BOUND, LOGITS_BOUND};
use onnx_parity_reference::BidirectionalScope;

const FIXTURE: &str = "unified-vision";

#[test]
fn image_features_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.image_features(&f.inputs)?.context("no image features")?;
    assert_close("image_features", &got, f.oracle("image_features")?, FEATURES_BOUND)?;
    Ok(())
}

#[test]
fn inputs_embeds_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.embed(&f.inputs)?.inputs_embeds;
    assert_close("inputs_embeds", &got, f.oracle("inputs_embeds")?, FEATURES_BOUND)?;
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
    assert_close("logits (default scope)", &got, f.oracle("logits")?, LOGITS_BOUND)?;
    Ok(())
}

/// Each scope against the logits of the HF code path implementing it (fixtures/README.md).
#[test]
fn logits_each_scope_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let prepared = f.model.embed(&f.inputs)?;
    let mut failure = None;
    for scope in BidirectionalScope::ALL {
        let key = format!("logits_{}", scope.as_str().replace('-', "_"));
        let got = f.model.forward(&prepared, scope)?;
        if let Err(e) = assert_close(&key, &got, f.oracle(&key)?, LOGITS_BOUND) {
            failure = Some(e);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// The scopes must differ where docs/design.md §5 says they do (guards against a scope silently
/// collapsing onto another one and still passing because the oracles happen to be close).
#[test]
fn scopes_are_distinguishable() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let prepared = f.model.embed(&f.inputs)?;
    let all: Vec<_> = BidirectionalScope::ALL.iter().map(|&s| f.model.forward(&prepared, s)).collect::<Result<_, _>>()?;
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        let d = common::max_abs_diff(&all[i], &all[j])?;
        ensure!(d > 1e-2, "scopes {i} and {j} differ by only {d:e}");
    }
    Ok(())
}

#[test]
fn greedy_tokens_and_decode_steps_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let scope: BidirectionalScope = f.metadata.get("greedy_scope").context("oracle lacks greedy_scope")?.parse()?;
    check_greedy(&f, scope, LOGITS_BOUND)
}
