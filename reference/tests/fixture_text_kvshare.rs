//! `fixtures/unified-text-kvshare` (gemma4_unified_text: 2 KV-shared layers with double-wide
//! MLP, k_eq_v, proportional RoPE, window 8 exceeded during decoding) against the HF oracle.

mod common;

use anyhow::{ensure, Result};
use candle_core::Tensor;
use common::{assert_close, load_fixture};
use onnx_parity_reference::BidirectionalScope;

const FIXTURE: &str = "unified-text-kvshare";

#[test]
fn inputs_embeds_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let got = f.model.embed(&f.inputs)?;
    assert_close("inputs_embeds", &got, f.oracle("inputs_embeds")?, 1e-5)?;
    Ok(())
}

#[test]
fn logits_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    ensure!(f.model.hf_forward_scope() == BidirectionalScope::None);
    let got = f.model.prefill(&f.inputs, BidirectionalScope::None)?;
    assert_close("logits", &got, f.oracle("logits")?, 1e-4)?;
    Ok(())
}

#[test]
fn greedy_and_decode_steps_match_hf() -> Result<()> {
    let f = load_fixture(FIXTURE)?;
    let want_tokens = f.oracle("greedy_tokens")?.flatten_all()?.to_vec1::<i64>()?;
    let want_steps = f.oracle("step_logits")?;
    let eos = f.model.config().text().eos_token_id.as_ref().map(|e| e.to_vec()).unwrap_or_default();
    let gen = f.model.greedy(&f.inputs, want_tokens.len(), &eos, BidirectionalScope::None)?;
    ensure!(gen.tokens == want_tokens, "greedy tokens {:?} vs HF {:?}", gen.tokens, want_tokens);
    ensure!(gen.step_logits.len() == want_steps.dim(0)?, "step count");
    for (i, row) in gen.step_logits.iter().enumerate() {
        let got = Tensor::new(row.as_slice(), want_steps.device())?;
        assert_close(&format!("step_logits[{i}]"), &got, &want_steps.get(i)?, 1e-4)?;
    }
    Ok(())
}
