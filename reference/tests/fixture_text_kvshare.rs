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
    let got = f.model.embed(&f.inputs)?.inputs_embeds;
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

/// EOS handling: generation stops right after the first EOS token, which is returned.
#[test]
fn greedy_stops_at_eos() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let full = f.model.greedy(&f.inputs, 8, &[], BidirectionalScope::None)?;
    ensure!(full.tokens.len() == 8, "no EOS: all 8 tokens");
    let eos = full.tokens[2];
    let stopped = f.model.greedy(&f.inputs, 8, &[eos], BidirectionalScope::None)?;
    let want = &full.tokens[..=full.tokens.iter().position(|&t| t == eos).unwrap_or(2)];
    ensure!(stopped.tokens == want, "{:?} vs {:?}", stopped.tokens, want);
    ensure!(stopped.step_logits.len() == stopped.tokens.len());
    ensure!(f.model.greedy(&f.inputs, 0, &[], BidirectionalScope::None)?.tokens.is_empty());
    Ok(())
}

/// KV-cache decoding computes what a full prefill of the extended sequence computes: each
/// decode step's logits equal the prefill logits at that position (the window of 8 is
/// exceeded, KV-shared layers read the cache of their source layers).
#[test]
fn decode_steps_equal_prefill_of_extended_sequence() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let gen = f.model.greedy(&f.inputs, 8, &[], BidirectionalScope::None)?;
    let mut ids = f.inputs.input_ids.clone();
    let prompt_len = ids.len();
    ids.extend_from_slice(&gen.tokens[..gen.tokens.len() - 1]);
    let inputs = onnx_parity_reference::ModelInputs { input_ids: ids, ..Default::default() };
    let all = f.model.prefill(&inputs, BidirectionalScope::None)?.squeeze(0)?;
    for (k, row) in gen.step_logits.iter().enumerate() {
        let got = candle_core::Tensor::new(row.as_slice(), all.device())?;
        let want = all.get(prompt_len - 1 + k)?;
        assert_close(&format!("decode step {k} vs prefill"), &got, &want, LOGITS_BOUND)?;
    }
    Ok(())
}
