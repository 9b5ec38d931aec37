//! `onnx-parity check EXPORT --model DIR`: the exporter's inner loop without a case YAML. On a
//! fixture export it gives the committed case's verdicts; `--write-case` writes a case `run`
//! accepts with the same verdicts; bad input is one clear error and exit status 2. And the
//! reference cache's contract at the scale of the committed cases: every trial's verdict and
//! metrics are the same with the cache off, cold and warm.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod support;
use support::{root, text};

fn cli_in(cache: &Path, args: &[&str]) -> std::process::Output {
    // The runtimes stay where they are; only the reference cache's folder is this test's.
    support::cli_with(args, &[("ONNX_PARITY_REFERENCE_CACHE", cache.join("reference").as_os_str())])
}

/// `(case, level) → (status, metrics)` of a JSON report.
fn verdicts(report: &Path) -> std::collections::BTreeMap<(String, String), (String, Value)> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(report).expect("report")).expect("json");
    let mut out = std::collections::BTreeMap::new();
    for c in v["cases"].as_array().expect("cases") {
        for l in c["levels"].as_array().expect("levels") {
            let mut metrics = l["metrics"].clone();
            if let Some(m) = metrics.as_object_mut() {
                // Timings are not verdicts.
                m.retain(|k, _| !k.ends_with("_s") && !k.contains("seconds"));
            }
            let key = (c["name"].as_str().unwrap_or("").to_string(), l["level"].as_str().unwrap_or("").to_string());
            out.insert(key, (l["status"].as_str().unwrap_or("").to_string(), metrics));
        }
    }
    out
}

/// `check EXPORT --model MODEL --levels LEVELS` and `extra`, its reference cache under `cache`.
fn check_cli(cache: &Path, export: &str, model: &str, levels: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["check", export, "--model", model, "--levels", levels];
    args.extend_from_slice(extra);
    cli_in(cache, &args)
}

fn fixture(rel: &str) -> String {
    root().join("fixtures").join(rel).display().to_string()
}

/// Guards `check` against the committed case: the same L1 and L3 verdicts and numbers on the
/// same inputs (gemma4-text-ple passes; unified-vision fails at image_features where its case
/// expects that failure), and `--write-case` writes a case that `run` gives the same verdicts.
#[test]
fn check_gives_the_committed_cases_verdicts() {
    let dir = tempfile::tempdir().expect("tmp");
    for (fixture_name, case, expected) in [
        ("gemma4-text-ple", "cases/causal-lm/gemma4-text-ple.yaml", [("L1", "pass"), ("L3", "pass")]),
        ("unified-vision", "cases/vision-language/unified-vision.yaml", [("L1", "pass"), ("L3", "xfail")]),
    ] {
        let committed = dir.path().join(format!("{fixture_name}-committed.json"));
        let o = cli_in(dir.path(), &["run", case, "--levels", "L1,L3", "--report", &committed.display().to_string()]);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
        let committed = verdicts(&committed);
        let written = dir.path().join("cases/check").join(format!("{fixture_name}.yaml"));
        let report = dir.path().join(format!("{fixture_name}-check.json"));
        let args = [
            "check",
            &fixture(&format!("{fixture_name}/onnx")),
            "--model",
            &fixture(&format!("{fixture_name}/checkpoint")),
            "--inputs",
            &fixture(&format!("{fixture_name}/inputs.safetensors")),
            "--write-case",
            &written.display().to_string(),
            "--report",
            &report.display().to_string(),
        ];
        let o = cli_in(dir.path(), &args);
        let checked = verdicts(&report);
        for (level, status) in expected {
            let ours = checked.iter().find(|((_, l), _)| l == level).map(|(_, v)| v.clone()).expect("a check verdict");
            let theirs = committed.iter().find(|((c, l), _)| l == level && !c.contains('@') && !c.contains('[')).map(|(_, v)| v.clone());
            let theirs = theirs.expect("the committed verdict");
            assert_eq!(theirs.0, status, "{fixture_name} {level}: the committed case");
            // An expected failure of the committed case is a failure without its YAML.
            let want = if status == "xfail" { "fail" } else { status };
            assert_eq!(ours.0, want, "{fixture_name} {level}: {}", text(&o));
            // The same numbers (the committed case adds the signature its expectation matched).
            let mut theirs_metrics = theirs.1.clone();
            if let Some(m) = theirs_metrics.as_object_mut() {
                m.remove("xfail_signature");
            }
            assert_eq!(ours.1, theirs_metrics, "{fixture_name} {level}: the same metrics");
        }
        assert!(text(&o).contains("not inferred: expected failures"), "{}", text(&o));
        // The written case runs as a case file, with the same verdicts.
        let again = dir.path().join(format!("{fixture_name}-again.json"));
        let o = cli_in(dir.path(), &["run", &written.display().to_string(), "--report", &again.display().to_string()]);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
        // `run` lists the tiers the case does not name as skipped.
        let again: Vec<_> = verdicts(&again).into_values().filter(|v| v.0 != "skipped").collect();
        assert_eq!(again, checked.into_values().collect::<Vec<_>>(), "{fixture_name}: the written case");
    }
}

