//! End-to-end checks of the `onnx-parity` binary on the committed fixtures: listing, bad input,
//! L1 contract violations, cases with absolute paths outside the repository, logits dumps, and
//! golden regeneration refusing to overwrite.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;

mod support;
use support::{cli, cli_with, max_abs, read_f32, root, text, Capture};

fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn fixture(rel: &str) -> String {
    root().join("fixtures").join(rel).display().to_string()
}

/// Guards: every committed case parses and `list` exits 0.
#[test]
fn list_committed_cases() {
    let o = cli(&["list"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("vision-language/unified-vision"), "{}", text(&o));
}

/// Guards: `logits --implementation` takes the registry's names (an unknown one is refused
/// listing them); ORT GenAI runs a builder package through its genai_config.json and equals the
/// pipeline's dump of the same package.
#[test]
fn logits_implementations_come_from_the_registry() {
    let o = cli(&["logits", "--implementation", "bogus", "--onnx", "x", "--inputs", "y", "--out", "z"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("reference, onnx, candle-transformers, ort-genai"), "{}", text(&o));
    let dir = tmpdir();
    let inputs = dir.path().join("in.safetensors").display().to_string();
    let case = root().join("cases/causal-lm/unified-vision-text.yaml").display().to_string();
    let o = cli(&["inputs", &case, "--out", &inputs]);
    assert!(o.status.success(), "{}", text(&o));
    let package = fixture("unified-vision/builder/fp32");
    let mut dumps = Vec::new();
    for implementation in ["ort-genai", "onnx"] {
        let out = dir.path().join(format!("{implementation}.safetensors")).display().to_string();
        let o = cli(&["logits", "--implementation", implementation, "--onnx", &package, "--inputs", &inputs, "--out", &out]);
        assert!(o.status.success(), "{}", text(&o));
        dumps.push(read_f32(Path::new(&out), "logits"));
    }
    assert!(text(&cli(&["logits", "--implementation", "ort-genai", "--checkpoint", &package, "--inputs", &inputs, "--out", "z"]))
        .contains("give --onnx"));
    assert_eq!(dumps[0].0, dumps[1].0, "shapes");
    approx::assert_abs_diff_eq!(max_abs(&dumps[0].1, &dumps[1].1), 0.0, epsilon = 1e-5);
}

/// Guards: an unknown key makes `list` fail, naming the key and the file.
#[test]
fn unknown_key_is_named() {
    let dir = tmpdir();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "model_id: x\nmodel_type: gemma4_unified\ndtype: float32\nlevels: [L1]\nmax_new_tokenz: 3\n").expect("write");
    let o = cli(&["list", &path.display().to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("max_new_tokenz") && t.contains("bad.yaml"), "{t}");
}

fn write_case(dir: &Path, name: &str, checkpoint: &str, onnx: &str, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "model_id: test\nmodel_type: gemma4_unified\ndtype: float32\ncheckpoint: {checkpoint}\nonnx: {onnx}\ngeneration:\n  max_new_tokens: 8\n  eos_token_id: 1\n{extra}"
    );
    std::fs::write(&path, yaml).expect("write case");
    path
}

fn report_levels(path: &Path) -> Vec<(String, String, String)> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("json");
    v["cases"][0]["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap_or("").to_string(),
                l["status"].as_str().unwrap_or("").to_string(),
                l["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Guards: L1 fails, naming the tensor and both values, when the config does not match the
/// export (KV heads and vocabulary changed in a copy of the config).
#[test]
fn l1_names_the_mismatching_tensor() {
    let dir = tmpdir();
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir_all(&ckpt).expect("mkdir");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("unified-vision/checkpoint/config.json")).expect("config")).expect("json");
    cfg["text_config"]["num_global_key_value_heads"] = 2.into();
    std::fs::write(ckpt.join("config.json"), cfg.to_string()).expect("write");
    let case = write_case(dir.path(), "mismatch", &ckpt.display().to_string(), &fixture("unified-vision/onnx"), "levels: [L1]\n");
    let report = dir.path().join("r.json");
    let o = cli(&["run", &case.display().to_string(), "--levels", "L1", "--report", &report.display().to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    let levels = report_levels(&report);
    assert_eq!(levels[0].1, "fail");
    assert!(levels[0].2.contains("past_key_values.2.key") && levels[0].2.contains("contract expects 2"), "{}", levels[0].2);
}

/// Guards: another fixture's export (text-only package for a multimodal config) fails L1. A
/// single model.onnx is judged as the composite's text component (ORT GenAI's builder writes
/// one), and the kvshare export lacks the KV pairs the unified config's layers 4 and 5 have.
#[test]
fn l1_fails_on_another_fixtures_export() {
    let dir = tmpdir();
    let case =
        write_case(dir.path(), "swapped", &fixture("unified-vision/checkpoint"), &fixture("unified-text-kvshare/onnx"), "levels: [L1]\n");
    let report = dir.path().join("r.json");
    let o = cli(&["run", &case.display().to_string(), "--levels", "L1", "--report", &report.display().to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    let levels = report_levels(&report);
    assert_eq!(levels[0].1, "fail", "{levels:?}");
    assert!(levels[0].2.contains("`past_key_values.4.key` is missing"), "{}", levels[0].2);
}

/// Guards: a case YAML outside the repository with absolute `checkpoint:`, `onnx:` and
/// `inputs.tensors:` runs L3 and writes the report; the text-only fixture passes L3.
#[test]
fn absolute_paths_outside_the_repository() {
    let dir = tmpdir();
    let extra = format!("levels: [L3]\ninputs:\n  tensors: {}\n", fixture("unified-text-kvshare/inputs.safetensors"));
    let case = write_case(dir.path(), "abs", &fixture("unified-text-kvshare/checkpoint"), &fixture("unified-text-kvshare/onnx"), &extra);
    let report = dir.path().join("r.json");
    let o = cli(&["run", &case.display().to_string(), "--levels", "L3", "--report", &report.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let levels = report_levels(&report);
    assert_eq!(levels[0].0, "L3");
    assert_eq!(levels[0].1, "pass", "{levels:?}");
}

/// Guards: an xfail on a tier that passes is reported as a failure ("unexpected pass").
#[test]
fn unexpected_pass_fails() {
    let dir = tmpdir();
    let extra =
        format!("levels: [L3]\nxfail: \"pretend broken\"\ninputs:\n  tensors: {}\n", fixture("unified-text-kvshare/inputs.safetensors"));
    let case =
        write_case(dir.path(), "unexpected", &fixture("unified-text-kvshare/checkpoint"), &fixture("unified-text-kvshare/onnx"), &extra);
    let report = dir.path().join("r.json");
    let o = cli(&["run", &case.display().to_string(), "--levels", "L3", "--report", &report.display().to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    let levels = report_levels(&report);
    assert_eq!(levels[0].1, "fail");
    assert!(levels[0].2.contains("unexpected pass"), "{}", levels[0].2);
}

fn read_i64(path: &Path, name: &str) -> Vec<i64> {
    let bytes = std::fs::read(path).expect("read safetensors");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name} in {}", path.display()));
    t.data().chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
}

/// Guards issue acceptance: `logits --checkpoint` on the two-image fixture equals the HF oracle
/// (all-position logits ≤ 1e-4, image_features ≤ 1e-5, greedy tokens identical).
#[test]
fn reference_logits_dump_matches_hf_oracle() {
    let dir = tmpdir();
    let out = dir.path().join("x.safetensors");
    let o = cli(&[
        "logits",
        "--checkpoint",
        &fixture("unified-vision/checkpoint"),
        "--inputs",
        &fixture("unified-vision/inputs.safetensors"),
        "--out",
        &out.display().to_string(),
        "--greedy",
        "8",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let oracle = root().join("fixtures/unified-vision/oracle.safetensors");
    let (shape, ours) = read_f32(&out, "logits");
    let (oshape, hf) = read_f32(&oracle, "logits");
    assert_eq!(shape, oshape);
    let d = max_abs(&ours, &hf);
    assert!(d <= 1e-4, "logits max abs diff {d}");
    let d = max_abs(&read_f32(&out, "image_features").1, &read_f32(&oracle, "image_features").1);
    assert!(d <= 1e-5, "image_features max abs diff {d}");
    assert_eq!(read_i64(&out, "greedy_tokens"), read_i64(&oracle, "greedy_tokens"));
}

/// Guards: `logits --onnx` runs the export through ORT; on the text-only fixture it agrees with
/// the HF oracle within the L3 tolerance and reproduces HF's greedy tokens.
#[test]
fn onnx_logits_dump_matches_hf_oracle() {
    let dir = tmpdir();
    let out = dir.path().join("o.safetensors");
    let o = cli(&[
        "logits",
        "--onnx",
        &fixture("unified-text-kvshare/onnx"),
        "--inputs",
        &fixture("unified-text-kvshare/inputs.safetensors"),
        "--out",
        &out.display().to_string(),
        "--greedy",
        "8",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let oracle = root().join("fixtures/unified-text-kvshare/oracle.safetensors");
    let d = max_abs(&read_f32(&out, "logits").1, &read_f32(&oracle, "logits").1);
    assert!(d <= 1e-3, "ONNX vs HF logits max abs diff {d}");
    assert_eq!(read_i64(&out, "greedy_tokens"), read_i64(&oracle, "greedy_tokens"));
}

/// Runs `logits` with `backend` (`--checkpoint DIR` or `--onnx DIR`) on a fixture's inputs and
/// returns the dump's path (inside `dir`).
fn dump(dir: &tempfile::TempDir, flag: &str, backend: &str, inputs: &str) -> PathBuf {
    let out = dir.path().join("dump.safetensors");
    let o = cli(&["logits", flag, &fixture(backend), "--inputs", &fixture(inputs), "--out", &out.display().to_string(), "--greedy", "8"]);
    assert!(o.status.success(), "{}", text(&o));
    out
}

/// Guards issue acceptance: `logits --checkpoint` works for the gemma4 family with the same
/// flags — the vision-tower + PLE fixture equals the HF oracle (logits ≤ 1e-4, image_features
/// and per_layer_inputs ≤ 1e-5, the PLE tensor in the exports' [1, S, L·P] layout), and so does
/// the MoE text fixture.
#[test]
fn gemma4_reference_logits_dumps_match_hf_oracle() {
    let dir = tmpdir();
    let out = dump(&dir, "--checkpoint", "gemma4-vision/checkpoint", "gemma4-vision/inputs.safetensors");
    let oracle = root().join("fixtures/gemma4-vision/oracle.safetensors");
    assert!(max_abs(&read_f32(&out, "logits").1, &read_f32(&oracle, "logits").1) <= 1e-4);
    assert!(max_abs(&read_f32(&out, "image_features").1, &read_f32(&oracle, "image_features").1) <= 1e-5);
    let (shape, ple) = read_f32(&out, "per_layer_inputs");
    let (oshape, hf) = read_f32(&oracle, "per_layer_inputs");
    assert_eq!(shape, vec![oshape[0], oshape[1], oshape[2] * oshape[3]]);
    assert!(max_abs(&ple, &hf) <= 1e-5);
    assert_eq!(read_i64(&out, "greedy_tokens"), read_i64(&oracle, "greedy_tokens"));

    let out = dump(&dir, "--checkpoint", "gemma4-text-moe/checkpoint", "gemma4-text-moe/inputs.safetensors");
    let oracle = root().join("fixtures/gemma4-text-moe/oracle.safetensors");
    assert!(max_abs(&read_f32(&out, "logits").1, &read_f32(&oracle, "logits").1) <= 1e-4);
    assert_eq!(read_i64(&out, "greedy_tokens"), read_i64(&oracle, "greedy_tokens"));
}

/// Guards issue acceptance: `logits --onnx` drives a gemma4_text export that computes its
/// per-layer embeddings inside (agrees with HF within the L3 tolerance, same greedy tokens).
#[test]
fn gemma4_onnx_logits_dump_matches_hf_oracle() {
    let dir = tmpdir();
    let out = dump(&dir, "--onnx", "gemma4-text-ple/onnx", "gemma4-text-ple/inputs.safetensors");
    let oracle = root().join("fixtures/gemma4-text-ple/oracle.safetensors");
    let d = max_abs(&read_f32(&out, "logits").1, &read_f32(&oracle, "logits").1);
    assert!(d <= 1e-3, "ONNX vs HF logits max abs diff {d}");
    assert_eq!(read_i64(&out, "greedy_tokens"), read_i64(&oracle, "greedy_tokens"));
}

/// Guards: `logits --onnx` drives the multimodal gemma4 protocol (vision encoder, embedding model
/// yielding inputs_embeds and per_layer_inputs, decoder taking per_layer_inputs at every step)
/// and dumps every component; on one image the export agrees with the reference's dump.
#[test]
fn gemma4_multimodal_onnx_dump_has_every_component() {
    let dir = tmpdir();
    let onnx = dump(&dir, "--onnx", "gemma4-vision/onnx", "gemma4-vision/inputs-one-image.safetensors");
    let copy = dir.path().join("onnx.safetensors");
    std::fs::rename(&onnx, &copy).expect("rename");
    let reference = dump(&dir, "--checkpoint", "gemma4-vision/checkpoint", "gemma4-vision/inputs-one-image.safetensors");
    for name in ["image_features", "inputs_embeds", "per_layer_inputs"] {
        let (a, b) = (read_f32(&copy, name), read_f32(&reference, name));
        assert_eq!(a.0, b.0, "{name} shape");
        let d = max_abs(&a.1, &b.1);
        assert!(d <= 1e-5, "{name}: ONNX vs reference {d}");
    }
    assert!(max_abs(&read_f32(&copy, "logits").1, &read_f32(&reference, "logits").1) <= 1e-3);
    assert_eq!(read_i64(&copy, "greedy_tokens"), read_i64(&reference, "greedy_tokens"));
}

/// Guards: `golden` writes new goldens, reports unchanged ones, and refuses to replace a golden
/// that differs unless --force (then replaces it, byte-identical to a fresh write).
#[test]
fn golden_refuses_to_overwrite_without_force() {
    let dir = tmpdir();
    let goldens = dir.path().join("goldens");
    let extra = format!("levels: [L4, L5]\ninputs:\n  tensors: {}\n", fixture("unified-text-kvshare/inputs.safetensors"));
    let case_dir = dir.path().join("cat");
    std::fs::create_dir_all(&case_dir).expect("mkdir");
    let case = write_case(&case_dir, "g", &fixture("unified-text-kvshare/checkpoint"), &fixture("unified-text-kvshare/onnx"), &extra);
    let args = |force: bool| {
        let mut v = vec!["golden".to_string(), case.display().to_string(), "--goldens".into(), goldens.display().to_string()];
        if force {
            v.push("--force".into());
        }
        v
    };
    let run = |force: bool| {
        let a = args(force);
        cli(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = run(false);
    assert!(o.status.success() && text(&o).contains("created"), "{}", text(&o));
    let path = goldens.join("cat/g_generation.json");
    let fresh = std::fs::read_to_string(&path).expect("golden");
    let o = run(false);
    assert!(o.status.success() && text(&o).contains("unchanged"), "{}", text(&o));
    let tampered = fresh.replacen("\"generated_tokens\": [", "\"generated_tokens\": [\n    999,", 1);
    assert_ne!(tampered, fresh, "the tamper must change the golden");
    std::fs::write(&path, tampered).expect("tamper");
    let o = run(false);
    assert!(!o.status.success() && text(&o).contains("REFUSED"), "{}", text(&o));
    assert_ne!(std::fs::read_to_string(&path).expect("golden"), fresh);
    let o = run(true);
    assert!(o.status.success() && text(&o).contains("replaced"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&path).expect("golden"), fresh);
}

/// Lays out `files` as huggingface_hub caches them: `refs/main` → sha, `snapshots/<sha>/<file>`
/// relative symlinks into `blobs/`. Returns the snapshot folder.
fn hub_cache(cache: &Path, repo: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let repo_dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    for d in ["refs", "blobs", &format!("snapshots/{sha}")] {
        std::fs::create_dir_all(repo_dir.join(d)).expect("mkdir");
    }
    std::fs::write(repo_dir.join("refs/main"), sha).expect("ref");
    for (i, (name, bytes)) in files.iter().enumerate() {
        let blob = format!("blob{i:04}");
        std::fs::write(repo_dir.join("blobs").join(&blob), bytes).expect("blob");
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), repo_dir.join("snapshots").join(sha).join(name)).expect("symlink");
    }
    repo_dir.join("snapshots").join(sha)
}

/// Guards issue acceptance: a case with only `model_id` (no `checkpoint:`, no `config:`) resolves
/// offline from a cache in huggingface_hub's layout, and L2 reports the 12B's hub parameter count
/// (audio included) from that config alone.
#[test]
fn model_id_only_case_resolves_from_the_hf_cache() {
    let dir = tmpdir();
    let config = std::fs::read(root().join("cases/configs/gemma-4-12B.json")).expect("real config");
    hub_cache(&dir.path().join("hub"), "google/gemma-4-12B", &[("config.json", &config)]);
    let cases = dir.path().join("causal-lm");
    std::fs::create_dir_all(&cases).expect("mkdir");
    let case = cases.join("gemma-4-12b.yaml");
    std::fs::write(&case, "model_id: google/gemma-4-12B\nmodel_type: gemma4_unified_text\ndtype: float32\nlevels: [L2]\n").expect("case");
    let report = dir.path().join("r.json");
    let hub = dir.path().join("hub");
    let o = cli_with(
        &["run", &case.display().to_string(), "--levels", "L2", "--report", &report.display().to_string()],
        &[("HF_HUB_OFFLINE", "1".as_ref()), ("HF_HUB_CACHE", hub.as_os_str())],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    assert_eq!(v["cases"][0]["levels"][0]["metrics"]["checkpoint_parameters"], 11_959_730_224u64, "{v}");
    // Without the cache, the same case is skipped with a reason that says what to provide.
    let empty = dir.path().join("empty");
    let o = cli_with(
        &["run", &case.display().to_string(), "--levels", "L2", "--report", &report.display().to_string()],
        &[("HF_HUB_OFFLINE", "1".as_ref()), ("HF_HUB_CACHE", empty.as_os_str())],
    );
    let (_, status, message) = report_levels(&report).remove(0);
    assert!(status == "skipped" && message.contains("no real config") && message.contains("HF cache"), "{}: {message}", text(&o));
}

/// Guards issue acceptance: `run --levels L2` on the committed 12B and 31B cases passes and
/// reports the hub figures.
#[test]
fn l2_reports_hub_parameter_counts_for_12b_and_31b() {
    let dir = tmpdir();
    for (case, count) in
        [("cases/causal-lm/gemma-4-12b.yaml", 11_959_730_224u64), ("cases/vision-language/gemma-4-31b-it.yaml", 31_273_088_876)]
    {
        let report = dir.path().join("r.json");
        let o = cli(&["run", case, "--levels", "L2", "--report", &report.display().to_string()]);
        assert!(o.status.success(), "{case}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
        assert_eq!(v["cases"][0]["levels"][0]["status"], "pass", "{v}");
        assert_eq!(v["cases"][0]["levels"][0]["metrics"]["checkpoint_parameters"], count, "{v}");
    }
}

/// Guards `inputs`: the prompt case's tensors (tokenizer + image processor) are what the
/// committed HF processor output holds, written in the layout `inputs.tensors` reads; a
/// real-model case without its checkpoint names the missing tokenizer and the `--synthetic`
/// way out; `--synthetic` on a case without a stand-in is refused.
#[test]
fn inputs_dump() {
    let dir = tmpdir();
    let out = dir.path().join("in.safetensors");
    let o = cli(&["inputs", "cases/vision-language/unified-vision-prompt.yaml", "--out", &out.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("144 ids, 2 image(s) with [63, 64] soft tokens"), "{}", text(&o));
    let got = std::fs::read(&out).expect("written");
    let want = std::fs::read(fixture("unified-vision/inputs.safetensors")).expect("fixture");
    let (got, want) = (SafeTensors::deserialize(&got).expect("ours"), SafeTensors::deserialize(&want).expect("HF's"));
    for name in ["input_ids", "pixel_values", "image_position_ids", "mm_token_type_ids"] {
        let (g, w) = (got.tensor(name).expect(name), want.tensor(name).expect(name));
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{name}");
        assert!(g.data() == w.data(), "{name} differs from the HF processor's");
    }
    let o = cli(&["inputs", "cases/vision-language/gemma-4-12b.yaml", "--out", &out.display().to_string()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--synthetic"), "{}", text(&o));
    let o = cli(&["inputs", "cases/vision-language/gemma-4-12b.yaml", "--synthetic", "--out", &out.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = cli(&["inputs", "cases/vision-language/unified-vision.yaml", "--synthetic", "--out", &out.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("no `synthetic:` stand-in"), "{}", text(&o));
}

/// A checkpoint folder of the unified-vision fixture's tokenizer, processor and config, with the
/// chat-template fixture's `chat_template.jinja` beside them when `template`.
fn chat_checkpoint(dir: &Path, template: bool) -> PathBuf {
    let ckpt = dir.join(if template { "with-template" } else { "without-template" });
    std::fs::create_dir_all(&ckpt).expect("mkdir");
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json"] {
        std::fs::copy(fixture(&format!("unified-vision/checkpoint/{f}")), ckpt.join(f)).expect("copy");
    }
    if template {
        std::fs::copy(fixture("chat-template/chat_template.jinja"), ckpt.join("chat_template.jinja")).expect("copy");
    }
    ckpt
}

/// A prompt case for `inputs` on `checkpoint` (prompt and image of fixtures/chat-template/hf.json).
fn chat_case(dir: &Path, name: &str, checkpoint: &Path, task: &str, images: bool, extra: &str) -> PathBuf {
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("chat-template/hf.json")).expect("hf.json")).expect("json");
    let images = if images { format!("  images: [{:?}]\n", fixture("unified-vision/images/a.png")) } else { String::new() };
    let yaml = format!(
        "model_id: m\nmodel_type: gemma4_unified\nrevision: r\ntask_type: {task}\ndtype: float32\nlevel: L3\ncheckpoint: {}\n{extra}inputs:\n  prompts: [{}]\n{images}",
        checkpoint.display(),
        hf["prompt"]
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).expect("write case");
    path
}

/// `onnx-parity inputs` on a case; returns the summary and the written input_ids.
fn inputs_of(case: &Path, out_dir: &Path) -> (String, Vec<i64>) {
    let out = out_dir.join(format!("{}.safetensors", case.file_stem().unwrap().to_string_lossy()));
    let o = cli(&["inputs", &case.display().to_string(), "--out", &out.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    (text(&o), read_i64(&out, "input_ids"))
}

fn hf_ids(key: &str) -> Vec<i64> {
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("chat-template/hf.json")).expect("hf.json")).expect("json");
    serde_json::from_value(hf[key]["input_ids"].clone()).expect("input_ids")
}

/// Guards (chat templates): an image-text-to-text case whose tokenizer has a template renders
/// one user turn, image first, and gets exactly HF's `apply_chat_template(..., tokenize=True)`
/// ids — one BOS, from the template, none added by the tokenizer; a text-only prompt as well;
/// the summary names the template file.
#[test]
fn inputs_through_the_chat_template_equal_hf() {
    let dir = tmpdir();
    let ckpt = chat_checkpoint(dir.path(), true);
    let (summary, ids) = inputs_of(&chat_case(dir.path(), "vl", &ckpt, "image-text-to-text", true, ""), dir.path());
    assert_eq!(ids, hf_ids("image_and_text"), "{summary}");
    assert_eq!(ids.iter().filter(|&&t| t == 2).count(), 1, "one BOS");
    assert!(summary.contains("chat template") && summary.contains("chat_template.jinja"), "{summary}");
    let (summary, ids) = inputs_of(&chat_case(dir.path(), "text", &ckpt, "image-text-to-text", false, ""), dir.path());
    assert_eq!(ids, hf_ids("text_only"), "{summary}");
}

/// Guards (no template / opt-out): without a template, with `chat_template: false`, and for a
/// text-generation case the prompt is plain — the image placeholder prepended (mobius's 12B
/// convention), BOS from the tokenizer — and equals HF's `processor(text="<|image|>" + prompt)`;
/// the summary says why; `chat_template: true` without a template is an error naming it.
#[test]
fn inputs_without_or_opting_out_of_the_chat_template() {
    let dir = tmpdir();
    let with = chat_checkpoint(dir.path(), true);
    let without = chat_checkpoint(dir.path(), false);
    let plain = hf_ids("plain_image_and_text");
    for (name, ckpt, task, extra, why) in [
        ("none", &without, "image-text-to-text", "", "the tokenizer has none"),
        ("off", &with, "image-text-to-text", "chat_template: false\n", "chat_template: false"),
        ("completion", &with, "text-generation", "", "text-generation case"),
    ] {
        let (summary, ids) = inputs_of(&chat_case(dir.path(), name, ckpt, task, true, extra), dir.path());
        assert_eq!(ids, plain, "{name}: {summary}");
        assert!(summary.contains("no chat template") && summary.contains(why), "{name}: {summary}");
    }
    let forced = chat_case(dir.path(), "forced", &without, "text-generation", true, "chat_template: true\n");
    let o = cli(&["inputs", &forced.display().to_string(), "--out", &dir.path().join("x.safetensors").display().to_string()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("chat_template: true, but the tokenizer has no chat template"), "{}", text(&o));
    let (_, ids) = inputs_of(&chat_case(dir.path(), "forced-ok", &with, "text-generation", true, "chat_template: true\n"), dir.path());
    assert_eq!(ids, hf_ids("image_and_text"));
}

/// Guards: `inputs` works on every committed case — on its own inputs where they need no
/// absent checkpoint, else on its `synthetic:` stand-in's — and a case with a golden says whether
/// the golden's input_ids are its own.
#[test]
fn inputs_on_every_committed_case() {
    let dir = tmpdir();
    let out = dir.path().join("in.safetensors").display().to_string();
    let mut cases: Vec<PathBuf> = Vec::new();
    for category in ["cases/causal-lm", "cases/vision-language"] {
        for e in std::fs::read_dir(root().join(category)).expect("cases") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "yaml") {
                cases.push(p);
            }
        }
    }
    cases.sort();
    assert!(cases.len() >= 20, "{cases:?}");
    for case in &cases {
        let c = case.display().to_string();
        let own = cli(&["inputs", &c, "--out", &out]);
        if own.status.success() {
            continue;
        }
        let t = text(&own);
        assert!(t.contains("prompts need a checkpoint") && t.contains("--synthetic"), "{c}: {t}");
        let syn = cli(&["inputs", &c, "--synthetic", "--out", &out]);
        assert!(syn.status.success(), "{c} --synthetic: {}", text(&syn));
    }
    let o = cli(&["inputs", "cases/vision-language/unified-vision-prompt.yaml", "--out", &out]);
    assert!(text(&o).contains("golden") && text(&o).contains("its input_ids are the case's"), "{}", text(&o));
}

/// Guards (replay): `inputs --replay` writes what L4/L5 receive when a golden's ids differ from
/// the case's — the golden's ids, the images' tensors unchanged — and both it and the plain
/// dump warn, naming the first differing position.
#[test]
fn inputs_replay_of_a_drifted_golden() {
    let dir = tmpdir();
    let goldens = dir.path().join("goldens");
    std::fs::create_dir_all(goldens.join("vision-language")).expect("mkdir");
    let mut golden = onnx_parity::golden::Golden::load(&root().join("goldens/vision-language/unified-vision-prompt.json"))
        .expect("golden")
        .expect("committed golden");
    let at = golden.input_ids.len() - 1;
    golden.input_ids[at] = if golden.input_ids[at] == 5 { 6 } else { 5 };
    let ids = golden.input_ids.clone();
    let golden_text = golden.to_json_string();
    std::fs::write(goldens.join("vision-language/unified-vision-prompt.json"), golden_text).expect("write");
    let out = dir.path().join("r.safetensors");
    let args = |replay: bool| {
        let mut a = vec![
            "inputs".to_string(),
            "cases/vision-language/unified-vision-prompt.yaml".into(),
            "--out".into(),
            out.display().to_string(),
        ];
        a.extend(["--goldens".to_string(), goldens.display().to_string()]);
        if replay {
            a.push("--replay".into());
        }
        a
    };
    let plain = cli(&args(false).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(plain.status.success(), "{}", text(&plain));
    assert!(text(&plain).contains("warning: golden") && text(&plain).contains(&format!("at position {at}")), "{}", text(&plain));
    let replayed = cli(&args(true).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(replayed.status.success(), "{}", text(&replayed));
    assert_eq!(read_i64(&out, "input_ids"), ids);
    assert!(text(&replayed).contains("the golden's input_ids"), "{}", text(&replayed));
}

/// Guards (replay in the tiers): when the golden's input_ids differ from the case's, L4 and L5
/// run on the golden's (no "made for other input_ids" failure) and both carry the warning naming
/// the first differing position, in the report and as the `input_ids_replayed` metric.
#[test]
fn l4_l5_replay_the_goldens_input_ids_with_a_warning() {
    let dir = tmpdir();
    let goldens = dir.path().join("goldens");
    std::fs::create_dir_all(goldens.join("vision-language")).expect("mkdir");
    let committed = root().join("goldens/vision-language");
    let mut golden = onnx_parity::golden::Golden::load(&committed.join("unified-vision-prompt.json")).expect("golden").expect("committed");
    let at = golden.input_ids.len() - 2;
    golden.input_ids[at] = if golden.input_ids[at] == 5 { 6 } else { 5 };
    std::fs::write(goldens.join("vision-language/unified-vision-prompt.json"), golden.to_json_string()).expect("write");
    std::fs::copy(
        committed.join("unified-vision-prompt_generation.json"),
        goldens.join("vision-language/unified-vision-prompt_generation.json"),
    )
    .expect("copy");
    let report = dir.path().join("r.json");
    let o = cli(&[
        "run",
        "cases/vision-language/unified-vision-prompt.yaml",
        "--levels",
        "L4,L5",
        "--goldens",
        &goldens.display().to_string(),
        "--report",
        &report.display().to_string(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let levels = v["cases"][0]["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2, "{}", text(&o));
    for l in levels {
        let record = l.to_string();
        assert!(!record.contains("made for other input_ids"), "{record}");
        assert!(record.contains(&format!("differ from the golden's at position {at}")), "{record}");
        assert!(record.contains("input_ids_replayed"), "{record}");
    }
    assert!(text(&o).contains(&format!("at position {at}")), "the console shows the warning: {}", text(&o));
}

/// Guards the variant table of docs/exporters.md: it is what `onnx-parity run` prints for the
/// cases with variants (regenerate it by pasting the run's table between the markers).
#[test]
fn docs_variant_table_equals_the_run() {
    let cases = [
        "cases/causal-lm/gemma4-text-dense.yaml",
        "cases/causal-lm/gemma4-text-moe.yaml",
        "cases/causal-lm/gemma4-text-ple.yaml",
        "cases/causal-lm/unified-text-kvshare.yaml",
        "cases/causal-lm/unified-vision-text.yaml",
        "cases/vision-language/unified-vision.yaml",
    ];
    let mut args = vec!["run"];
    args.extend(cases);
    let o = cli(&args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let printed =
        out.split("variant matrix (docs/exporters.md's table):\n\n").nth(1).unwrap_or_else(|| panic!("no variant matrix: {}", text(&o)));
    let page = std::fs::read_to_string(root().join("docs/exporters.md")).expect("docs/exporters.md");
    let table = page
        .split("<!-- variant-matrix -->\n")
        .nth(1)
        .and_then(|r| r.split("<!-- /variant-matrix -->").next())
        .expect("docs/exporters.md markers");
    assert_eq!(table, printed, "docs/exporters.md's variant table differs from the run:\n{printed}");
    assert!(o.status.success(), "{}", text(&o));
}

/// Guards issue 39: a case whose `onnx:` names a folder that does not exist (a typo) is all skips
/// without strict mode, and `run` says nothing ran and exits 3 (not 0, not 1); with `--strict` (or
/// `ONNX_PARITY_STRICT=1`) its trials fail naming the path (exit 1). A fixture case with all its
/// artifacts gets the same verdicts in both modes (exit 0).
#[test]
fn strict_mode_and_nothing_ran() {
    let dir = tmpdir();
    let typo = dir.path().join("no-such-export");
    let case = write_case(
        dir.path(),
        "typo",
        &fixture("unified-vision/checkpoint"),
        &typo.display().to_string(),
        &format!("levels: [L1, L3, L4, L5]\ninputs:\n  tensors: {}\n", fixture("unified-vision/inputs.safetensors")),
    );
    let case = case.display().to_string();
    let o = cli(&["run", &case]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("nothing ran: every trial asked for was skipped or ignored"), "{}", text(&o));
    for strict in [cli(&["run", &case, "--strict"]), {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"));
        c.args(["run", &case]).current_dir(root()).env("ONNX_PARITY_LOG", "warn").env("ONNX_PARITY_STRICT", "1");
        c.output().expect("runs")
    }] {
        let t = text(&strict);
        assert_eq!(strict.status.code(), Some(1), "{t}");
        assert!(t.contains("strict mode: a needed artifact is missing") && t.contains(&typo.display().to_string()), "{t}");
    }
    let full = "cases/causal-lm/gemma4-text-dense.yaml";
    let verdicts = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("::L"))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    let (loose, strict) = (cli(&["run", full, "--levels", "L1"]), cli(&["run", full, "--levels", "L1", "--strict"]));
    assert!(loose.status.success() && strict.status.success(), "{}{}", text(&loose), text(&strict));
    assert_eq!(verdicts(&loose), verdicts(&strict));
    assert!(!verdicts(&loose).is_empty());
}

/// Guards: ONNX Runtime's lenient shape-merge warning (one per tensor per session on a build of
/// its quantization tools) is shown once however often it comes; its other warnings, and the
/// harness's own words, each time.
#[test]
fn onnx_runtimes_lenient_merge_warning_is_shown_once() {
    use tracing_subscriber::layer::SubscriberExt;
    let capture = Capture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::registry()
        .with(onnx_parity::logging::LenientMergeOnce::default())
        .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || sink.clone()));
    tracing::subscriber::with_default(subscriber, || {
        for name in ["val_0", "val_1", "val_2"] {
            tracing::warn!(target: "onnxruntime", "Error merging shape info for output. '{name}' source:{{-1,-1,1}} target:{{1}}. Falling back to lenient merge.");
        }
        for _ in 0..2 {
            tracing::warn!(target: "onnxruntime", "Some other warning of ONNX Runtime's");
            tracing::warn!("Error merging shape info: the harness's own words. Falling back to lenient merge.");
        }
    });
    let out = capture.text();
    let count = |s: &str| out.lines().filter(|l| l.contains(s)).count();
    assert_eq!(count("source:{-1,-1,1}"), 1, "{out}");
    assert_eq!(count("'val_0'"), 1, "the first is the one shown: {out}");
    assert_eq!(count("Some other warning"), 2, "{out}");
    assert_eq!(count("the harness's own words"), 2, "{out}");
}
