//! Exports made by other exporters than mobius, run as they were built: onnxruntime-genai's
//! model builder (its text component of a composite checkpoint, `genai_config.json`'s shared KV
//! buffers with windowed sliding layers, its int4 build with fused q/k/v and the tied table
//! gathered from the lm_head's payload).

use std::path::{Path, PathBuf};

use onnx_parity::case::{Candidate, Case, Level};
use onnx_parity::inputs::ModelInputs;
use onnx_parity::onnx::quantized::QuantizedBuild;
use onnx_parity::runtime::pipeline::{DecoderGraph, OnnxPipeline};
use onnx_parity::runtime::session::SessionOptions;
use onnx_parity::tiers::{static_skip, RunOptions};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A copy of the builder's fp32 package, its `genai_config.json` edited (`None`: removed).
fn builder_copy(edit: Option<&dyn Fn(&mut serde_json::Value)>) -> tempfile::TempDir {
    let src = repo("fixtures/unified-vision/builder/fp32");
    let dir = tempfile::tempdir().expect("tmp");
    for f in ["model.onnx", "model.onnx.data"] {
        std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
    }
    if let Some(edit) = edit {
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("genai_config.json")).expect("read")).expect("json");
        edit(&mut config);
        std::fs::write(dir.path().join("genai_config.json"), config.to_string()).expect("write");
    }
    dir
}

fn prompt() -> ModelInputs {
    // Longer than the sliding window (8), so a window's buffer wraps at prefill and decode.
    ModelInputs::from_ids((0..14).map(|i| 2 + (i * 37) % 500).collect())
}

fn greedy(dir: &Path, max_new: usize) -> Result<(Vec<f32>, Vec<i64>), String> {
    let mut p = OnnxPipeline::open_with(dir, &SessionOptions::default(), DecoderGraph::Original).map_err(|e| e.to_string())?;
    let (prefill, gen) = p.greedy(&prompt(), max_new, &[], None, false).map_err(|e| e.to_string())?;
    Ok((prefill.logits.data, gen.tokens))
}

/// Kills: the builder's windowed cache fed a growing cache (the runtime config ignored): ORT
/// refuses a past shorter than the window; driven from genai_config.json it runs, and equals the
/// builder's dense-cache build of the same weights, prefill and 10 greedy steps.
#[test]
fn windowed_shared_buffers_are_driven_from_the_runtime_config() {
    let bare = builder_copy(None);
    let e = greedy(bare.path(), 4).expect_err("a growing cache under sliding_window_cache");
    assert!(e.contains("KV cache capacity (0) must be at least local_window_size (8)"), "{e}");
    let (windowed, tokens) = greedy(&repo("fixtures/unified-vision/builder/fp32"), 10).expect("runs as built");
    let (dense, dense_tokens) = greedy(&repo("fixtures/unified-vision/builder/fp32-dense"), 10).expect("dense build");
    assert_eq!(tokens, dense_tokens);
    let worst = windowed.iter().zip(&dense).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    approx::assert_abs_diff_eq!(worst, 0.0, epsilon = 1e-5);
}

/// Kills: search.max_length not bounding the run (the shared buffers would be overrun): a run
/// longer than it is refused before running, naming the file and the numbers.
#[test]
fn max_length_bounds_a_run() {
    let short = builder_copy(Some(&|c| c["search"]["max_length"] = 16.into()));
    let e = greedy(short.path(), 4).expect_err("14 + 3 > 16");
    assert!(
        e.contains("genai_config.json: search.max_length is 16 positions, and the prompt (14 tokens) with 4 new tokens needs 17"),
        "{e}"
    );
    greedy(short.path(), 3).expect("14 + 2 fits");
    let broken = builder_copy(Some(&|c| c["search"]["max_length"] = "long".into()));
    let e = greedy(broken.path(), 1).expect_err("bad field");
    assert!(e.contains("genai_config.json: field `search.max_length`"), "{e}");
}

/// Kills: a text component run on a case with images (there is no vision encoder): its L3-L5
/// trials are skipped naming why, and its text case runs.
#[test]
fn image_trials_of_a_text_component_are_skipped() {
    let opts = RunOptions::with_goldens(repo("goldens"));
    let mut case = Case::load(&repo("cases/vision-language/unified-vision.yaml")).expect("case");
    case.onnx = Some(repo("fixtures/unified-vision/builder/fp32"));
    for level in [Level::L3, Level::L4, Level::L5] {
        let reason = static_skip(&case, &Candidate::default(), level, &opts).unwrap_or_else(|| panic!("{level} not skipped"));
        assert!(reason.starts_with("text component only:") && reason.contains("no vision encoder"), "{reason}");
    }
    let text = Case::load(&repo("cases/causal-lm/unified-vision-text.yaml")).expect("case").for_variant("builder-fp32").expect("variant");
    assert_eq!(static_skip(&text, &Candidate::default(), Level::L3, &opts), None);
}

