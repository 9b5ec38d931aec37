//! TEMPORARY: f64 vs f32 image features.
use candle_core::DType;
fn main() -> anyhow::Result<()> {
    let inp = candle_core::safetensors::load("fixtures/unified-vision/inputs.safetensors", &candle_core::Device::Cpu)?;
    let p = std::path::Path::new("fixtures/unified-vision/checkpoint");
    let a = onnx_parity_reference::Gemma4Unified::load_with_dtype(p, DType::F32)?.image_features(&inp["pixel_values"], &inp["image_position_ids"])?;
    let b = onnx_parity_reference::Gemma4Unified::load_with_dtype(p, DType::F64)?.image_features(&inp["pixel_values"], &inp["image_position_ids"])?;
    println!("{:e}", (a.to_dtype(DType::F64)? - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?);
    let w = onnx_parity_reference::weights::Weights::open_with_dtype(p, DType::F64)?;
    let ln = onnx_parity_reference::norm::LayerNorm::load(&w, "model.embed_vision.patch_ln1", 48, 1e-5)?;
    let x = inp["pixel_values"].to_dtype(DType::F64)?.reshape((140, 48))?;
    let y64 = ln.forward(&x)?;
    let w32 = onnx_parity_reference::weights::Weights::open(p)?;
    let y32 = onnx_parity_reference::norm::LayerNorm::load(&w32, "model.embed_vision.patch_ln1", 48, 1e-5)?.forward(&x.to_dtype(DType::F32)?)?;
    println!("ln1 {:e}", (y32.to_dtype(DType::F64)? - y64)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?);
    Ok(())
}
