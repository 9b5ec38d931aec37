//! `fixtures/unified-text-kvshare` (gemma4_unified_text: 2 KV-shared layers with double-wide
//! MLP, k_eq_v, proportional RoPE, window 8 exceeded during decoding) against the HF f32 oracle.

mod common;

use anyhow::{ensure, Result};
use common::{assert_close, check_greedy, load_fixture, FEATURES_BOUND, LOGITS_BOUND};
use onnx_parity_reference::BidirectionalScope;

const FIXTURE: &str = "unified-text-kvshare";

#[test]
fn inputs_embeds_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.embed(&f.inputs)?;
    assert_close("inputs_embeds", &got, f.oracle("inputs_embeds")?, FEATURES_BOUND)?;
    Ok(())
}

#[test]
fn logits_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    ensure!(f.model.hf_forward_scope() == BidirectionalScope::None);
    let got = f.model.prefill(&f.inputs, BidirectionalScope::None)?;
    assert_close("logits", &got, f.oracle("logits")?, LOGITS_BOUND)?;
    Ok(())
}

#[test]
fn greedy_tokens_and_decode_steps_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    check_greedy(&f, BidirectionalScope::None, LOGITS_BOUND)
}
