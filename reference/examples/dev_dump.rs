//! TEMPORARY dev helper: dump prefill logits + layer outputs of a fixture for comparison in Python.
use std::collections::HashMap;
use onnx_parity_reference::{BidirectionalScope, Gemma4Unified, ModelInputs};
fn main() -> anyhow::Result<()> {
    let name = std::env::args().nth(1).unwrap();
    let scope: BidirectionalScope = std::env::args().nth(2).unwrap_or("none".into()).parse()?;
    let d = std::path::Path::new("fixtures").join(&name);
    let dt = if std::env::args().nth(3).as_deref() == Some("f64") { candle_core::DType::F64 } else { candle_core::DType::F32 };
    let m = Gemma4Unified::load_with_dtype(&d.join("checkpoint"), dt)?;
    let inp = candle_core::safetensors::load(d.join("inputs.safetensors"), &candle_core::Device::Cpu)?;
    let ids = |k: &str| inp.get(k).map(|t| t.flatten_all().unwrap().to_vec1::<i64>().unwrap());
    let inputs = ModelInputs { input_ids: ids("input_ids").unwrap(), pixel_values: inp.get("pixel_values").cloned(), image_position_ids: inp.get("image_position_ids").cloned(), mm_token_type_ids: ids("mm_token_type_ids") };
    let l = m.prefill(&inputs, scope)?;
    let mut out = HashMap::new();
    out.insert("logits".to_string(), l);
    let e = m.embed(&inputs)?;
    for (i, s) in m.layer_outputs(&e, inputs.mm_token_type_ids.as_deref(), scope)?.into_iter().enumerate() {
        out.insert(format!("layer{i}"), s);
    }
    out.insert("embeds".to_string(), e);
    candle_core::safetensors::save(&out, format!("/tmp/{name}-candle{}.safetensors", if dt == candle_core::DType::F64 { "64" } else { "" }))?;
    Ok(())
}