/// Guards what `check` says it did not infer: a vision export given neither prompt nor image is
/// fed the harness's test pattern (written beside the case, named in it and said), so its L3
/// judges the vision encoder — on unified-vision it fails at `image_features`, mobius's LayerNorm
/// eps finding, where a text-only prompt passes; given a prompt alone it says L3 judges the text
/// path alone; given an image, neither. A checkpoint without a tokenizer says its prompt is drawn
/// token ids, and the written case's header lists every such line, the prompt's included.
#[test]
fn check_says_what_it_did_not_infer() {
    use onnx_parity::case::infer::{infer, CheckRequest, Prompt, TEST_IMAGE};
    use onnx_parity::case::Level;
    let dir = tempfile::tempdir().expect("tmp");
    let request = |name: &str, prompt: Option<Prompt>| CheckRequest {
        export: root().join("fixtures").join(name).join("onnx"),
        model: fixture(&format!("{name}/checkpoint")),
        prompt,
        levels: vec![Level::L1, Level::L3],
        max_new_tokens: 4,
    };
    let (pattern, text_alone) =
        ("an image: none given (`--image FILE`), so the harness's", "an image: none given (`--image FILE`), so L3 feeds text alone");
    let says = |i: &onnx_parity::case::infer::Inferred, what: &str| i.not_inferred.iter().any(|n| n.starts_with(what));

    let vision = infer(&request("unified-vision", None), Some(dir.path())).expect("infers");
    assert!(says(&vision, pattern) && !says(&vision, text_alone), "{:?}", vision.not_inferred);
    assert_eq!(vision.test_pattern, Some(dir.path().join(TEST_IMAGE)));
    assert!(vision.yaml.contains(&format!("  images: [\"{TEST_IMAGE}\"]\n")), "{}", vision.yaml);

    let prompt_alone = Some(Prompt::Text { text: "Describe".into(), images: vec![] });
    let prompted = infer(&request("unified-vision", prompt_alone), Some(dir.path())).expect("infers");
    assert!(says(&prompted, text_alone) && prompted.test_pattern.is_none(), "{:?}", prompted.not_inferred);

    let image = root().join("fixtures/unified-vision/images/a.png");
    let with_image = Some(Prompt::Text { text: "Describe".into(), images: vec![image] });
    let given = infer(&request("unified-vision", with_image), None).expect("infers");
    assert!(!says(&given, "an image") && given.test_pattern.is_none(), "{:?}", given.not_inferred);

    let text_export = infer(&request("gemma4-text-ple", None), None).expect("infers");
    assert!(!says(&text_export, "an image") && text_export.test_pattern.is_none(), "a text export: {:?}", text_export.not_inferred);
    assert!(says(&text_export, "a prompt: the checkpoint has no tokenizer.json"), "{:?}", text_export.not_inferred);
    for inferred in [&vision, &prompted, &text_export] {
        for line in &inferred.not_inferred {
            assert!(inferred.yaml.contains(&format!("# Not inferred: {line}\n")), "{line}: {}", inferred.yaml);
        }
    }

    // The command: the pattern judged, mobius's vision LayerNorm eps found; a prompt alone passes.
    let export = fixture("unified-vision/onnx");
    let model = fixture("unified-vision/checkpoint");
    let l3 = |extra: &[&str]| {
        let report = dir.path().join("r.json");
        let o = check_cli(dir.path(), &export, &model, "L3", &[&["--report", report.to_str().expect("utf-8")], extra].concat());
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
        (v["cases"][0]["levels"][0]["status"].as_str().unwrap_or("").to_string(), text(&o))
    };
    let (status, out) = l3(&[]);
    assert_eq!(status, "fail", "{out}");
    assert!(out.contains("image_features: differs"), "{out}");
    let (status, out) = l3(&["--prompt", "Describe this image."]);
    assert_eq!(status, "pass", "{out}");
}

