//! The `anchors` test target: conformance checks on mobius's files (its Gemma 4 cases, goldens and
//! tolerance table), which live outside the repository in `../shared/anchors`, or wherever
//! `ONNX_PARITY_ANCHORS` names.
//!
//! That folder is absent in CI and on users' machines. A check whose file is absent is marked
//! ignored (never a silent pass) and the reason goes to stderr as `ignored <trial>: <path> is
//! absent (...)`; the trial list is the same either way, so the count of tests does not change.
//! `--include-ignored` runs such a trial anyway, and it fails naming the absent path. When the files
//! are present every trial runs fully and can fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use libtest_mimic::{Arguments, Failed, Trial};
use onnx_parity::case::{discover, Dtype, Level};
use onnx_parity::golden::{GenerationGolden, Golden};
use onnx_parity::tolerance::Tolerances;

/// The anchors folder: `ONNX_PARITY_ANCHORS`, else `../shared/anchors` beside the repository.
fn anchors_root() -> PathBuf {
    match std::env::var_os("ONNX_PARITY_ANCHORS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/anchors"),
    }
}

/// One check on the anchors: the file or folder it needs (relative to the anchors root) and the
/// check, given that path.
struct Anchor {
    name: &'static str,
    needs: &'static str,
    check: fn(&Path) -> Result<()>,
}

const ANCHORS: &[Anchor] = &[
    Anchor { name: "case::all_mobius_cases_parse", needs: "mobius/cases", check: all_mobius_cases_parse },
    Anchor { name: "cli::list_mobius_anchor_cases", needs: "mobius/cases", check: list_mobius_anchor_cases },
    Anchor {
        name: "golden::mobius_goldens_round_trip_byte_identically",
        needs: "mobius/golden",
        check: mobius_goldens_round_trip_byte_identically,
    },
    Anchor {
        name: "golden::component_maps_keep_file_order",
        needs: "mobius/golden/causal-lm/gemma-4-e2b-it-assistant.json",
        check: component_maps_keep_file_order,
    },
    Anchor { name: "tolerance::defaults_match_mobius_file", needs: "mobius/default_tolerances.yaml", check: defaults_match_mobius_file },
];

/// Why a check cannot run: the first absent component of `root/needs` (the root itself when the
/// whole folder is missing), or `None` when everything is there.
fn absent_reason(root: &Path, needs: &str) -> Option<String> {
    let mut path = root.to_path_buf();
    let mut missing = (!path.exists()).then(|| path.clone());
    for part in Path::new(needs).components() {
        if missing.is_some() {
            break;
        }
        path.push(part);
        if !path.exists() {
            missing = Some(path.clone());
        }
    }
    missing.map(|m| {
        if m == root {
            format!(
                "{} is absent (mobius's cases, goldens and tolerances live outside the repository; \
                 ONNX_PARITY_ANCHORS names their folder)",
                m.display()
            )
        } else {
            format!("{} is absent from the anchors folder {} (see its README.md)", m.display(), root.display())
        }
    })
}

