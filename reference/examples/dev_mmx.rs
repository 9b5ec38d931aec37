//! TEMPORARY: matmul bitwise check vs torch.
use std::collections::HashMap;
fn main() -> anyhow::Result<()> {
    let t = candle_core::safetensors::load("/tmp/mm-in.safetensors", &candle_core::Device::Cpu)?;
    let mut out: HashMap<String, candle_core::Tensor> = HashMap::new();
    for (k, x) in &t {
        if let Some(n) = k.strip_prefix("x_") {
            out.insert(format!("y_{n}"), x.matmul(&t[&format!("w_{n}")].t()?)?);
        }
    }
    candle_core::safetensors::save(&out, "/tmp/mm-out.safetensors")?;
    Ok(())
}
