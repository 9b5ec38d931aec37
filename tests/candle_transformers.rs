//! candle-transformers 0.11.1's gemma4 measured against the reference and HF's oracle on every
//! gemma4 fixture, and each divergence on the one it can run (gemma4-text-dense) accounted for
//! by neutralising it in the weights or the config: what is left after that is float rounding.
//! The source lines behind each difference: docs/candle-transformers-gemma4-vs-hf.md.

mod support;

use std::path::{Path, PathBuf};

use onnx_parity::backend::candle_transformers::{CandleTransformersError, CandleTransformersGemma4};
use onnx_parity::backend::reference::ReferenceBackend;
use onnx_parity::backend::{Backend, BackendError, GenerationRequest};
use onnx_parity::inputs::ModelInputs;
use onnx_parity::outputs::Run;
use support::{cli, max_abs, root, text};

/// One f32 tensor of a safetensors file, flattened.
fn read_f32(path: &Path, name: &str) -> Vec<f32> {
    support::read_f32(path, name).1
}

/// The dense fixture's sliding window (its config.json).
const WINDOW: usize = 8;

fn fixture(name: &str) -> PathBuf {
    root().join("fixtures").join(name)
}

/// Per-position max |a − b| of two `[1, S, V]` logits.
fn per_position(a: &[f32], b: &[f32], vocab: usize) -> Vec<f32> {
    a.chunks(vocab).zip(b.chunks(vocab)).map(|(x, y)| max_abs(x, y)).collect()
}

fn inputs(name: &str) -> ModelInputs {
    onnx_parity::inputs::load_safetensors(&fixture(name).join("inputs.safetensors")).expect("fixture inputs")
}

/// Prefill logits at every position, then 8 greedy tokens.
fn run(backend: &mut dyn Backend, inputs: &ModelInputs) -> Result<Run, BackendError> {
    let request = GenerationRequest { max_new_tokens: 8, eos: &[1], forced: None, all_position_logits: true, layer_outputs: false };
    backend.run(inputs, &request)
}

fn reference(dir: &Path, inputs: &ModelInputs) -> Run {
    let mut r = ReferenceBackend::load(dir, None).expect("reference loads");
    run(&mut r, inputs).expect("reference runs")
}

fn candle_transformers(dir: &Path, inputs: &ModelInputs) -> Run {
    let mut c = CandleTransformersGemma4::load_unchecked(dir).expect("candle-transformers loads");
    run(&mut c, inputs).expect("candle-transformers runs")
}

/// A copy of checkpoint `src` with its config and f32 tensors edited (`edit(name, head_dim of
/// its layer, values)`).
fn edited_checkpoint(src: &Path, config: impl Fn(&mut serde_json::Value), edit: impl Fn(&str, usize, &mut [f32])) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("json");
    let head_dim = |name: &str| -> usize {
        let layer: Option<usize> = name.split("layers.").nth(1).and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok());
        let full = layer.and_then(|l| cfg["layer_types"].get(l)).and_then(|t| t.as_str()) == Some("full_attention");
        cfg[if full { "global_head_dim" } else { "head_dim" }].as_u64().unwrap_or(0) as usize
    };
    let bytes = std::fs::read(src.join("model.safetensors")).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}: the fixtures are f32");
        let mut v: Vec<f32> = view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        edit(&name, head_dim(&name), &mut v);
        tensors.push((name, view.shape().to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, d)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).expect("view")))
        .collect();
    let out = safetensors::serialize(views, None).expect("serialize");
    std::fs::write(dir.path().join("model.safetensors"), out).expect("write weights");
    config(&mut cfg);
    std::fs::write(dir.path().join("config.json"), serde_json::to_string_pretty(&cfg).expect("json")).expect("write config");
    dir
}

fn is_norm(name: &str) -> bool {
    name.ends_with("layernorm.weight") || name.ends_with("_norm.weight") || name == "model.norm.weight"
}

