//! Harness overhead in the decode loop: `OnnxPipeline::greedy` (names from metadata, KV moved
//! between steps, f32 extraction of logits) against a bare loop of `session.run` calls doing the
//! same decode steps with the fewest possible operations — for a dynamic-cache export
//! (`past_key_values` → `present`) and for a static-cache one (mobius's hybrid gemma4_text
//! build: `key_cache` buffers written at `write_indices` beside dynamic sliding layers). Run:
//! `cargo bench --bench decode_overhead`. Target: the pipeline adds ≤ 5 % over bare `session.run`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use onnx_parity::runtime::pipeline::OnnxPipeline;
use onnx_parity::runtime::provision as runtime;
use onnx_parity::runtime::session::SessionOptions;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor};

const REPEATS: usize = 7;

/// One KV input as the bare loop feeds it: dynamic `[1, heads, past, head_dim]` (grown by the
/// graph), or a static `[1, capacity, width]` buffer the graph writes into.
struct Slot {
    input: String,
    output: String,
    dims: Vec<usize>,
    is_static: bool,
}

fn slots(session: &Session) -> Vec<Slot> {
    session
        .inputs()
        .iter()
        .filter_map(|i| {
            let name = i.name();
            let shape = i.dtype().tensor_shape()?.to_vec();
            if let Some(rest) = name.strip_prefix("past_key_values.") {
                Some(Slot {
                    input: name.into(),
                    output: format!("present.{rest}"),
                    dims: vec![1, shape[1] as usize, 0, shape[3] as usize],
                    is_static: false,
                })
            } else if let Some(rest) = name.strip_prefix("key_cache.") {
                Some(Slot {
                    input: name.into(),
                    output: format!("updated_key_cache.{rest}"),
                    dims: vec![1, shape[1] as usize, shape[2] as usize],
                    is_static: true,
                })
            } else {
                name.strip_prefix("value_cache.").map(|rest| Slot {
                    input: name.into(),
                    output: format!("updated_value_cache.{rest}"),
                    dims: vec![1, shape[1] as usize, shape[2] as usize],
                    is_static: true,
                })
            }
        })
        .collect()
}

fn bare_decode(session: &mut Session, prompt: &[i64], steps: usize, kv: &[Slot]) -> Vec<i64> {
    let has = |n: &str| session.inputs().iter().any(|i| i.name() == n);
    let (mask, positions, write) = (has("attention_mask"), has("position_ids"), has("write_indices"));
    let mut cache: Vec<DynValue> = kv
        .iter()
        .map(|s| {
            let n = s.dims.iter().product::<usize>();
            Tensor::from_array((s.dims.clone(), vec![0f32; n])).expect("empty cache").into_dyn()
        })
        .collect();
    let mut ids = prompt.to_vec();
    let mut out_tokens = Vec::new();
    for (step, total) in (0..=steps).zip(prompt.len()..) {
        let s = ids.len();
        let past = total - s;
        let mut feed: Vec<(String, SessionInputValue<'_>)> =
            vec![("input_ids".into(), Tensor::from_array((vec![1usize, s], ids.clone())).expect("ids").into())];
        if mask {
            feed.push(("attention_mask".into(), Tensor::from_array((vec![1usize, total], vec![1i64; total])).expect("mask").into()));
        }
        if positions {
            let pos = (past as i64..total as i64).collect::<Vec<_>>();
            feed.push(("position_ids".into(), Tensor::from_array((vec![1usize, s], pos)).expect("pos").into()));
        }
        if write {
            feed.push(("write_indices".into(), Tensor::from_array((vec![1usize], vec![past as i64])).expect("write").into()));
            feed.push(("nonpad_kv_seqlen".into(), Tensor::from_array((vec![1usize], vec![total as i64])).expect("nonpad").into()));
        }
        for (slot, value) in kv.iter().zip(cache) {
            feed.push((slot.input.clone(), value.into()));
        }
        let mut out = session.run(feed).expect("run");
        let (shape, logits) = out["logits"].try_extract_tensor::<f32>().expect("logits");
        let v = shape[2] as usize;
        let last = &logits[logits.len() - v..];
        let next = last.iter().enumerate().fold(0, |b, (i, &x)| if x > last[b] { i } else { b }) as i64;
        cache = kv.iter().map(|slot| out.remove(slot.output.as_str()).expect("cache out")).collect();
        if step == steps {
            break;
        }
        out_tokens.push(next);
        ids = vec![next];
    }
    out_tokens
}

/// Times both loops on `export` (prompt from `inputs`, `steps` decode steps) and prints them.
fn measure(label: &str, export: &Path, inputs: &Path, steps: usize) {
    let inputs = onnx_parity::inputs::load_safetensors(inputs).expect("inputs");
    let opts = SessionOptions { intra_threads: 1, ..SessionOptions::default() };
    let mut pipeline = OnnxPipeline::open(export, &opts).expect("pipeline");
    let env = runtime::environment().expect("ORT");
    let mut session = Session::builder(env)
        .expect("builder")
        .with_intra_threads(1)
        .expect("threads")
        .commit_from_file(export.join("model.onnx"))
        .expect("session");
    let kv = slots(&session);
    // Same tokens on both sides, so both do identical work.
    let forced = bare_decode(&mut session, &inputs.input_ids, steps, &kv);
    let (mut bare, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let t = Instant::now();
        let _ = bare_decode(&mut session, &inputs.input_ids, steps, &kv);
        bare.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (_, g) = pipeline.greedy(&inputs, steps + 1, &[], Some(&forced), false).expect("pipeline greedy");
        ours.push(t.elapsed().as_secs_f64());
        assert_eq!(g.tokens, forced);
    }
    let (b, o) = (support::median(bare), support::median(ours));
    let statics = kv.iter().filter(|s| s.is_static).count() / 2;
    println!(
        "{label}: decode {steps} steps (prompt {} tokens, {} KV pairs, {statics} static), median of {REPEATS}:",
        inputs.input_ids.len(),
        kv.len() / 2
    );
    println!("  bare session.run loop : {:8.3} ms", b * 1e3);
    println!("  OnnxPipeline::greedy  : {:8.3} ms", o * 1e3);
    println!("  overhead              : {:+.2} %", (o / b - 1.0) * 100.0);
}

fn main() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let text = fixtures.join("unified-text-kvshare");
    measure("dynamic cache (unified-text-kvshare)", &text.join("onnx"), &text.join("inputs.safetensors"), 64);
    let moe = fixtures.join("gemma4-text-moe");
    // Capacity 64: the prompt and the steps must fit.
    let prompt = onnx_parity::inputs::load_safetensors(&moe.join("inputs.safetensors")).expect("inputs").input_ids.len();
    measure("static cache (gemma4-text-moe@static, hybrid)", &moe.join("variants/static"), &moe.join("inputs.safetensors"), 63 - prompt);
}
