//! TEMPORARY: matmul throughput vs M.
use candle_core::{Device, Tensor};
fn main() -> anyhow::Result<()> {
    std::env::set_var("RAYON_NUM_THREADS", "2");
    for (n, k) in [(8192usize, 1024usize), (1024, 8192), (32768, 1024)] {
        let w = Tensor::randn(0f32, 1., (k, n), &Device::Cpu)?;
        for m in [256usize, 128, 64] {
            let reps = 256 / m;
            let xs: Vec<Tensor> = (0..reps).map(|_| Tensor::randn(0f32, 1., (m, k), &Device::Cpu).unwrap()).collect();
            let _ = xs[0].matmul(&w)?;
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                for x in &xs { let _ = x.matmul(&w)?; }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("M={m} x{reps} [{m},{k}]x[{k},{n}]: {:.1} ms total, {:.1} GFLOPS", best * 1e3, 2.0 * 256.0 * k as f64 * n as f64 / best / 1e9);
        }
    }
    Ok(())
}