/// Kills: the builder's fused qkv read as one parameter, or its tied table not found: the int4
/// build's weights stand for the reference's q, k and v projections (rows of one MatMulNBits)
/// and its embedding table.
#[test]
fn builder_int4_fused_and_shared_weights_are_mapped() {
    let build = QuantizedBuild::read(&repo("fixtures/unified-vision/builder/int4")).expect("reads").expect("quantized");
    let part = |key: &str| build.weights.iter().find(|w| w.key == key).map(|w| (w.shape, w.first_row));
    assert_eq!(part("layers.0.self_attn.q_proj.weight"), Some(([64, 64], Some(0))));
    assert_eq!(part("layers.0.self_attn.k_proj.weight"), Some(([32, 64], Some(64))));
    assert_eq!(part("layers.0.self_attn.v_proj.weight"), Some(([32, 64], Some(96))));
    assert_eq!(part("layers.2.self_attn.q_proj.weight"), Some(([128, 64], Some(0))));
    assert_eq!(part("layers.2.self_attn.k_proj.weight"), Some(([32, 64], Some(128))));
    assert_eq!(part("embed_tokens.weight"), Some(([512, 64], None)));
    assert_eq!(part("lm_head.weight"), Some(([512, 64], None)));
    assert!(build.weights.iter().all(|w| !w.key.contains("qkv_proj")));
    let overrides = build.dequantize().expect("dequantizes");
    // k_eq_v layers 2 and 5: the v rows repeat k's and stand for no parameter of their own.
    assert!(overrides.get("layers.2.self_attn.v_proj.weight").is_none() && overrides.get("layers.0.self_attn.v_proj.weight").is_some());
}

/// Kills: the WebGPU graph-capture rule applied against the package's runtime config, or
/// ignored: the builder's WebGPU build keeps a Shape node on its mask path and turns capture off
/// in genai_config.json (a note); the same graph with capture turned on fails L1 naming the node.
#[test]
fn graph_capture_follows_the_runtime_config() {
    use onnx_parity::case::ExportPin;
    use onnx_parity::eps::Ep;
    use onnx_parity::tiers::l1::{self, L1Inputs};
    use onnx_parity::tiers::outcome::Status;
    let config = repo("fixtures/unified-vision/checkpoint/config.json");
    let pin = ExportPin { ep: Some(Ep::Webgpu), dtype: None, static_cache: None };
    let judge = |export: &Path| l1::check_interface(L1Inputs { config: &config, export, float_dtype: "float16", pin: Some(&pin) });
    let built = repo("fixtures/unified-vision/builder/fp16-webgpu");
    let out = judge(&built);
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert!(out.message.contains("graph capture is off in the package's genai_config.json"), "{}", out.message);
    let dir = tempfile::tempdir().expect("tmp");
    for f in ["model.onnx", "model.onnx.data", "genai_config.json"] {
        std::fs::copy(built.join(f), dir.path().join(f)).expect("copy");
    }
    let path = dir.path().join("genai_config.json");
    let text = std::fs::read_to_string(&path).expect("read").replace(r#""enableGraphCapture": "0""#, r#""enableGraphCapture": "1""#);
    std::fs::write(&path, text).expect("write");
    let out = judge(dir.path());
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(
        out.message.contains("graph capture cannot execute Shape / ConstantOfShape") && out.message.contains("attn_mask_subgraph/Shape"),
        "{}",
        out.message
    );
}

/// Kills: an `exclude_embeds` build fed as if it embedded its ids, or judged as complete: its
/// decoder wants `inputs_embeds` and the package has no model that makes them, so L1 fails saying
/// so, L3-L5 are skipped naming the missing model, and a pipeline opened on it refuses to run
/// with the same reason.
#[test]
fn an_exclude_embeds_build_is_named_not_run() {
    use onnx_parity::tiers::l1::{self, L1Inputs};
    use onnx_parity::tiers::outcome::Status;
    let export = repo("fixtures/unified-vision/builder/fp32-no-embeds");
    let config = repo("fixtures/unified-vision/checkpoint/config.json");
    let out = l1::check_interface(L1Inputs { config: &config, export: &export, float_dtype: "float32", pin: None });
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(out.message.contains("input `inputs_embeds` has no embedding model to come from"), "{}", out.message);
    let opts = RunOptions::with_goldens(repo("goldens"));
    let case = Case::load(&repo("cases/causal-lm/unified-vision-text.yaml"))
        .expect("case")
        .for_variant("builder-fp32-no-embeds")
        .expect("variant");
    for level in [Level::L3, Level::L4, Level::L5] {
        let reason = static_skip(&case, &Candidate::variant("builder-fp32-no-embeds"), level, &opts)
            .unwrap_or_else(|| panic!("{level} not skipped"));
        assert!(reason.starts_with("no embedding model:") && reason.contains("exclude_embeds"), "{reason}");
    }
    let e = greedy(&export, 2).expect_err("nothing makes inputs_embeds");
    assert!(e.contains("input `inputs_embeds` needs an embedding model and the package has none"), "{e}");
}