/// The dense fixture's weights rewritten so candle-transformers computes HF's function where the
/// two differ in arithmetic only: RMSNorm `(1 + w′)` with `w′ = w − 1` (HF scales by `w`), the
/// attention's 1/√d folded into q_norm (`w′ = w·√d − 1`; HF's scale is 1), `layer_scalar` 1
/// (candle-transformers has none).
fn neutralised_for_candle_transformers(src: &Path) -> tempfile::TempDir {
    edited_checkpoint(
        src,
        |_| {},
        |name, head_dim, v| {
            if name.ends_with("self_attn.q_norm.weight") {
                v.iter_mut().for_each(|x| *x = *x * (head_dim as f32).sqrt() - 1.0);
            } else if is_norm(name) {
                v.iter_mut().for_each(|x| *x -= 1.0);
            } else if name.ends_with("layer_scalar") {
                v.iter_mut().for_each(|x| *x = 1.0);
            }
        },
    )
}

/// The dense fixture with `layer_scalar` 1 (and the sliding window `window`), for the reference.
fn hf_with_unit_layer_scalar(src: &Path, window: usize) -> tempfile::TempDir {
    edited_checkpoint(
        src,
        |c| c["sliding_window"] = window.into(),
        |name, _, v| {
            if name.ends_with("layer_scalar") {
                v.iter_mut().for_each(|x| *x = 1.0);
            }
        },
    )
}

/// Guards docs/exporters.md's table: on gemma4-text-dense candle-transformers is far from HF (and from
/// the reference, which is HF to rounding); with norms, attention scale and layer_scalar
/// neutralised it equals the reference at the positions the sliding window does not cut
/// (i < W), differs from position W on, and equals the reference with window W + 1 at every
/// prefill position: its prefill mask admits W + 1 keys. Nothing else differs.
#[test]
fn dense_fixture_divergences_are_norms_scale_layer_scalar_and_the_window() {
    let dense = fixture("gemma4-text-dense");
    let ckpt = dense.join("checkpoint");
    let ids = inputs("gemma4-text-dense");
    let oracle = read_f32(&dense.join("oracle.safetensors"), "logits");
    let vocab = 512;

    let ct = candle_transformers(&ckpt, &ids);
    let reference_run = reference(&ckpt, &ids);
    let vs_oracle = max_abs(&ct.prefill.logits.data, &oracle);
    let vs_reference = max_abs(&ct.prefill.logits.data, &reference_run.prefill.logits.data);
    let reference_vs_oracle = max_abs(&reference_run.prefill.logits.data, &oracle);
    eprintln!("as released: candle-transformers vs HF oracle {vs_oracle:.4}, vs reference {vs_reference:.4}; reference vs oracle {reference_vs_oracle:.2e}");
    eprintln!("greedy: candle-transformers {:?}, reference {:?}", ct.generation.tokens, reference_run.generation.tokens);
    assert!(reference_vs_oracle < 1e-4, "the reference is HF's function: {reference_vs_oracle}");
    assert!(vs_oracle > 1.0 && vs_reference > 1.0, "candle-transformers 0.11.1 is not HF's gemma4 here: {vs_oracle} / {vs_reference}");
    let embeds = read_f32(&dense.join("oracle.safetensors"), "inputs_embeds");
    let ct_embeds = &ct.prefill.components[&onnx_parity::outputs::Component::InputsEmbeds].data;
    approx::assert_abs_diff_eq!(max_abs(ct_embeds, &embeds), 0.0, epsilon = 1e-5);

    let ct_neutral = neutralised_for_candle_transformers(&ckpt);
    let ct = candle_transformers(ct_neutral.path(), &ids);
    let hf_w = hf_with_unit_layer_scalar(&ckpt, WINDOW);
    let by_position = per_position(&ct.prefill.logits.data, &reference(hf_w.path(), &ids).prefill.logits.data, vocab);
    let shown: Vec<String> = by_position.iter().map(|d| format!("{d:.1e}")).collect();
    eprintln!("neutralised, vs reference window {WINDOW}, per position: {}", shown.join(" "));
    let inside = by_position[..WINDOW].iter().copied().fold(0.0, f32::max);
    let beyond = by_position[WINDOW..].iter().copied().fold(f32::INFINITY, f32::min);
    approx::assert_abs_diff_eq!(inside, 0.0, epsilon = 1e-4);
    assert!(beyond > 1e-2, "from position {WINDOW} on the window differs: {by_position:?}");

    let hf_w1 = hf_with_unit_layer_scalar(&ckpt, WINDOW + 1);
    let all = max_abs(&ct.prefill.logits.data, &reference(hf_w1.path(), &ids).prefill.logits.data);
    eprintln!("neutralised, vs reference window {}: {all:.2e}", WINDOW + 1);
    approx::assert_abs_diff_eq!(all, 0.0, epsilon = 1e-4);
}

