//! A run's trials and roots come from the run, not from the machine or checkout that built the
//! binary: the EPs a run selects route each build to the EPs it targets (`list` shows each
//! trial's EP), a binary copied out of the checkout judges a copy of the repository elsewhere
//! (its goldens included), and `fetch --runtimes` fills the cache so that a run without network
//! (pip unable to reach any index) still runs ONNX Runtime and ORT GenAI.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{root, text};

/// `onnx-parity` with `args` in `dir`, with `env` set (warnings-only logs).
fn run_in(bin: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin);
    c.args(args).current_dir(dir).env("ONNX_PARITY_LOG", "warn").env_remove("CARGO_MANIFEST_DIR").env_remove("ONNX_PARITY_GOLDENS");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("runs the onnx-parity binary")
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_onnx-parity"))
}

/// Guards the routing of builds to EPs, read from the case and the packages alone (nothing runs):
/// with `cpu,cuda` every build runs on the CPU under today's name; the portable export and the
/// CUDA build also on `cuda:0` (` on cuda:0` after the name); the CPU build (`export.ep: cpu`), the
/// WebGPU build and the builder's CPU package are ignored on CUDA naming their EP and where it
/// was read; the checkpoint's own implementation (candle-transformers) has no CUDA trial.
/// A CPU-only run lists no ` on ` trial at all. (No listed build needs a session to be planned, so
/// no ONNX Runtime library, CPU or GPU, is loaded.)
#[test]
fn list_prints_each_trial_with_its_ep() {
    let case = "cases/vision-language/unified-vision.yaml";
    let o = run_in(&bin(), &root(), &["list", case], &[("ONNX_PARITY_EP", "cpu,cuda")]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = |name: &str| out.lines().find(|l| l.starts_with(&format!("{name}  "))).unwrap_or_else(|| panic!("no trial {name}:\n{out}"));
    assert!(line("vision-language/unified-vision::L3").contains("[CPUExecutionProvider]  run"), "{out}");
    assert!(line("vision-language/unified-vision::L3 on cuda:0").contains("[CUDAExecutionProvider:0 (TF32 off)]  run"), "{out}");
    assert!(line("vision-language/unified-vision@cuda-f16::L3 on cuda:0").ends_with("run"), "{out}");
    assert!(line("vision-language/unified-vision@gqa::L3").ends_with("run"), "{out}");
    let gqa = line("vision-language/unified-vision@gqa::L3 on cuda:0");
    assert!(gqa.contains("ignored: a cpu build (export.ep in the case), not one for CUDAExecutionProvider"), "{gqa}");
    let webgpu = line("vision-language/unified-vision@webgpu::L1 on cuda:0");
    assert!(webgpu.contains("ignored: a webgpu build") && webgpu.contains("ONNX_PARITY_EP=webgpu"), "{webgpu}");
    assert!(!out.contains("[candle-transformers] on cuda"), "{out}");
    assert!(out.contains(" trials on cpu, cuda:0 ("), "{out}");

    let cpu = text(&run_in(&bin(), &root(), &["list", case], &[("ONNX_PARITY_EP", "cpu")]));
    assert!(!cpu.contains(" on cuda") && cpu.contains("vision-language/unified-vision@cuda-f16::L3  [CPUExecutionProvider]"), "{cpu}");
    // Without a pin in the case, the package's genai_config.json says which EP it is for.
    let dir = tempfile::tempdir().expect("temp dir");
    let unpinned = dir.path().join("cases/causal-lm/unpinned.yaml");
    std::fs::create_dir_all(unpinned.parent().expect("parent")).expect("mkdir");
    let builder = root().join("fixtures/unified-vision/builder");
    std::fs::write(
        &unpinned,
        format!(
            "model_id: x\nmodel_type: gemma4_unified\ndtype: float16\ncheckpoint: {}\nonnx: {}\nlevels: [L1, L3]\nvariants:\n  cuda:\n    onnx: {}\nimplementations: [onnx, ort-genai]\n",
            root().join("fixtures/unified-vision/checkpoint").display(),
            builder.join("fp16-dml").display(),
            builder.join("fp16-cuda").display()
        ),
    )
    .expect("write");
    let listed = text(&run_in(&bin(), &root(), &["list", unpinned.to_str().expect("utf-8")], &[("ONNX_PARITY_EP", "cpu,cuda")]));
    let own = listed.lines().find(|l| l.starts_with("causal-lm/unpinned::L1 on cuda:0  ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(own.contains("ignored: a dml build (its genai_config.json's provider_options)"), "{own}");
    let cuda = listed.lines().find(|l| l.starts_with("causal-lm/unpinned@cuda::L1 on cuda:0  ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(cuda.ends_with("run"), "{cuda}");
    // ORT GenAI runs on the CPU only (its CUDA build is not driven): its CUDA trial says so.
    let genai =
        listed.lines().find(|l| l.starts_with("causal-lm/unpinned@cuda::L3 [ort-genai] on cuda:0  ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(genai.contains("ignored: ORT GenAI on CUDAExecutionProvider"), "{genai}");
}

/// Copies `rel` (a file or folder of the repository) under `to`.
fn copy(rel: &str, to: &Path) {
    let from = root().join(rel);
    let dest = to.join(rel);
    if from.is_file() {
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&from, &dest).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        return;
    }
    for f in support::files(&from, "") {
        let rel = f.strip_prefix(root()).expect("under the repo").display().to_string();
        copy(&rel, to);
    }
}

/// Guards issue 36's "nothing compiled in": a binary copied out of the checkout, run in a copy of
/// the repository at another path (no `CARGO_MANIFEST_DIR`, no `ONNX_PARITY_GOLDENS`), judges
/// L4 and L5 against the copy's goldens; with the copy's goldens gone, the skip names the copy's
/// folder, never the checkout the binary was built in.
#[test]
fn a_moved_binary_judges_a_moved_repository() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir");
    let moved = bin_dir.join("onnx-parity");
    std::fs::copy(bin(), &moved).expect("copy the binary");
    let repo = dir.path().join("elsewhere");
    for rel in [
        "cases/causal-lm/builder-scale.yaml",
        "goldens/causal-lm/builder-scale.json",
        "goldens/causal-lm/builder-scale_generation.json",
        "fixtures/builder-scale",
    ] {
        copy(rel, &repo);
    }
    let report = dir.path().join("r.json");
    let args = ["run", "cases/causal-lm/builder-scale.yaml", "--levels", "L4,L5", "--report", report.to_str().expect("utf-8")];
    let o = run_in(&moved, &repo, &args, &[("ONNX_PARITY_EP", "cpu")]);
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let levels = json["cases"][0]["levels"].as_array().expect("levels");
    assert_eq!(levels.iter().map(|l| l["status"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["pass", "pass"], "{json}");
    assert_eq!(json["cases"][0]["execution_provider"], "CPUExecutionProvider");

    std::fs::remove_dir_all(repo.join("goldens")).expect("rm goldens");
    let o = run_in(&moved, &repo, &args, &[("ONNX_PARITY_EP", "cpu")]);
    let out = text(&o);
    // The case was named relative to the copy: so is its golden's folder.
    assert!(out.contains("golden goldens/causal-lm/builder-scale.json is missing"), "{out}");
    assert!(!out.contains(&root().join("goldens").display().to_string()), "{out}");
}

/// Guards issue 36's offline runners: `fetch --runtimes` fills an empty cache with ONNX Runtime
/// and, for a case that lists ort-genai, onnxruntime-genai and its own ONNX Runtime; then, with
/// pip unable to reach any index (the same command proves it fails), a run of that case judges
/// its package in both the pipeline and ORT GenAI from the cache.
#[test]
fn fetch_runtimes_then_run_offline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    let case = dir.path().join("cases/causal-lm/dense-genai.yaml");
    std::fs::create_dir_all(case.parent().expect("parent")).expect("mkdir");
    let fixture = root().join("fixtures/gemma4-text-dense");
    std::fs::write(
        &case,
        format!(
            "model_id: onnx-parity/tiny-gemma4-text-dense\nmodel_type: gemma4_text\ndtype: float32\ncheckpoint: {}\nonnx: {}\n\
             inputs:\n  tensors: {}\nlevels: [L3]\ngeneration:\n  max_new_tokens: 4\n  eos_token_id: 1\nimplementations: [onnx, ort-genai]\n",
            fixture.join("checkpoint").display(),
            fixture.join("ort-genai").display(),
            fixture.join("inputs.safetensors").display()
        ),
    )
    .expect("write case");
    let case = case.to_str().expect("utf-8");
    let cache_env = ("ONNX_PARITY_CACHE", cache.to_str().expect("utf-8"));
    let o = run_in(&bin(), &root(), &["fetch", "--runtimes", "--no-hub", case], &[cache_env, ("ONNX_PARITY_EP", "cpu")]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("runtime   onnxruntime==1.31.1 -> ") && out.contains("runtime   onnxruntime-genai==0.18.0 -> "), "{out}");
    assert!(out.contains("(ORT GenAI's) -> "), "{out}");

    // No index reachable: pip itself fails, and the run does not need it.
    let offline = [("PIP_INDEX_URL", "http://127.0.0.1:9/simple"), ("PIP_NO_INDEX", "1"), ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "1")];
    let pip = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d"])
        .arg(dir.path().join("pip"))
        .arg("onnxruntime==1.31.1")
        .envs(offline)
        .output()
        .expect("python3 -m pip");
    assert!(!pip.status.success(), "pip reached an index: {}", text(&pip));
    let report = dir.path().join("r.json");
    let mut env = vec![cache_env, ("ONNX_PARITY_EP", "cpu")];
    env.extend(offline);
    let o = run_in(&bin(), &root(), &["run", case, "--report", report.to_str().expect("utf-8")], &env);
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let names: Vec<(String, String)> = json["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let l3 = c["levels"].as_array().and_then(|ls| ls.iter().find(|l| l["level"] == "L3")).cloned().unwrap_or_default();
            (c["name"].as_str().unwrap_or("").to_string(), l3["status"].as_str().unwrap_or("").to_string())
        })
        .collect();
    assert_eq!(
        names,
        [("causal-lm/dense-genai".to_string(), "pass".to_string()), ("causal-lm/dense-genai [ort-genai]".to_string(), "pass".to_string())],
        "{json}"
    );
}
