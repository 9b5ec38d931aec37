//! The `anchors` test target: conformance checks on mobius's files (its Gemma 4 cases, goldens and
//! tolerance table), which live outside the repository in `../shared/anchors`, or wherever
//! `ONNX_PARITY_ANCHORS` names.
//!
//! That folder is absent in CI and on users' machines. A check whose file is absent is marked
//! ignored (never a silent pass) and the reason goes to stderr as `ignored <trial>: <path> is
//! absent (...)`; the trial list is the same either way, so the count of tests does not change.
//! `--include-ignored` runs such a trial anyway, and it fails naming the absent path. When the files
//! are present every trial runs fully and can fail.

use std::collections::{BTreeMap, BTreeSet};
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

/// One check on the anchors: the files or folders it needs (relative to the anchors root; the
/// first is what the check is given) and the check.
struct Anchor {
    name: &'static str,
    needs: &'static [&'static str],
    check: fn(&Path) -> Result<()>,
}

/// What a conformance trial reads besides its case: the stand-in tokenizer, the real configs,
/// mobius's goldens and image.
const CONFORMANCE_NEEDS: [&str; 4] = ["gemma4-tokenizer", "hf-configs", "mobius/golden", "mobius/testdata/pipeline-cat-chonk.jpeg"];

macro_rules! conformance {
    ($name:literal) => {
        Anchor {
            name: concat!("conformance::", $name),
            needs: &[
                concat!("mobius/cases/", $name, ".yaml"),
                CONFORMANCE_NEEDS[0],
                CONFORMANCE_NEEDS[1],
                CONFORMANCE_NEEDS[2],
                CONFORMANCE_NEEDS[3],
            ],
            check: conformance,
        }
    };
}