/// HF's head on a hidden state `[H]`: final RMSNorm (`x̂·w`, eps 1e-6), tied `lm_head`,
/// softcapping 30 (the dense fixture's config).
fn hf_head(h: &[f32], norm: &[f32], embed: &[f32]) -> Vec<f32> {
    let rms = (h.iter().map(|x| x * x).sum::<f32>() / h.len() as f32 + 1e-6).sqrt();
    let y: Vec<f32> = h.iter().zip(norm).map(|(x, w)| x / rms * w).collect();
    embed.chunks(h.len()).map(|row| (row.iter().zip(&y).map(|(a, b)| a * b).sum::<f32>() / 30.0).tanh() * 30.0).collect()
}

/// Guards the "first divergent layer" column: with norms, scale and layer_scalar neutralised,
/// candle-transformers cut to its first k layers (last position, S = 24 > W) against HF's head
/// on the reference's layer k − 1 output: layer 0, the first sliding layer, already differs
/// (its W + 1-key prefill window); against the reference with window W + 1 no layer differs.
/// (As released, layer 0 differs anyway: its input_layernorm scales by 1 + w.)
#[test]
fn first_divergent_layer_is_0_the_sliding_window() {
    let ckpt = fixture("gemma4-text-dense").join("checkpoint");
    let ids = inputs("gemma4-text-dense");
    let weights = ckpt.join("model.safetensors");
    let (norm, embed) = (read_f32(&weights, "model.norm.weight"), read_f32(&weights, "model.embed_tokens.weight"));
    let ct_neutral = neutralised_for_candle_transformers(&ckpt);
    let layers_of = |window: usize| -> Vec<Vec<f32>> {
        let hf = hf_with_unit_layer_scalar(&ckpt, window);
        let mut r = ReferenceBackend::load(hf.path(), None).expect("reference loads");
        let request = GenerationRequest { max_new_tokens: 0, eos: &[1], forced: None, all_position_logits: false, layer_outputs: true };
        match r.run(&ids, &request).expect("reference runs").prefill.layers {
            onnx_parity::outputs::LayerOutputs::Tensors(t) => t.into_iter().map(|d| d.data[d.data.len() - 64..].to_vec()).collect(),
            other => panic!("reference layers: {other:?}"),
        }
    };
    let (w, w1) = (layers_of(WINDOW), layers_of(WINDOW + 1));
    let mut table = Vec::new();
    for k in 1..=6usize {
        let cut = tempfile::tempdir().expect("temp dir");
        std::fs::copy(ct_neutral.path().join("model.safetensors"), cut.path().join("model.safetensors")).expect("copy");
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(ct_neutral.path().join("config.json")).expect("config")).expect("json");
        c["num_hidden_layers"] = k.into();
        let types: Vec<serde_json::Value> = c["layer_types"].as_array().expect("layer_types")[..k].to_vec();
        c["layer_types"] = types.into();
        std::fs::write(cut.path().join("config.json"), c.to_string()).expect("write config");
        let mut backend = CandleTransformersGemma4::load(cut.path()).expect("cut loads");
        let request = GenerationRequest { max_new_tokens: 0, eos: &[1], forced: None, all_position_logits: false, layer_outputs: false };
        let last = backend.run(&ids, &request).expect("runs").prefill.logits.data;
        table.push((k - 1, max_abs(&last, &hf_head(&w[k - 1], &norm, &embed)), max_abs(&last, &hf_head(&w1[k - 1], &norm, &embed))));
    }
    eprintln!("layer → max |Δ last-position logits| vs reference window {WINDOW} / {}: {table:?}", WINDOW + 1);
    assert!(table[0].1 > 1e-2, "layer 0 differs: {table:?}");
    assert!(table.iter().all(|t| t.2 < 1e-4), "with window W + 1 no layer differs: {table:?}");
}

