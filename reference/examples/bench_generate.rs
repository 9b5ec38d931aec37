//! Real-size benchmark: load a checkpoint (e.g. the random bf16 gemma-4-E2B made by
//! `scripts/make_e2b_bench_checkpoint.py`), then a 32-token prefill and 8 greedy KV-cache steps.
//! Prints load time, prefill time, per-step time and peak RSS (VmHWM).
//!
//! ```text
//! cargo run --release -p onnx-parity-reference --example bench_generate -- [/tmp/gemma4-e2b-bench] [prompt_len] [steps]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use onnx_parity_reference::{Gemma4, GenerateOptions, ModelInputs};

fn status_gib(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / (1024.0 * 1024.0))
}

fn main() -> anyhow::Result<()> {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "2");
    }
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/tmp/gemma4-e2b-bench".into()));
    let seq: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let steps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(8);

    let t = Instant::now();
    let model = Gemma4::load(&dir)?;
    let load_s = t.elapsed().as_secs_f64();
    let rss_load = status_gib("VmRSS:");
    let input_ids: Vec<i64> = std::iter::once(2).chain((1..seq).map(|i| 16 + ((i * 7919) % 200_000) as i64)).collect();
    let inputs = ModelInputs::from_ids(input_ids);
    let scope = model.hf_forward_scope();
    // Prefill alone (last-position logits), then the prefill + decode together.
    let opts = GenerateOptions {
        scope,
        max_new_tokens: 1,
        eos: &[],
        forced: None,
        all_position_logits: false,
        layer_outputs: false,
        final_hidden: false,
    };
    let t = Instant::now();
    model.generate(&inputs, &opts)?;
    let first_prefill_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    model.generate(&inputs, &opts)?;
    let prefill_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let opts = GenerateOptions { max_new_tokens: steps + 1, ..opts };
    let run = model.generate(&inputs, &opts)?;
    let total_s = t.elapsed().as_secs_f64();
    let per_step = (total_s - prefill_s) / steps as f64;
    println!("threads={} load {load_s:.1} s (RSS after load {rss_load:.2} GiB)", candle_core::utils::get_num_threads());
    println!("prefill {seq} tokens {prefill_s:.2} s (first one {first_prefill_s:.2} s); {steps} decode steps {per_step:.3} s each");
    println!("peak RSS {:.2} GiB; tokens {:?}", status_gib("VmHWM:"), run.generation.tokens);
    Ok(())
}
