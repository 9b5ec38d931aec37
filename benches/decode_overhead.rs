//! Harness overhead in the decode loop: `OnnxPipeline::greedy` (names from metadata, KV moved
//! between steps, f32 extraction of logits) against a bare loop of `session.run` calls doing the
//! same decode steps with the fewest possible operations. Run: `cargo bench --bench decode_overhead`.
//! Target: the pipeline adds ≤ 5 % over bare `session.run` time.

use std::path::PathBuf;
use std::time::Instant;

use onnx_parity::onnx::pipeline::OnnxPipeline;
use onnx_parity::onnx::runtime;
use onnx_parity::onnx::session::SessionOptions;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor};

const STEPS: usize = 64;
const REPEATS: usize = 7;

fn bare_decode(session: &mut Session, prompt: &[i64], steps: usize, kv: &[(String, [usize; 2])]) -> Vec<i64> {
    let mut past: Vec<DynValue> = Vec::new();
    for (_, [h, d]) in kv {
        for _ in 0..2 {
            past.push(Tensor::from_array((vec![1usize, *h, 0, *d], Vec::<f32>::new())).expect("empty past").into_dyn());
        }
    }
    let mut ids = prompt.to_vec();
    let mut out_tokens = Vec::new();
    for (step, total) in (0..=steps).zip(prompt.len()..) {
        let s = ids.len();
        let mut feed: Vec<(String, SessionInputValue<'_>)> = vec![
            ("input_ids".into(), Tensor::from_array((vec![1usize, s], ids.clone())).expect("ids").into()),
            ("attention_mask".into(), Tensor::from_array((vec![1usize, total], vec![1i64; total])).expect("mask").into()),
            (
                "position_ids".into(),
                Tensor::from_array((vec![1usize, s], ((total - s) as i64..total as i64).collect::<Vec<_>>())).expect("pos").into(),
            ),
        ];
        let mut it = past.into_iter();
        for (i, _) in kv.iter().enumerate() {
            feed.push((format!("past_key_values.{i}.key"), it.next().expect("k").into()));
            feed.push((format!("past_key_values.{i}.value"), it.next().expect("v").into()));
        }
        let mut out = session.run(feed).expect("run");
        let (shape, logits) = out["logits"].try_extract_tensor::<f32>().expect("logits");
        let v = shape[2] as usize;
        let last = &logits[logits.len() - v..];
        let next = last.iter().enumerate().fold(0, |b, (i, &x)| if x > last[b] { i } else { b }) as i64;
        past = Vec::new();
        for i in 0..kv.len() {
            past.push(out.remove(format!("present.{i}.key")).expect("present k"));
            past.push(out.remove(format!("present.{i}.value")).expect("present v"));
        }
        if step == steps {
            break;
        }
        out_tokens.push(next);
        ids = vec![next];
    }
    out_tokens
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-text-kvshare");
    let inputs = onnx_parity::inputs::load_safetensors(&root.join("inputs.safetensors")).expect("inputs");
    let opts = SessionOptions { intra_threads: 1 };
    let mut pipeline = OnnxPipeline::open(&root.join("onnx"), &opts).expect("pipeline");
    let env = runtime::environment().expect("ORT");
    let mut session = Session::builder(env)
        .expect("builder")
        .with_intra_threads(1)
        .expect("threads")
        .commit_from_file(root.join("onnx/model.onnx"))
        .expect("session");
    let kv: Vec<(String, [usize; 2])> = (0..pipeline.kv_pairs())
        .map(|i| {
            let name = format!("past_key_values.{i}.key");
            let shape =
                session.inputs().iter().find(|o| o.name() == name).and_then(|o| o.dtype().tensor_shape().cloned()).expect("kv shape");
            (name, [shape[1] as usize, shape[3] as usize])
        })
        .collect();
    // Same tokens on both sides, so both do identical work.
    let forced = bare_decode(&mut session, &inputs.input_ids, STEPS, &kv);
    let (mut bare, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let t = Instant::now();
        let _ = bare_decode(&mut session, &inputs.input_ids, STEPS, &kv);
        bare.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (_, g) = pipeline.greedy(&inputs, STEPS + 1, &[], Some(&forced), false).expect("pipeline greedy");
        ours.push(t.elapsed().as_secs_f64());
        assert_eq!(g.tokens, forced);
    }
    let (b, o) = (median(bare), median(ours));
    println!("decode {STEPS} steps (prompt {} tokens, {} KV pairs), median of {REPEATS}:", inputs.input_ids.len(), kv.len());
    println!("  bare session.run loop : {:8.3} ms", b * 1e3);
    println!("  OnnxPipeline::greedy  : {:8.3} ms", o * 1e3);
    println!("  overhead              : {:+.2} %", (o / b - 1.0) * 100.0);
}
