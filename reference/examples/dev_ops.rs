//! TEMPORARY dev helper: candle primitive ops on tensors produced by Python.
use std::collections::HashMap;
fn main() -> anyhow::Result<()> {
    let t = candle_core::safetensors::load("/tmp/ops-in.safetensors", &candle_core::Device::Cpu)?;
    let mut out: HashMap<String, candle_core::Tensor> = HashMap::new();
    for (k, x) in &t {
        if let Some(n) = k.strip_prefix("ln_x_") {
            let ln = onnx_parity_reference::norm::LayerNorm::from_parts(t[&format!("ln_w_{n}")].clone(), t[&format!("ln_b_{n}")].clone(), 1e-5)?;
            out.insert(format!("ln_{n}"), ln.forward(x)?);
        }
    }
    candle_core::safetensors::save(&out, "/tmp/ops-out.safetensors")?;
    Ok(())
}
