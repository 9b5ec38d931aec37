//! The harness's decode loop against ORT GenAI's on the same package: `OnnxPipeline::greedy`
//! (ONNX Runtime 1.31.1, the KV cache moved between steps, or the shared buffers bound in place)
//! and the `ort-genai` implementation's own greedy search (onnxruntime-genai 0.18.0 on ONNX
//! Runtime 1.32.0), the same prompt and number of new tokens, for the builder's windowed
//! share-buffer package and mobius's `--runtime ort-genai` dense package. Prints the median of
//! each and their ratio. Run: `cargo bench --bench ort_genai_decode`.

mod support;

use std::path::{Path, PathBuf};

use onnx_parity::backend::ort_genai::OrtGenai;
use onnx_parity::backend::{Backend, GenerationRequest};
use onnx_parity::inputs::ModelInputs;
use onnx_parity::runtime::pipeline::{DecoderGraph, OnnxPipeline};
use onnx_parity::runtime::session::SessionOptions;

const REPEATS: usize = 7;
const NEW_TOKENS: usize = 96;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn main() -> anyhow::Result<()> {
    // A driver: the context, and the variables ORT GenAI reads, set while this has one thread.
    let context = onnx_parity::context::RunContext::from_env();
    let vars = onnx_parity::driver::variables_to_set(&context, false);
    for (k, v) in &vars {
        std::env::set_var(k, v);
    }
    onnx_parity::context::install(context.with_set(&vars));
    let inputs = ModelInputs::from_ids((0..14).map(|i| 2 + (i * 37) % 500).collect());
    let request = GenerationRequest { max_new_tokens: NEW_TOKENS, eos: &[], forced: None, all_position_logits: true, layer_outputs: false };
    for (label, rel) in [
        ("builder fp32 (windowed shared KV)", "fixtures/unified-vision/builder/fp32"),
        ("mobius --runtime ort-genai (dense)", "fixtures/gemma4-text-dense/ort-genai"),
    ] {
        let dir = repo(rel);
        let mut pipeline = OnnxPipeline::open_with(&dir, &SessionOptions::default(), DecoderGraph::Original)?;
        let (ours, our_tokens) =
            support::time(REPEATS, || pipeline.run(&inputs, &request).map(|r| r.generation.tokens).unwrap_or_default());
        let mut genai = OrtGenai::open(&dir)?;
        let (theirs, their_tokens) =
            support::time(REPEATS, || genai.run(&inputs, &request).map(|r| r.generation.tokens).unwrap_or_default());
        anyhow::ensure!(our_tokens.len() == NEW_TOKENS && our_tokens == their_tokens, "{label}: the two decodes differ");
        println!(
            "{label}: prefill 14 + {NEW_TOKENS} tokens — pipeline {:.1} ms, ORT GenAI {:.1} ms (ratio pipeline/ORT GenAI {:.2})",
            ours * 1e3,
            theirs * 1e3,
            ours / theirs
        );
    }
    Ok(())
}
