//! `fixtures/unified-text-kvshare` (gemma4_unified_text: 2 KV-shared layers with double-wide
//! MLP, k_eq_v, proportional RoPE, window 8 exceeded during decoding) against the HF f32 oracle.
//!
//! Logit bounds: as in fixture_vision.rs (1e-4 tests are `#[ignore]`d with the measured reason).

mod common;

use anyhow::{ensure, Result};
use common::{
    assert_close, check_greedy, load_fixture, F32_NOISE_FLOOR_BOUND, STRICT_F32_LOGITS,
};
use onnx_parity_reference::BidirectionalScope;

const FIXTURE: &str = "unified-text-kvshare";

fn logits(bound: f32) -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    ensure!(f.model.hf_forward_scope() == BidirectionalScope::None);
    let got = f.model.prefill(&f.inputs, BidirectionalScope::None)?;
    assert_close("logits", &got, f.oracle("logits")?, bound)?;
    Ok(())
}

fn greedy(bound: f32) -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    check_greedy(&f, BidirectionalScope::None, bound)
}

#[test]
fn inputs_embeds_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.embed(&f.inputs)?;
    assert_close("inputs_embeds", &got, f.oracle("inputs_embeds")?, 1e-5)?;
    Ok(())
}

#[test]
fn logits_match_hf() -> Result<()> {
    logits(F32_NOISE_FLOOR_BOUND)
}

#[test]
fn greedy_tokens_and_decode_steps_match_hf() -> Result<()> {
    greedy(F32_NOISE_FLOOR_BOUND)
}

#[test]
#[ignore = "1e-4 is below this fixture's f32 noise floor (one input ulp moves HF's logits 2.4e-4); see reference/NUMERICS.md"]
fn strict_logits_match_hf() -> Result<()> {
    logits(STRICT_F32_LOGITS)
}

#[test]
#[ignore = "1e-4 is below this fixture's f32 noise floor; see reference/NUMERICS.md"]
fn strict_decode_steps_match_hf() -> Result<()> {
    greedy(STRICT_F32_LOGITS)
}
