//! TEMPORARY: vision stage check.
use onnx_parity_reference::norm::{LayerNorm, RmsNorm};
fn diff(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 { (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap() }
fn main() -> anyhow::Result<()> {
    let st = candle_core::safetensors::load("/tmp/vis-stages.safetensors", &candle_core::Device::Cpu)?;
    let orc = candle_core::safetensors::load("fixtures/unified-vision/oracle.safetensors", &candle_core::Device::Cpu)?;
    let inp = candle_core::safetensors::load("fixtures/unified-vision/inputs.safetensors", &candle_core::Device::Cpu)?;
    let w = onnx_parity_reference::weights::Weights::open(std::path::Path::new("fixtures/unified-vision/checkpoint"))?;
    let proj = w.get("model.embed_vision.multimodal_embedder.embedding_projection.weight", &[64, 32])?;
    let f_from_hf_rms = st["rms"].matmul(&proj.t()?)?;
    println!("proj(HF rms) vs oracle {:e}", diff(&f_from_hf_rms, &orc["image_features"]));
    let rms = RmsNorm::scale_free(1e-6).forward(&st["pos_norm"])?;
    println!("proj(rms(HF pos_norm)) vs oracle {:e}", diff(&rms.matmul(&proj.t()?)?, &orc["image_features"]));
    let ln3 = LayerNorm::load(&w, "model.embed_vision.pos_norm", 32, 1e-5)?;
    let m = onnx_parity_reference::Gemma4Unified::load(std::path::Path::new("fixtures/unified-vision/checkpoint"))?;
    let f = m.image_features(&inp["pixel_values"], &inp["image_position_ids"])?;
    println!("candle features vs oracle {:e}", diff(&f, &orc["image_features"]));
    let _ = ln3;
    let ln1 = LayerNorm::load(&w, "model.embed_vision.patch_ln1", 48, 1e-5)?;
    let _ = ln1;
    Ok(())
}