fn main() {
    let args = Arguments::from_args();
    let root = anchors_root();
    let trials = ANCHORS
        .iter()
        .map(|a| {
            let path = root.join(a.needs);
            match absent_reason(&root, a.needs) {
                Some(reason) => {
                    // stderr: stdout is what nextest parses when listing.
                    if !args.list {
                        eprintln!("ignored {}: {reason}", a.name);
                    }
                    // Run only on `--ignored` / `--include-ignored`: then it is a failure, not a pass.
                    Trial::test(a.name, move || Err(Failed::from(reason))).with_ignored_flag(true)
                }
                None => {
                    let check = a.check;
                    Trial::test(a.name, move || check(&path).map_err(|e| Failed::from(format!("{e:#}"))))
                }
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

// ---------------------------------------------------------------------------------------------
// The checks (moved from the unit tests of case.rs, golden.rs, tolerance.rs and tests/cli.rs)
// ---------------------------------------------------------------------------------------------

/// Guards: every mobius case file loads unchanged (DESIGN §4), with the fields we rely on.
fn all_mobius_cases_parse(root: &Path) -> Result<()> {
    let found = discover(&[root.to_path_buf()]);
    ensure!(found.len() == 14, "expected the 14 mobius Gemma 4 cases, found {}", found.len());
    let mut cases = Vec::new();
    for (path, parsed) in &found {
        let case = parsed.as_ref().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        ensure!(case.levels == BTreeSet::from([Level::L4, Level::L5]), "{}: levels {:?}", path.display(), case.levels);
        ensure!(case.dtype == Dtype::Float32, "{}: dtype {:?}", path.display(), case.dtype);
        ensure!(!case.inputs.prompts.is_empty(), "{}: no prompt", path.display());
        ensure!(!case.category.is_empty() && !case.name.is_empty(), "{}: no category or name", path.display());
        cases.push((path, case));
    }
    let find = |suffix: &str| cases.iter().find(|(p, _)| p.ends_with(suffix)).map(|(_, c)| *c).with_context(|| format!("no {suffix}"));
    let audio = find("speech/gemma-4-12b-audio.yaml")?;
    ensure!(audio.generation.eos_token_id == Some(vec![1]), "eos_token_id {:?}", audio.generation.eos_token_id);
    ensure!(audio.generation.max_new_tokens == Some(30), "max_new_tokens {:?}", audio.generation.max_new_tokens);
    ensure!(audio.inputs.audio == vec!["652-129742-0006.flac".to_string()], "audio {:?}", audio.inputs.audio);
    ensure!(audio.category == "speech", "category {}", audio.category);
    ensure!(audio.ci_skip_reason.is_some(), "no ci_skip_reason");
    let vl = find("vision-language/gemma-4-e2b-it.yaml")?;
    ensure!(vl.inputs.images == vec!["pipeline-cat-chonk.jpeg".to_string()], "images {:?}", vl.inputs.images);
    ensure!(vl.name == "gemma-4-e2b-it", "name {}", vl.name);
    Ok(())
}

/// Guards: `onnx-parity list` reads mobius's 14 Gemma 4 case files unchanged.
fn list_mobius_anchor_cases(root: &Path) -> Result<()> {
    let o = Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .arg("list")
        .arg(root)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("ONNX_PARITY_LOG", "warn")
        .output()
        .context("running the onnx-parity binary")?;
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    ensure!(o.status.success(), "`onnx-parity list` failed ({}): {text}", o.status);
    ensure!(text.contains("14 cases, 0 malformed"), "{text}");
    Ok(())
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            json_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Guards: every mobius golden reads and writes back byte-identically (key order, indent,
/// hex floats, trailing newline, component maps in file order).
fn mobius_goldens_round_trip_byte_identically(root: &Path) -> Result<()> {
    let mut files = Vec::new();
    json_files(root, &mut files)?;
    files.sort();
    ensure!(files.len() >= 28, "expected 14 goldens + 14 generation goldens, found {}", files.len());
    for path in &files {
        let original = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let written = if path.to_string_lossy().ends_with("_generation.json") {
            GenerationGolden::load(path)?.with_context(|| format!("{} vanished", path.display()))?.to_json_string()
        } else {
            let g = Golden::load(path)?.with_context(|| format!("{} vanished", path.display()))?;
            ensure!(g.top1_id == g.top10_ids[0], "{}: top1_id {} is not top10_ids[0] {}", path.display(), g.top1_id, g.top10_ids[0]);
            g.to_json_string()
        };
        if written != original {
            bail!("{} does not round-trip", path.display());
        }
    }
    Ok(())
}

/// Guards: the optional component maps keep file order (not sorted) when present.
fn component_maps_keep_file_order(path: &Path) -> Result<()> {
    let g = Golden::load(path)?.with_context(|| format!("{} vanished", path.display()))?;
    let shapes = g.component_shapes.context("no component_shapes")?;
    ensure!(shapes.len() >= 2, "component_shapes {shapes:?}");
    ensure!(shapes[0] == ("projected_state".to_string(), vec![1, 1, 1536]), "first {:?}", shapes[0]);
    ensure!(shapes[1] == ("logits".to_string(), vec![1, 1, 262144]), "second {:?}", shapes[1]);
    ensure!(g.logits_summary.max == g.top10_logits[0], "summary max {} vs top logit {}", g.logits_summary.max, g.top10_logits[0]);
    Ok(())
}

/// Guards: our defaults equal mobius's file value for value (same keys and shape).
fn defaults_match_mobius_file(path: &Path) -> Result<()> {
    let loaded = Tolerances::load(path)?;
    ensure!(loaded == Tolerances::defaults(), "{} differs from Tolerances::defaults():\n{loaded:#?}", path.display());
    Ok(())
}