/// Guards: every other gemma4 fixture uses what the crate lacks. `load` names each feature (a
/// skip, never a silently different model); `load_unchecked` (a user calling the crate) either
/// fails naming the tensor it looked for or runs a different function, measured against HF's
/// oracle here.
#[test]
fn every_other_gemma4_fixture_is_unsupported_and_named() {
    let cases: [(&str, &[&str]); 6] = [
        ("gemma4-text-ple", &["per-layer embeddings", "KV sharing", "double-wide"]),
        ("gemma4-text-moe", &["MoE", "attention_k_eq_v"]),
        ("gemma4-vision", &["per-layer embeddings", "KV sharing"]),
        ("gemma4-vision-large", &["attention_k_eq_v"]),
        ("unified-text-kvshare", &["gemma4_unified_text"]),
        ("unified-vision", &["gemma4_unified"]),
    ];
    for (name, named) in cases {
        let ckpt = fixture(name).join("checkpoint");
        let e = CandleTransformersGemma4::load(&ckpt).expect_err("unsupported");
        let m = e.to_string();
        assert!(matches!(e, CandleTransformersError::Unsupported(_)), "{name}: {m}");
        for n in named {
            assert!(m.contains(n), "{name}: {m} should name {n}");
        }
        match CandleTransformersGemma4::load_unchecked(&ckpt) {
            Err(e @ CandleTransformersError::Load { .. }) => {
                let m = e.to_string();
                eprintln!("{name}: load_unchecked: {m}");
                assert!(m.contains("model.") && m.contains(".weight"), "{name}: a load error names the tensor: {m}");
            }
            Err(e @ CandleTransformersError::Unsupported(_)) => eprintln!("{name}: load_unchecked: {e}"),
            Err(e) => panic!("{name}: unexpected error {e}"),
            Ok(mut backend) => {
                let ids = inputs(name);
                let run = run(&mut backend, &ids).expect("runs");
                let oracle = read_f32(&fixture(name).join("oracle.safetensors"), "logits");
                let d = max_abs(&run.prefill.logits.data, &oracle);
                eprintln!("{name}: load_unchecked runs; max |Δlogits| vs HF oracle {d:.4}");
                assert!(d > 0.1, "{name}: the ignored features must show: {d}");
            }
        }
    }
}

/// Guards a finding: HF reads num_global_key_value_heads only with attention_k_eq_v
/// (modeling_gemma4.py:1195-1197); candle-transformers sizes every full layer's K/V by it
/// (text.rs:257-260). The dense fixture with the field set is the same model to HF; `load` says
/// why it is not run, `load_unchecked` fails naming the tensor that does not fit.
#[test]
fn num_global_key_value_heads_without_k_eq_v_is_named() {
    let ckpt = fixture("gemma4-text-dense").join("checkpoint");
    let edited = edited_checkpoint(&ckpt, |c| c["num_global_key_value_heads"] = 1.into(), |_, _, _| {});
    let e = CandleTransformersGemma4::load(edited.path()).expect_err("unsupported").to_string();
    assert!(e.contains("num_global_key_value_heads 1 without attention_k_eq_v"), "{e}");
    let e = CandleTransformersGemma4::load_unchecked(edited.path()).expect_err("does not fit").to_string();
    assert!(e.contains("model.layers.5.self_attn.k_proj.weight") && e.contains("[32, 64]") && e.contains("[64, 64]"), "{e}");
}

/// Guards: a NaN weight is an error naming the tensor, never logits that pass or fail.
#[test]
fn a_nan_weight_is_an_error() {
    let ckpt = fixture("gemma4-text-dense").join("checkpoint");
    let broken = edited_checkpoint(
        &ckpt,
        |_| {},
        |name, _, v| {
            if name == "model.layers.2.mlp.down_proj.weight" {
                v[0] = f32::NAN;
            }
        },
    );
    let mut backend = CandleTransformersGemma4::load(broken.path()).expect("loads");
    let e = run(&mut backend, &inputs("gemma4-text-dense")).expect_err("NaN must not pass");
    assert!(e.to_string().contains("candle-transformers") && e.to_string().contains("logits"), "{e}");
}

/// `onnx-parity logits --implementation candle-transformers` on a fixture's checkpoint and inputs.
fn logits_of(fixture_name: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let f = fixture(fixture_name);
    let (checkpoint, inputs) = (f.join("checkpoint"), f.join("inputs.safetensors"));
    let mut args = vec!["logits", "--implementation", "candle-transformers", "--checkpoint"];
    args.extend([checkpoint.to_str().expect("utf-8"), "--inputs", inputs.to_str().expect("utf-8"), "--out"]);
    args.push(out.to_str().expect("utf-8"));
    args.extend(extra);
    cli(&args)
}