/// Guards the default prompts against the sliding window (8 in the fixtures, 512 and 1024 in the
/// real configs): a prompt within it computes what full attention would, so a wrong window would
/// pass. Drawn ids (no tokenizer) and the default text each pass it, drawn ids leave out every
/// special and media placeholder id, and a prompt within the window is said to be so.
#[test]
fn check_prompts_pass_the_sliding_window() {
    use onnx_parity::case::infer::{infer, token_ids, CheckRequest};
    use onnx_parity::case::Level;
    let request = |name: &str| CheckRequest {
        export: root().join("fixtures").join(name).join("onnx"),
        model: fixture(&format!("{name}/checkpoint")),
        prompt: None,
        levels: vec![Level::L1, Level::L3],
        max_new_tokens: 4,
    };
    // Drawn ids: the window (8) and 64 more, none of them special.
    let drawn = infer(&request("gemma4-text-ple"), None).expect("infers");
    let ids_line = drawn.yaml.lines().find(|l| l.trim_start().starts_with("input_ids:")).expect("drawn ids");
    assert_eq!(ids_line.matches(',').count() + 1, 8 + 64, "{ids_line}");
    let special: Vec<i64> = (505..=511).collect();
    let ids = token_ids(400, 512, &special);
    assert_eq!(ids.len(), 400);
    assert!(ids.iter().all(|i| !special.contains(i)), "a special id was drawn");
    assert!(token_ids(400, 512, &[]).iter().any(|i| special.contains(i)), "the draw reaches them when not left out");
    // The default text: at least the window and 64 more words (each at least a token).
    let texted = infer(&request("unified-vision"), None).expect("infers");
    let prompt = texted.yaml.lines().find(|l| l.trim_start().starts_with("prompts:")).expect("a prompt");
    assert!(prompt.split_whitespace().count() >= 8 + 64, "{prompt}");
    assert_eq!(texted.sliding_window, Some(8));

    // The command says when a prompt stays within the window, and not otherwise.
    let dir = tempfile::tempdir().expect("tmp");
    let export = fixture("gemma4-text-ple/onnx");
    let model = fixture("gemma4-text-ple/checkpoint");
    let said = |extra: &[&str]| {
        let o = check_cli(dir.path(), &export, &model, "L1", extra);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
        text(&o).contains(
            "not inferred: whether the sliding window is right: the prompt is 6 tokens, within the window of 8, so the prefill's \
             sliding layers are judged as full-attention ones; only the decode steps at positions 8 to 12 pass it",
        )
    };
    assert!(said(&["--tokens", "6"]), "a prompt within the window is said to be");
    assert!(!said(&[]), "the default prompt passes the window");

    // mobius's `--static-cache` build of a gemma4_unified_text model drops the sliding layers'
    // window: the default prompt (fitted to its 64-position cache) shows it in the prefill's
    // logits, where 6 tokens agree there (only decode steps past the window differ).
    let static_build = fixture("unified-text-kvshare/variants/static");
    let kvshare = fixture("unified-text-kvshare/checkpoint");
    let prefill_logits = |extra: &[&str]| {
        let o = check_cli(dir.path(), &static_build, &kvshare, "L3", extra);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let out = text(&o);
        let logits = out.split("; logits: ").nth(1).unwrap_or_else(|| panic!("no logits verdict: {out}"));
        logits.split_whitespace().next().unwrap_or("").to_string()
    };
    assert_eq!(prefill_logits(&[]), "differs");
    assert_eq!(prefill_logits(&["--tokens", "6"]), "agrees");
}

