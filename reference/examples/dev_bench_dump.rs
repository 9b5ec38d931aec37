//! TEMPORARY dev helper: dump logits of the bench prompt (f32 or f64).
use std::collections::HashMap;
use onnx_parity_reference::{BidirectionalScope, Gemma4Unified, ModelInputs};
fn main() -> anyhow::Result<()> {
    let dt = if std::env::args().nth(1).as_deref() == Some("f64") { candle_core::DType::F64 } else { candle_core::DType::F32 };
    let m = Gemma4Unified::load_with_dtype(std::path::Path::new("/tmp/gemma4-bench"), dt)?;
    let input_ids: Vec<i64> = std::iter::once(2).chain((1..256usize).map(|i| 16 + ((i * 7919) % 32000) as i64)).collect();
    let l = m.prefill(&ModelInputs { input_ids, ..Default::default() }, BidirectionalScope::AllLayers)?;
    let mut out: HashMap<String, candle_core::Tensor> = HashMap::new();
    out.insert("logits".into(), l);
    candle_core::safetensors::save(&out, format!("/tmp/bench-candle-{}.safetensors", if dt == candle_core::DType::F64 { "f64" } else { "f32" }))?;
    Ok(())
}
