//! Blaming the right component: sub-models judged on the reference's own inputs, layers judged
//! where they stand, and the reproducer bundle of the first divergence (`onnx-parity repro`),
//! on the committed fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_parity::onnx::feed::FeedTensor;
use onnx_parity::onnx::proto::ModelProto;
use onnx_parity::runtime::session::{self, ModelSource, SessionOptions};
use prost::Message;

mod support;
use support::{cli, root, text};

/// The L3 metrics of each trial `run --levels L3 --report` wrote for `case`, by trial id.
fn l3_metrics(case: &str) -> Vec<(String, serde_json::Map<String, serde_json::Value>)> {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let o = cli(&["run", case, "--levels", "L3", "--report", report.to_str().unwrap()]);
    assert!(report.exists(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in r["cases"].as_array().expect("cases") {
        let id = c["name"].as_str().unwrap_or_default().to_string();
        for l in c["levels"].as_array().expect("levels") {
            if l["level"] == "L3" {
                out.push((id.clone(), l["metrics"].as_object().cloned().unwrap_or_default()));
            }
        }
    }
    out
}

fn trial<'a>(all: &'a [(String, serde_json::Map<String, serde_json::Value>)], id: &str) -> &'a serde_json::Map<String, serde_json::Value> {
    &all.iter().find(|(i, _)| i == id).unwrap_or_else(|| panic!("no L3 of {id} in {:?}", all.iter().map(|(i, _)| i).collect::<Vec<_>>())).1
}

/// The per-layer array `key` of a trial's metrics (the test fails naming it when absent or not
/// numbers).
fn per_layer(m: &serde_json::Map<String, serde_json::Value>, key: &str) -> Vec<f64> {
    let a = m.get(key).and_then(|v| v.as_array()).unwrap_or_else(|| panic!("no {key} in {m:?}"));
    a.iter().map(|v| v.as_f64().unwrap_or_else(|| panic!("{key}: {v} is not a number"))).collect()
}

/// Guards the two corrections on unified-vision: the eps-only default export's decoder
/// is cleared in isolation (its image_features differ, the decoder fed the reference's
/// inputs_embeds agrees), and the GQA build, whose vision encoder also differs, blames decoder
/// layer 0's self_attn (the dropped bidirectional block) instead of "no layer blamed".
#[test]
fn isolation_clears_the_default_decoder_and_blames_the_gqa_one() {
    let all = l3_metrics("cases/vision-language/unified-vision.yaml");
    let default = trial(&all, "vision-language/unified-vision");
    assert_eq!(default["first_divergence"], "image_features");
    assert_eq!(default["decoder_isolated_pass"], true, "{default:?}");
    let atol = default["atol"].as_f64().unwrap();
    assert!(default["decoder_isolated_max_abs_diff"].as_f64().unwrap() < atol, "{default:?}");
    assert!(default["vision_encoder_isolated_max_abs_diff"].as_f64().unwrap() > atol, "{default:?}");
    assert!(!default.contains_key("first_divergent_layer"), "{default:?}");
    let gqa = trial(&all, "vision-language/unified-vision@gqa");
    assert_eq!(gqa["first_divergent_layer"], 0, "{gqa:?}");
    assert_eq!(gqa["divergent_module"], "layer 0 self_attn", "{gqa:?}");
    assert_eq!(gqa["decoder_isolated_pass"], false);
    let local = gqa["layer_local_max_abs_diff"].as_array().unwrap();
    assert_eq!(local.len(), gqa["layer_max_abs_diff"].as_array().unwrap().len());
}

