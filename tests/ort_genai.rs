//! onnxruntime-genai as a judged runtime (src/backend/ort_genai.rs): the library is fetched from
//! its wheel with the ONNX Runtime its wheel requires and runs in this process beside the
//! harness's own ORT. These tests need the network once per machine (the wheels), as the
//! harness's ORT does.

use std::path::{Path, PathBuf};

mod support;

use onnx_parity::backend::ort_genai::OrtGenai;
use onnx_parity::backend::{Backend, GenerationRequest};
use onnx_parity::inputs::ModelInputs;
use onnx_parity::runtime::pipeline::{DecoderGraph, OnnxPipeline};
use onnx_parity::runtime::session::SessionOptions;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn prompt() -> ModelInputs {
    ModelInputs::from_ids((0..14).map(|i| 2 + (i * 37) % 500).collect())
}

fn request(forced: Option<&[i64]>) -> GenerationRequest<'_> {
    GenerationRequest { max_new_tokens: 6, eos: &[], forced, all_position_logits: true, layer_outputs: false }
}

/// A copy of `src`'s package with its genai_config.json edited.
fn edited(src: &Path, edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for entry in std::fs::read_dir(src).expect("list") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
    }
    let path = dir.path().join("genai_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    edit(&mut config);
    std::fs::write(&path, config.to_string()).expect("write");
    dir
}

/// Kills: a runtime read wrongly (logits of another position, a step fed twice, f16 misread):
/// ORT GenAI on the builder's windowed share-buffer package computes, at the prefill (all
/// positions), at each teacher-forced step and in its own greedy search, what the harness's
/// pipeline computes on the same package (two ORT releases, 1.32.0 and 1.31.1: equal to 1e-5).
#[test]
fn ort_genai_equals_the_pipeline_on_the_builder_package() {
    support::driver();
    let dir = repo("fixtures/unified-vision/builder/fp32");
    let mut pipeline = OnnxPipeline::open_with(&dir, &SessionOptions::default(), DecoderGraph::Original).expect("pipeline");
    let ours = pipeline.run(&prompt(), &request(None)).expect("pipeline runs");
    let mut genai = OrtGenai::open(&dir).expect("ORT GenAI opens the package");
    assert!(genai.describe().contains("ONNX Runtime GenAI 0.18.0 on ONNX Runtime 1.32.0"), "{}", genai.describe());
    let free = genai.run(&prompt(), &request(None)).expect("ORT GenAI runs");
    assert_eq!(free.prefill.logits.shape, ours.prefill.logits.shape);
    let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    approx::assert_abs_diff_eq!(worst(&free.prefill.logits.data, &ours.prefill.logits.data), 0.0, epsilon = 1e-5);
    assert_eq!(free.generation.tokens, ours.generation.tokens, "ORT GenAI's own greedy search");
    let forced = genai.run(&prompt(), &request(Some(&ours.generation.tokens))).expect("teacher-forced");
    assert_eq!(forced.generation.step_logits.len(), ours.generation.step_logits.len());
    for (k, (a, b)) in forced.generation.step_logits.iter().zip(&ours.generation.step_logits).enumerate() {
        assert!(worst(a, b) < 1e-5, "step {k}: {}", worst(a, b));
    }
    // Forcing other tokens moves the step logits: the steps are really fed.
    let other: Vec<i64> = ours.generation.tokens.iter().map(|t| (t + 1) % 512).collect();
    let moved = genai.run(&prompt(), &request(Some(&other))).expect("forced otherwise");
    assert!(worst(&moved.generation.step_logits[1], &forced.generation.step_logits[1]) > 1e-3);
}

/// Guards: a genai_config.json ORT GenAI refuses is an error with the library's message and the
/// call that failed, never a pass; one the harness cannot read names the file and field.
#[test]
fn broken_runtime_configs_are_errors_naming_the_cause() {
    support::driver();
    let src = repo("fixtures/unified-vision/builder/fp32");
    let short = edited(&src, |c| c["model"]["context_length"] = 8.into());
    let mut genai = OrtGenai::open(short.path()).expect("opens");
    let e = genai.run(&prompt(), &request(None)).err().map(|e| e.to_string()).expect("a 21-position run in a context of 8 must fail");
    assert!(e.contains("OgaCreateGenerator") && e.contains("context_length"), "{e}");
    let typeless = edited(&src, |c| {
        c["model"].as_object_mut().expect("model").remove("type");
    });
    let e = OrtGenai::open(typeless.path()).err().map(|e| e.to_string()).expect("no model.type");
    assert!(e.contains("genai_config.json") && e.contains("model.type"), "{e}");
    let none = tempfile::tempdir().expect("tmp");
    let e = OrtGenai::open(none.path()).err().map(|e| e.to_string()).expect("no config");
    assert!(e.contains("has none"), "{e}");
}