const ANCHORS: &[Anchor] = &[
    Anchor { name: "case::all_mobius_cases_parse", needs: &["mobius/cases"], check: all_mobius_cases_parse },
    Anchor { name: "cli::list_mobius_anchor_cases", needs: &["mobius/cases"], check: list_mobius_anchor_cases },
    Anchor {
        name: "golden::mobius_goldens_round_trip_byte_identically",
        needs: &["mobius/golden"],
        check: mobius_goldens_round_trip_byte_identically,
    },
    Anchor {
        name: "golden::component_maps_keep_file_order",
        needs: &["mobius/golden/causal-lm/gemma-4-e2b-it-assistant.json"],
        check: component_maps_keep_file_order,
    },
    Anchor { name: "tolerance::defaults_match_mobius_file", needs: &["mobius/default_tolerances.yaml"], check: defaults_match_mobius_file },
    // Every non-audio mobius case: the processor's input_ids (or their replay), pixel_values and
    // the generation golden's text (`conformance`).
    conformance!("causal-lm/gemma-4-12b"),
    conformance!("causal-lm/gemma-4-26b-a4b"),
    conformance!("causal-lm/gemma-4-31b"),
    conformance!("causal-lm/gemma-4-e2b"),
    conformance!("causal-lm/gemma-4-e4b"),
    conformance!("causal-lm/gemma-4-e2b-it-assistant"),
    conformance!("vision-language/gemma-4-12b"),
    conformance!("vision-language/gemma-4-e2b-it"),
    conformance!("vision-language/gemma-4-e4b-it"),
    conformance!("vision-language/gemma-4-26b-a4b-it"),
    conformance!("vision-language/gemma-4-31b-it"),
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
    // mobius's cases name their image by bare file name; it lives in mobius's testdata/ (unless
    // ONNX_PARITY_TESTDATA says otherwise). Installed before any trial thread starts.
    let mut context = onnx_parity::context::RunContext::from_env();
    context.testdata.get_or_insert_with(|| root.join("mobius/testdata"));
    onnx_parity::context::install(context);
    let trials = ANCHORS
        .iter()
        .map(|a| {
            let path = root.join(a.needs[0]);
            match a.needs.iter().find_map(|needs| absent_reason(&root, needs)) {
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

/// Guards: every mobius case file loads unchanged (docs/design.md §4), with the fields we rely on.
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
    // mobius's rows, line by line; the `L3_calibrated` block is this project's own (mobius has
    // none), so the mobius file loads without it.
    let ours = Tolerances::defaults();
    ensure!(loaded.l3_calibrated.is_empty(), "{} has an L3_calibrated block: {:?}", path.display(), loaded.l3_calibrated);
    // int8 rows are this project's own too (mobius has no 8-bit weight-only dtype): every mobius
    // row must be ours, and ours may add rows for int8 only.
    fn mobius_rows<T: Clone>(rows: &BTreeMap<Dtype, T>) -> BTreeMap<Dtype, T> {
        rows.iter().filter(|(d, _)| **d != Dtype::Int8).map(|(d, r)| (*d, r.clone())).collect()
    }
    ensure!(
        !loaded.l4.contains_key(&Dtype::Int8) && !loaded.l5.contains_key(&Dtype::Int8),
        "{} has int8 rows: update this check",
        path.display()
    );
    ensure!(
        (&loaded.l3, &loaded.l4, &loaded.l5) == (&mobius_rows(&ours.l3), &mobius_rows(&ours.l4), &mobius_rows(&ours.l5)),
        "{} differs from Tolerances::defaults():\n{loaded:#?}",
        path.display()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Conformance with mobius's goldens on real data (chat templates, input_ids replay, JPEG)
// ---------------------------------------------------------------------------------------------

/// The stand-in checkpoint files of a mobius `model_id` (../shared/anchors/gemma4-tokenizer/README.md):
/// the real config, which tokenizer config (`base`: no template; `it`; `large-it`: generation
/// prompt with an empty thought channel) and which processor config.
fn stand_in(model_id: &str) -> Result<(&'static str, &'static str, &'static str)> {
    Ok(match model_id {
        "google/gemma-4-12B" => ("gemma-4-12B.json", "base", "gemma4_unified"),
        "google/gemma-4-E2B-it" => ("gemma-4-E2B-it.json", "it", "gemma4"),
        "google/gemma-4-E4B-it" => ("gemma-4-E4B-it.json", "it", "gemma4"),
        "google/gemma-4-26B-A4B-it" => ("gemma-4-26B-A4B-it.json", "large-it", "gemma4"),
        "google/gemma-4-31B-it" => ("gemma-4-31B-it.json", "large-it", "gemma4"),
        // The E2B-it drafter: the README names no files for it; it shares E2B-it's tokenizer
        // (its golden's ids are E2B-it's chat turn) and has no vision input.
        "google/gemma-4-e2b-it-assistant" => ("gemma-4-E2B-it.json", "it", "gemma4"),
        other => bail!("no stand-in checkpoint files are known for {other}"),
    })
}

/// The text goldens that hold the prompt's ids without BOS (mobius's inconsistency, documented
/// in the tokenizer README): the processor gives `<bos>` + those ids, and L4/L5 replay the
/// golden's ids (`inputs::replay`).
const GOLDENS_WITHOUT_BOS: [&str; 4] =
    ["causal-lm/gemma-4-e2b", "causal-lm/gemma-4-e4b", "causal-lm/gemma-4-26b-a4b", "causal-lm/gemma-4-31b"];

/// Guards (mobius conformance): for a mobius case run unchanged, on a checkpoint-like folder of
/// the real config and the stand-in tokenizer, (1) the processor's `input_ids` are the golden's
/// exactly — chat template, images first, no second BOS — or, for the documented BOS cases,
/// `<bos>` + the golden's, and the replay feeds exactly the golden's with the drift at position
/// 0; (2) the cat JPEG's `pixel_values` and `image_position_ids` are HF's bit for bit (SHA-256 of
/// HF's tensors, scripts/make_anchor_oracles.py); (3) the generation golden's tokens decode to
/// its `generated_text`.
fn conformance(case_yaml: &Path) -> Result<()> {
    use onnx_parity::inputs::{for_case_with_source, prompt::PromptFormat, replay, InputsSource};
    let root = case_yaml.ancestors().nth(4).context("case path too short")?;
    let mut case = onnx_parity::case::Case::load(case_yaml)?;
    let key = format!("{}/{}", case.category, case.name);
    let (config, tok, proc) = stand_in(&case.model_id)?;
    let dir = tempfile::tempdir()?;
    let tokenizer = root.join("gemma4-tokenizer");
    for (from, to) in [
        (root.join("hf-configs").join(config), "config.json"),
        (tokenizer.join("tokenizer.json"), "tokenizer.json"),
        (tokenizer.join(format!("tokenizer_config.{tok}.json")), "tokenizer_config.json"),
        (tokenizer.join(format!("processor_config.{proc}.json")), "processor_config.json"),
    ] {
        std::fs::copy(&from, dir.path().join(to)).with_context(|| format!("copying {}", from.display()))?;
    }
    case.checkpoint = Some(dir.path().to_path_buf());

    let (inputs, source) = for_case_with_source(&case).with_context(|| format!("inputs of {}", case_yaml.display()))?;
    // The format mobius's convention picks: the template for every task but text-generation.
    let chat = matches!(&source, InputsSource::Prompt(PromptFormat::Chat { .. }));
    let want_chat = tok != "base" && case.task_type.as_deref() != Some("text-generation");
    ensure!(chat == want_chat, "{key}: prompt format {source}, expected {}", if want_chat { "the chat template" } else { "no template" });

    let (golden_path, generation_path) = onnx_parity::golden::golden_paths(&root.join("mobius/golden"), &case.category, &case.name);
    let golden = Golden::load(&golden_path)?.with_context(|| format!("{} is missing", golden_path.display()))?;
    let drift = replay::first_difference(&inputs.input_ids, &golden.input_ids);
    if GOLDENS_WITHOUT_BOS.contains(&key.as_str()) {
        ensure!(
            inputs.input_ids.first() == Some(&2) && inputs.input_ids[1..] == golden.input_ids[..],
            "{key}: expected <bos> + the golden's {} ids, got {:?}",
            golden.input_ids.len(),
            inputs.input_ids
        );
        let (replayed, drift) = replay::with_golden_ids(&inputs, &golden.input_ids).map_err(anyhow::Error::msg)?;
        ensure!(replayed.input_ids == golden.input_ids, "{key}: the replay does not feed the golden's ids");
        let drift = drift.context("no drift reported for ids that differ")?;
        ensure!((drift.position, drift.ours, drift.golden) == (0, Some(2), golden.input_ids.first().copied()), "{key}: {drift}");
    } else if let Some(d) = drift {
        bail!("{key}: {d} (processor {} ids, golden {})", inputs.input_ids.len(), golden.input_ids.len());
    }

    if !case.inputs.images.is_empty() {
        let oracles: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/anchor-oracles.json"))?)?;
        let oracle = &oracles["families"][proc];
        ensure!(oracle.is_object(), "tests/data/anchor-oracles.json has no {proc} entry");
        let px = inputs.pixel_values.as_ref().context("no pixel_values")?;
        let pos = inputs.image_position_ids.as_ref().context("no image_position_ids")?;
        let px_bytes: Vec<u8> = px.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        let pos_bytes: Vec<u8> = pos.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        for (name, shape, bytes, sum) in [
            ("pixel_values", &px.shape, px_bytes, px.data.iter().map(|&x| x as f64).sum::<f64>()),
            ("image_position_ids", &pos.shape, pos_bytes, pos.data.iter().map(|&x| x as f64).sum::<f64>()),
        ] {
            let want = &oracle[name];
            let want_shape: Vec<usize> = serde_json::from_value(want["shape"].clone())?;
            ensure!(*shape == want_shape, "{key}: {name} shape {shape:?}, HF's {want_shape:?}");
            let hash = sha256_hex(&bytes);
            ensure!(
                want["sha256"].as_str() == Some(hash.as_str()),
                "{key}: {name} differ from HF's {} (sum {sum} vs HF's {})",
                oracle["processor"],
                want["sum"]
            );
        }
    }

    let generation = GenerationGolden::load(&generation_path)?.with_context(|| format!("{} is missing", generation_path.display()))?;
    let text = generation.generated_text.as_deref().with_context(|| format!("{} has no generated_text", generation_path.display()))?;
    let tok = tokenizers::Tokenizer::from_file(tokenizer.join("tokenizer.json")).map_err(anyhow::Error::msg)?;
    let ids: Vec<u32> = generation.generated_tokens.iter().map(|&t| u32::try_from(t)).collect::<Result<_, _>>()?;
    let decoded = tok.decode(&ids, true).map_err(anyhow::Error::msg)?;
    ensure!(decoded == text, "{key}: generated_tokens decode to {decoded:?}, the golden says {text:?}");
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