/// Guards bad input: an export folder that is not one, a checkpoint of another model, a model
/// id not in the HF cache — one error naming what is wrong, exit status 2, nothing run.
#[test]
fn check_refuses_bad_input_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let ple = fixture("gemma4-text-ple/onnx");
    let cases: [(Vec<String>, &str); 4] = [
        (vec![fixture("gemma4-text-ple/checkpoint"), fixture("gemma4-text-ple/checkpoint")], "not an ONNX export"),
        (vec![ple.clone(), fixture("gemma4-text-moe/checkpoint")], "is not an export of"),
        (vec![fixture("unified-vision/onnx"), fixture("gemma4-text-ple/checkpoint")], "its KV pair 0 has 2 heads"),
        (vec![ple.clone(), "nobody/not-cached-model".into()], "not in the HF cache"),
    ];
    for (args, says) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
            .args(["check", &args[0], "--model", &args[1]])
            .current_dir(root())
            .env("ONNX_PARITY_LOG", "warn")
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_HOME", dir.path())
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{says}: {}", text(&o));
        assert!(text(&o).contains(says), "{says}: {}", text(&o));
        assert!(!text(&o).contains("PASS") && !text(&o).contains("FAIL"), "nothing ran: {}", text(&o));
    }
}

/// Guards the cache's contract: on every committed case each trial's status and metrics are
/// the same with the cache off, cold (computed and stored) and warm (read back).
#[test]
fn verdicts_are_identical_with_and_without_the_cache() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut runs = Vec::new();
    for (name, extra) in [("off", Some("--no-cache")), ("cold", None), ("warm", None)] {
        let report = dir.path().join(format!("{name}.json"));
        let mut args = vec!["run".to_string(), "cases".into(), "--report".into(), report.display().to_string()];
        args.extend(extra.map(str::to_string));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = cli_in(dir.path(), &args);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{name}: {}", text(&o));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
        let hits = v["metadata"]["reference_cache"]["hits"].as_array().map_or(0, Vec::len);
        runs.push((name, verdicts(&report), hits));
    }
    // Off: nothing read; cold: only what another evaluation of the same run stored; warm: the
    // whole reference side.
    let hits: Vec<usize> = runs.iter().map(|r| r.2).collect();
    assert!(hits[0] == 0 && hits[1] < hits[2] / 4 && hits[2] > 100, "cache hits off/cold/warm: {hits:?}");
    let off = &runs[0].1;
    assert!(off.len() > 500, "every committed trial ({})", off.len());
    for (name, v, _) in &runs[1..] {
        assert_eq!(v.len(), off.len(), "{name}: the same trials");
        for (k, verdict) in off {
            assert_eq!(v.get(k), Some(verdict), "{name}: {k:?}");
        }
    }
}

