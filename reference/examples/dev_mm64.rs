//! TEMPORARY: f64 matmul sanity.
use candle_core::{DType, Device, Tensor};
fn main() -> anyhow::Result<()> {
    for (m, k, n) in [(127usize, 48usize, 32usize), (24, 64, 32), (3, 5, 7), (256, 1024, 1024)] {
        let x = Tensor::randn(0f64, 1., (m, k), &Device::Cpu)?;
        let w = Tensor::randn(0f64, 1., (n, k), &Device::Cpu)?;
        let y = x.matmul(&w.t()?)?;
        let y32 = x.to_dtype(DType::F32)?.matmul(&w.to_dtype(DType::F32)?.t()?)?.to_dtype(DType::F64)?;
        // naive
        let xv = x.to_vec2::<f64>()?; let wv = w.to_vec2::<f64>()?;
        let mut maxd = 0f64;
        let yv = y.to_vec2::<f64>()?;
        for i in 0..m { for j in 0..n { let s: f64 = (0..k).map(|t| xv[i][t] * wv[j][t]).sum(); maxd = maxd.max((s - yv[i][j]).abs()); } }
        println!("{m}x{k}x{n}: f64 vs naive {maxd:e}, f64 vs f32 {:e}", (y - y32)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?);
    }
    Ok(())
}