/// Guards the CLI: `logits --implementation candle-transformers` dumps what the other
/// implementations dump (same tensor names, so `compare` applies), and refuses a model it
/// cannot run, naming the feature.
#[test]
fn logits_cli_runs_candle_transformers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("ct.safetensors");
    let o = logits_of("gemma4-text-dense", &out, &["--greedy", "8"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("candle-transformers 0.11.1"), "{}", text(&o));
    assert_eq!(read_f32(&out, "logits").len(), 24 * 512);
    let oracle = fixture("gemma4-text-dense").join("oracle.safetensors");
    let compare = cli(&["compare", out.to_str().expect("utf-8"), oracle.to_str().expect("utf-8")]);
    assert_eq!(compare.status.code(), Some(1), "{}", text(&compare));
    assert!(text(&compare).contains("logits") && text(&compare).contains("DIFFERS"), "it is not HF's function: {}", text(&compare));

    let o = logits_of("gemma4-text-ple", &out, &[]);
    assert!(!o.status.success() && text(&o).contains("per-layer embeddings"), "{}", text(&o));
}

/// Guards the trial list: a case listing candle-transformers gets `… ::L3 [candle-transformers]`
/// trials for L3–L5 (none for L1/L2, which judge an export), run when the crate implements the
/// model, ignored naming the missing feature when it does not (never run and passed); a case
/// without `onnx` in its list plans no export trial; `implementations: []` is a malformed case.
#[test]
fn trials_of_other_implementations() {
    use onnx_parity::plan::{plan, TrialKind};
    let dir = tempfile::tempdir().expect("temp dir");
    let cat = dir.path().join("causal-lm");
    std::fs::create_dir_all(&cat).expect("mkdir");
    let case = |fixture_name: &str, implementations: &str| {
        let f = fixture(fixture_name);
        format!(
            "model_id: x\nmodel_type: gemma4_text\ndtype: float32\nlevels: [L1, L3, L4, L5]\ncheckpoint: {}\nonnx: {}\n\
             inputs: {{tensors: {}}}\nimplementations: {implementations}\n",
            f.join("checkpoint").display(),
            f.join("onnx").display(),
            f.join("inputs.safetensors").display()
        )
    };
    std::fs::write(cat.join("dense.yaml"), case("gemma4-text-dense", "[onnx, candle-transformers]")).expect("write");
    std::fs::write(cat.join("ple.yaml"), case("gemma4-text-ple", "[candle-transformers]")).expect("write");
    std::fs::write(cat.join("none.yaml"), case("gemma4-text-dense", "[]")).expect("write");
    let opts = onnx_parity::tiers::RunOptions::with_goldens(dir.path().join("goldens"));
    let trials = plan(&[dir.path().to_path_buf()], &opts);
    let find = |name: &str| trials.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no trial {name}"));
    assert!(matches!(find("causal-lm/dense::L3 [candle-transformers]").kind, TrialKind::Run { .. }));
    assert!(matches!(find("causal-lm/dense::L3").kind, TrialKind::Run { .. }));
    assert!(!trials.iter().any(|t| t.name.starts_with("causal-lm/dense::L1 [")), "no L1 for candle-transformers");
    match &find("causal-lm/dense::L4 [candle-transformers]").kind {
        TrialKind::Ignored { reason, .. } => assert!(reason.contains("golden"), "{reason}"),
        _ => panic!("L4 without a golden is ignored naming it"),
    }
    match &find("causal-lm/ple::L3 [candle-transformers]").kind {
        TrialKind::Ignored { reason, .. } => assert!(reason.contains("per-layer embeddings") && reason.contains("KV sharing"), "{reason}"),
        _ => panic!("an unsupported model is ignored naming what is missing"),
    }
    assert!(!trials.iter().any(|t| t.name == "causal-lm/ple::L3"), "no export trial without onnx in the list");
    let malformed = trials.iter().find(|t| t.name.contains("none.yaml")).expect("malformed trial");
    assert!(matches!(&malformed.kind, TrialKind::Failing { message } if message.contains("implementations")));
}
