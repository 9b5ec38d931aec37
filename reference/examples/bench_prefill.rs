//! Prefill benchmark: 256 tokens through the mid-size random gemma4_unified checkpoint made by
//! `scripts/make_bench_checkpoint.py`, 2 threads, logits for every position. Compare with
//! `scripts/bench_torch.py` (HF eager f32, same checkpoint and prompt).
//!
//! ```text
//! cargo run --release -p onnx-parity-reference --example bench_prefill -- [/tmp/gemma4-bench] [runs]
//! ```
//! Prints load time, median prefill wall time, peak RSS (VmHWM) and its ratio to the f32
//! weight bytes.
//!
//! Allocator note: glibc raises its mmap threshold dynamically each time a large block is
//! freed, after which freed activation buffers stay in the heap instead of going back to the
//! OS, and peak RSS counts them (~30 MiB here). `--fixed-mmap-threshold` pins the threshold
//! (`mallopt(M_MMAP_THRESHOLD, 64 KiB)`, as a long-running service would) so that peak RSS
//! measures what the reference keeps alive rather than allocator policy; both are reported in
//! reference/README.md. The library itself never touches process-wide allocator settings.

use std::path::PathBuf;
use std::time::Instant;

use onnx_parity_reference::{Gemma4, ModelInputs};

const SEQ: usize = 256;

fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

fn status_mib(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    // Must precede candle's first use of its rayon pool.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "2");
    }
    let fixed_threshold = std::env::args().any(|a| a == "--fixed-mmap-threshold");
    if fixed_threshold {
        // SAFETY: mallopt only adjusts glibc's allocator parameters; called before any threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        }
    }
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/tmp/gemma4-bench".into()));
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(5);

    let t0 = Instant::now();
    let model = Gemma4::load(&dir)?;
    let load_s = t0.elapsed().as_secs_f64();
    let (rss_after_load, hwm_after_load) = (status_mib("VmRSS:"), status_mib("VmHWM:"));
    let weight_bytes: usize = model.weight_manifest().values().map(|s| s.iter().product::<usize>() * 4).sum();

    // Same prompt formula as bench_torch.py.
    let input_ids: Vec<i64> = std::iter::once(2).chain((1..SEQ).map(|i| 16 + ((i * 7919) % 32000) as i64)).collect();
    let inputs = ModelInputs { input_ids, ..Default::default() };
    let scope = model.hf_forward_scope();
    let logits = model.prefill(&inputs, scope)?; // warm-up
                                                 // Copy the last row out: a view would keep the whole logits buffer alive.
    let last: Vec<f32> = logits.squeeze(0)?.get(SEQ - 1)?.to_vec1()?;
    drop(logits);
    let hwm_after_warmup = peak_rss_mib();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let l = model.prefill(&inputs, scope)?;
        times.push(t.elapsed().as_secs_f64());
        drop(l);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let (top1, max) = last.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) });
    let weights_mib = weight_bytes as f64 / (1 << 20) as f64;
    let rss = peak_rss_mib();
    println!(
        "candle threads={} load {load_s:.2}s{}",
        candle_core::utils::get_num_threads(),
        if fixed_threshold { " (fixed mmap threshold)" } else { "" }
    );
    println!(
        "prefill {SEQ} tokens: median {:.1} ms (runs: {})",
        median * 1e3,
        times.iter().map(|t| format!("{:.1}", t * 1e3)).collect::<Vec<_>>().join(", ")
    );
    println!("peak RSS {rss:.0} MiB, f32 weights {weights_mib:.0} MiB, ratio {:.2}", rss / weights_mib);
    println!(
        "after load: RSS {rss_after_load:.0} MiB, peak {hwm_after_load:.0} MiB; peak after warm-up {hwm_after_warmup:.0} MiB; now RSS {:.0} MiB",
        status_mib("VmRSS:")
    );
    println!("last-token top1 {top1} max {max:.4}");
    Ok(())
}