/// Guards the local gate on a deliberately broken export: only layer 3 (whose MLP weight was
/// perturbed) exceeds the tolerance fed the reference's stream; layers 4 and 5, which inherit
/// its error when propagated, agree where they stand; the part named is its mlp.
#[test]
fn local_errors_blame_only_the_broken_layer() {
    let all = l3_metrics("cases/causal-lm/broken-mlp-layer.yaml");
    let m = trial(&all, "causal-lm/broken-mlp-layer");
    let tol = m["atol"].as_f64().unwrap();
    let local = per_layer(m, "layer_local_max_abs_diff");
    let propagated = per_layer(m, "layer_max_abs_diff");
    let over: Vec<usize> = local.iter().enumerate().filter(|(_, d)| **d > tol).map(|(i, _)| i).collect();
    assert_eq!(over, [3], "local {local:?}");
    assert!(propagated[4] > tol && propagated[5] > tol, "propagated {propagated:?}");
    assert_eq!(m["divergent_module"], "layer 3 mlp");
}

/// Guards the local layer runs of a graph without layer names (torch.onnx's dynamo export, cut at
/// each layer's `layer_scalar` product): fed the arbiter's stream, only layer 1 of the mutant
/// (its scalar ×1.01) exceeds its local floor, the layers after it, which inherit its error when
/// propagated, agree where they stand, and inside layer 1 every module agrees; the correct dynamo
/// build agrees at every layer.
#[test]
fn dynamo_layers_are_judged_where_they_stand() {
    let all = l3_metrics("cases/causal-lm/gemma4-text-dense.yaml");
    let ratios = |id: &str, key: &str| per_layer(trial(&all, id), key);
    let k = trial(&all, "causal-lm/gemma4-text-dense@dynamo-mutant")["calibrated_k"].as_f64().unwrap();
    let local = ratios("causal-lm/gemma4-text-dense@dynamo-mutant", "layer_local_calibrated_ratio");
    let propagated = ratios("causal-lm/gemma4-text-dense@dynamo-mutant", "layer_calibrated_ratio");
    let over: Vec<usize> = local.iter().enumerate().filter(|(_, r)| **r > k).map(|(i, _)| i).collect();
    assert_eq!(over, [1], "local {local:?}");
    assert!(propagated[2..].iter().all(|r| *r > k), "propagated {propagated:?}");
    // The modules inside come from the module path dynamo records beside each node: every one of
    // them agrees, so the blame is what follows them (the mutated layer_scalar).
    let m = trial(&all, "causal-lm/gemma4-text-dense@dynamo-mutant");
    assert_eq!(m["divergent_module"], "layer 1 after its modules (residual adds, per-layer input, layer_scalar)", "{m:?}");
    let good = ratios("causal-lm/gemma4-text-dense@dynamo", "layer_local_calibrated_ratio");
    assert_eq!(good.len(), local.len());
    assert!(good.iter().all(|r| *r <= k), "dynamo local {good:?}");
}

/// Guards the local layer runs of ORT GenAI builder exports, whose layer boundaries are sums made
/// inside the next layer's fused input norm (the cut splits it into the sum and a norm of the fed
/// stream): the builder mutant (layer 2's post-feedforward norm weight ×1.01) is blamed on layer 2
/// alone and on that norm inside it; the rounded embedding scale of `builder-scale` blames no
/// layer (each agrees where it stands), only `inputs_embeds`.
#[test]
fn builder_layers_are_judged_where_they_stand() {
    let all = l3_metrics("cases/causal-lm/unified-vision-text.yaml");
    let m = trial(&all, "causal-lm/unified-vision-text@builder-fp32-mutant");
    let k = m["calibrated_k"].as_f64().unwrap();
    let local = per_layer(m, "layer_local_calibrated_ratio");
    let over: Vec<usize> = local.iter().enumerate().filter(|(_, r)| **r > k).map(|(i, _)| i).collect();
    assert_eq!(over, [2], "local {local:?}");
    assert_eq!(m["divergent_module"], "layer 2 post_feedforward_layernorm");
    let good = per_layer(trial(&all, "causal-lm/unified-vision-text@builder-fp32"), "layer_local_calibrated_ratio");
    assert!(good.len() == local.len() && good.iter().all(|r| *r <= k), "builder-fp32 local {good:?}");
    // The float16 builds keep the residual stream in float32 (a Cast after the embedding): the
    // cut's local inputs are fed in the type it declares, not the activations' float16.
    let f16 = per_layer(trial(&all, "causal-lm/unified-vision-text@builder-fp16-cuda"), "layer_local_calibrated_ratio");
    assert!(f16.len() == local.len() && f16.iter().all(|r| *r <= k), "builder-fp16-cuda local {f16:?}");

    let all = l3_metrics("cases/causal-lm/builder-scale.yaml");
    let m = trial(&all, "causal-lm/builder-scale");
    assert_eq!(m["first_divergence"], "inputs_embeds", "{m:?}");
    assert!(!m.contains_key("first_divergent_layer"), "{m:?}");
    let local = per_layer(m, "layer_local_calibrated_ratio");
    assert!(local.iter().all(|r| *r <= k), "builder-scale local {local:?}");
}