/// Guards the cheapest path of a build whose kernel rounds activations to int8: its local floors
/// conditioned on its own steps replace the unconditioned one, which is then not made (at full
/// E2B size 42 s); a float build's evaluation still makes its floor. Read from a warm run's cache
/// hits, one evaluation's results after another (each begins with its reference).
#[test]
fn conditioned_local_floors_leave_no_unconditioned_one_to_make() {
    let dir = tempfile::tempdir().expect("tmp");
    let report = dir.path().join("r.json");
    let args = ["run", "cases/causal-lm/gemma4-text-dense.yaml", "--levels", "L3", "--report", report.to_str().expect("utf-8")];
    for _ in 0..2 {
        let o = cli_in(dir.path(), &args);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let hits: Vec<String> = v["metadata"]["reference_cache"]["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter_map(|h| h.as_str().and_then(|h| h.split(": ").nth(1)).map(str::to_string))
        .collect();
    let mut evaluations: Vec<Vec<&str>> = Vec::new();
    for h in &hits {
        match h.as_str() {
            "reference" => evaluations.push(vec!["reference"]),
            other => evaluations.last_mut().expect("a reference first").push(other),
        }
    }
    // Each conditioned floor and its f64 truth are entries of their own.
    let is_conditioned = |e: &Vec<&str>| e.contains(&"conditioned local layers (floor)") && e.contains(&"conditioned local layers (f64)");
    let conditioned = evaluations.iter().filter(|e| is_conditioned(e)).count();
    assert!(conditioned >= 2, "the int4 accuracy-level-4 builds' evaluations: {evaluations:?}");
    for e in &evaluations {
        assert_eq!(e.contains(&"floor"), !is_conditioned(e), "{e:?}");
    }
}

/// Guards issue 45's EP axis: `list --ep` and `run --ep` plan the trials on the EPs named (over
/// `ONNX_PARITY_EP`), and an unknown one is refused (exit 2).
#[test]
fn the_ep_axis_comes_from_the_command() {
    let case = "cases/causal-lm/gemma4-text-ple.yaml";
    let list = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_onnx-parity")).args(args).current_dir(root()).env("ONNX_PARITY_EP", "cpu").output().expect("runs")
    };
    let cpu = list(&["list", case]);
    assert!(text(&cpu).contains("trials on cpu (") && !text(&cpu).contains("cuda"), "{}", text(&cpu));
    let both = list(&["list", "--ep", "cpu,cuda", case]);
    assert!(text(&both).contains("trials on cpu, cuda:0"), "{}", text(&both));
    let bad = list(&["run", "--ep", "tpu", case]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("--ep tpu: expected a comma-separated list"), "the flag is named: {}", text(&bad));
}

/// Guards the warm path's fallback: with every reference-side entry stored, a run reads them
/// while the candidate's sessions open (`evaluation/reference_side.rs`); entries found truncated
/// then are misses with a warning, their models run there and then, and the verdicts are the
/// cold run's.
#[test]
fn truncated_entries_read_beside_the_candidate_are_recomputed() {
    let dir = tempfile::tempdir().expect("tmp");
    let report = dir.path().join("r.json");
    let args = ["run", "cases/causal-lm/gemma4-text-ple.yaml", "--levels", "L3", "--report", report.to_str().expect("utf-8")];
    let cold = cli_in(dir.path(), &args);
    assert!(cold.status.code().is_some_and(|c| c <= 1), "{}", text(&cold));
    let before = verdicts(&report);
    let mut truncated = 0;
    for entry in support::files(&dir.path().join("reference").join("entries"), ".bin") {
        let len = std::fs::metadata(&entry).expect("entry").len();
        std::fs::OpenOptions::new().write(true).open(&entry).expect("entry").set_len(len / 2).expect("truncate");
        truncated += 1;
    }
    assert!(truncated >= 3, "the reference, the arbiter and the floor at least: {truncated}");
    let warm = cli_in(dir.path(), &args);
    let log = text(&warm);
    assert!(warm.status.code().is_some_and(|c| c <= 1), "{log}");
    assert!(log.contains("not used, recomputing"), "{log}");
    assert!(!log.contains("read from the reference cache"), "{log}");
    assert_eq!(verdicts(&report), before);
}
