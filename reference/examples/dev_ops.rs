//! TEMPORARY dev helper: candle primitive ops on tensors produced by Python.
use std::collections::HashMap;
fn main() -> anyhow::Result<()> {
    let t = candle_core::safetensors::load("/tmp/ops-in.safetensors", &candle_core::Device::Cpu)?;
    let x = &t["x"]; let w = &t["w"]; let nw = &t["nw"]; let s = &t["s"];
    let mut out: HashMap<String, candle_core::Tensor> = HashMap::new();
    let ms = x.sqr()?.mean_keepdim(candle_core::D::Minus1)?;
    out.insert("ms".into(), ms.clone());
    let inv = (ms + 1e-6)?.sqrt()?.recip()?;
    out.insert("rms".into(), x.broadcast_mul(&inv)?.broadcast_mul(nw)?);
    out.insert("mm".into(), x.matmul(&w.t()?)?);
    out.insert("gelu".into(), x.gelu()?);
    out.insert("softmax".into(), candle_nn::ops::softmax_last_dim(s)?);
    out.insert("exp".into(), s.exp()?);
    candle_core::safetensors::save(&out, "/tmp/ops-out.safetensors")?;
    Ok(())
}