/// Reads a bundle's `test_data_set_0/<prefix>_N.pb` in order.
fn pbs(dir: &Path, prefix: &str) -> Vec<(String, FeedTensor)> {
    let mut out = Vec::new();
    for i in 0.. {
        let p = dir.join("test_data_set_0").join(format!("{prefix}_{i}.pb"));
        let Ok(bytes) = std::fs::read(&p) else { break };
        out.push(FeedTensor::from_tensor_proto(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
    }
    out
}

/// The bundle's model run through the `ort` crate on its inputs: each output as f32.
fn run_bundle(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let mut s = session::open(ModelSource::File(&dir.join("model.onnx")), &SessionOptions::default()).expect("the bundle loads");
    let inputs: Vec<(String, ort::value::DynValue)> = pbs(dir, "input").into_iter().map(|(n, t)| (n, t.to_value().unwrap())).collect();
    let names: Vec<String> = pbs(dir, "output").into_iter().map(|(n, _)| n).collect();
    let out = s.run(inputs).expect("the bundle runs");
    names.iter().map(|n| (n.clone(), out[n.as_str()].try_extract_tensor::<f32>().unwrap().1.to_vec())).collect()
}

/// Python with onnxruntime, onnx and numpy for `reproduce.py`: installed by pip into
/// `target/repro-python` once (CI machines reach the package registry, as the runtime fetch does).
fn repro_python() -> (String, PathBuf) {
    let dir = root().join("target").join("repro-python");
    let marker = dir.join(".installed-onnxruntime-1.31.1");
    if !marker.exists() {
        let o = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
            .arg(&dir)
            .args(["onnxruntime==1.31.1", "onnx", "numpy"])
            .output()
            .expect("python3 runs");
        assert!(o.status.success(), "pip could not install onnxruntime, onnx and numpy for reproduce.py: {}", text(&o));
        std::fs::write(&marker, b"").unwrap();
    }
    ("python3".into(), dir)
}

/// Guards the bundle of `causal-lm/broken-mlp-layer`: it holds layer 3 and nothing of the other
/// layers' weights (nodes of other layers only as shared constants), reproduces through the `ort`
/// crate (layer 3's output outside the tolerance, its attention within), `reproduce.py` exits 1
/// on it and 0 once its expected outputs are what ONNX Runtime computes.
#[test]
fn broken_layer_bundle_holds_only_layer_3_and_reproduces() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle");
    let o = cli(&["repro", "cases/causal-lm/broken-mlp-layer.yaml", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("decoder layer 3 (layer 3 mlp)"), "{}", text(&o));
    for f in ["model.onnx", "model.onnx.data", "reproduce.py", "README.md", "test_data_set_0/input_0.pb", "test_data_set_0/output_0.pb"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for what in ["decoder layer 3", "ONNX Runtime | 1.31.1", "transformers |", "onnx-parity |", "repro", "deliberately broken export"] {
        assert!(readme.contains(what), "README lacks {what:?}:\n{readme}");
    }

    let model = ModelProto::decode(std::fs::read(out.join("model.onnx")).unwrap().as_slice()).unwrap();
    let g = model.graph.unwrap();
    let layer_of = |name: &str| {
        name.split(['/', '.']).collect::<Vec<_>>().windows(2).find(|w| w[0] == "layers").and_then(|w| w[1].parse::<usize>().ok())
    };
    for t in &g.initializer {
        assert!(layer_of(&t.name).is_none_or(|l| l == 3), "initializer {} of another layer", t.name);
    }
    assert!(g.initializer.iter().any(|t| t.name.contains("layers.3.mlp.down_proj")));
    for n in &g.node {
        assert!(layer_of(&n.name).is_none_or(|l| l == 3) || n.op_type == "Constant", "node {} ({}) of another layer", n.name, n.op_type);
        assert!(!n.name.starts_with("lm_head"), "{}", n.name);
    }
    let data = std::fs::metadata(out.join("model.onnx.data")).unwrap().len();
    let whole = std::fs::metadata(root().join("fixtures/broken-mlp-layer/onnx/model.onnx.data")).unwrap().len();
    assert!(data * 3 < whole, "the bundle's data ({data} B) is not a small part of the export's ({whole} B)");

    // Through the ort crate: the layer output reproduces, the attention output agrees.
    let expected = pbs(&out, "output");
    let got = run_bundle(&out);
    let worst = |i: usize| got[i].1.iter().zip(expected[i].1.to_f32()).map(|(a, e)| (a - e).abs()).fold(0.0f32, f32::max);
    assert!(worst(0) > 1e-2, "layer 3's output does not reproduce the mismatch: {}", worst(0));
    let attn = expected.iter().position(|(n, _)| n.contains("self_attn.o_proj")).expect("self_attn output in the bundle");
    approx::assert_abs_diff_eq!(worst(attn), 0.0, epsilon = 1e-5);

    // reproduce.py with plain onnxruntime.
    let (python, site) = repro_python();
    let py = |dir: &Path| Command::new(&python).arg(dir.join("reproduce.py")).env("PYTHONPATH", &site).output().unwrap();
    let o = py(&out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("the mismatch reproduces"), "{}", text(&o));
    for (i, (name, values)) in got.iter().enumerate() {
        let t = FeedTensor::f32(expected[i].1.shape.clone(), values.clone());
        std::fs::write(out.join(format!("test_data_set_0/output_{i}.pb")), t.tensor_proto(name)).unwrap();
    }
    let o = py(&out);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("does not reproduce"), "{}", text(&o));
}

/// Guards: a passing case gets no bundle (and says so); an existing non-empty folder is never
/// overwritten; L4 is refused with the reason.
#[test]
fn repro_writes_nothing_for_a_passing_case() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle");
    let o = cli(&["repro", "cases/causal-lm/unified-text-kvshare.yaml", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("passes: no divergence to reproduce, nothing written"), "{}", text(&o));
    assert!(!out.exists());
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep"), b"x").unwrap();
    let o = cli(&["repro", "cases/causal-lm/broken-mlp-layer.yaml", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("exists and is not empty"), "{}", text(&o));
    assert!(out.join("keep").exists());
    let o = cli(&["repro", "cases/causal-lm/broken-mlp-layer.yaml", "--level", "L4", "--out", tmp.path().join("b2").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("use --level L3"), "{}", text(&o));
}

/// Guards the sub-model bundle: with no layer to blame (the eps-only default unified-vision
/// export), the bundle is the vision encoder on the pixel values, and it reproduces.
#[test]
fn component_bundle_when_no_layer_is_blamed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle");
    let o = cli(&["repro", "cases/vision-language/unified-vision.yaml", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(": vision_encoder"), "{}", text(&o));
    let names: Vec<String> = pbs(&out, "input").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["pixel_values", "pixel_position_ids"]);
    let got = run_bundle(&out);
    let e = pbs(&out, "output");
    let worst = got[0].1.iter().zip(e[0].1.to_f32()).map(|(a, e)| (a - e).abs()).fold(0.0f32, f32::max);
    assert!(worst > 1e-3, "{worst}");
}
