//! The committed corpus of malformed inputs (issue 9, "Fuzzed inputs"): `tests/corpus/<kind>/`
//! holds one file per defect (case YAML, goldens, `config.json`, input safetensors, ONNX graph
//! files, tiny malformed exports made by `scripts/make_malformed_exports.py`, images — the JPEGs
//! made by `scripts/make_jpeg_fixtures.py` — and chat templates), and
//! `tests/corpus/expected.yaml` maps each file to the parsers that must reject it and the
//! substrings each error message must contain (the field or tensor, and what was expected).
//!
//! Every message must also name the file (its name appears in the message), except a pipeline
//! error, which names the session and the tensor instead (the CLI adds the package folder). The
//! test fails on a corpus file without an expectation, an expectation without a file, a parser
//! missing for a file's kind, a file that parses, and every substring not found, all at once.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use onnx_parity::case::Case;
use onnx_parity::golden::{GenerationGolden, Golden};
use onnx_parity::inputs::{load_safetensors, ModelInputs};
use onnx_parity::onnx::contract::ExportContract;
use onnx_parity::onnx::graph::GraphSummary;
use onnx_parity::runtime::pipeline::OnnxPipeline;
use onnx_parity::runtime::session::SessionOptions;
use onnx_parity_reference::ModelConfig;

/// file (relative to `tests/corpus/`) → parser → substrings.
type Manifest = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every file of the corpus (the manifest excepted), relative, `/`-separated, sorted.
fn corpus_files() -> BTreeSet<String> {
    let root = corpus();
    support::files(&root, "")
        .iter()
        .map(|p| p.strip_prefix(&root).expect("under the corpus").to_string_lossy().replace('\\', "/"))
        .filter(|rel| rel != "expected.yaml")
        .collect()
}

/// The parsers a file of this kind must go through (all of them, so none is silently skipped).
fn required_parsers(rel: &str) -> BTreeSet<&'static str> {
    let kind = rel.split('/').next().unwrap_or_default();
    let set: &[&str] = match kind {
        "case" => &["case"],
        "golden" if rel.ends_with("_generation.json") => &["generation"],
        "golden" => &["golden"],
        "config" => &["reference", "contract"],
        "safetensors" => &["inputs"],
        "image" => &["image"],
        "template" => &["template"],
        // A package folder (`onnx/<defect>/model.onnx`) is opened and run; a loose graph file is
        // decoded.
        "onnx" if rel.matches('/').count() == 2 => &["pipeline"],
        "onnx" => &["graph"],
        _ => &[],
    };
    set.iter().copied().collect()
}

/// Runs `parser` on the corpus file; `Ok(())` when it accepts the file.
fn run(parser: &str, path: &Path) -> Result<(), String> {
    match parser {
        "case" => Case::load(path).map(drop).map_err(|e| e.to_string()),
        "golden" => match Golden::load(path) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!("{}: missing", path.display())),
            Err(e) => Err(e.to_string()),
        },
        "generation" => match GenerationGolden::load(path) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!("{}: missing", path.display())),
            Err(e) => Err(e.to_string()),
        },
        "reference" => ModelConfig::from_file(path).map(drop).map_err(|e| e.to_string()),
        "contract" => ExportContract::from_config_file(path).map(drop).map_err(|e| e.to_string()),
        "inputs" => load_safetensors(path).map(drop).map_err(|e| e.to_string()),
        "graph" => GraphSummary::load(path).map(drop).map_err(|e| e.to_string()),
        "image" => onnx_parity::inputs::image::load_rgb(path).map(drop).map_err(|e| e.to_string()),
        "template" => {
            use onnx_parity::inputs::processor::chat::{ChatTemplate, Content};
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            let tokens = [("bos_token".to_string(), "<bos>".to_string())].into_iter().collect();
            ChatTemplate::from_text(text, path)
                .render_user_turn(&[Content::Image, Content::Text("Describe.".into())], &tokens)
                .map(drop)
                .map_err(|e| e.to_string())
        }
        "pipeline" => {
            let dir = path.parent().expect("package folder");
            let mut pipeline =
                OnnxPipeline::open(dir, &SessionOptions { intra_threads: 1, ..SessionOptions::default() }).map_err(|e| e.to_string())?;
            pipeline.prefill(&ModelInputs::from_ids(vec![2, 10, 11])).map(drop).map_err(|e| e.to_string())
        }
        other => panic!("unknown parser `{other}` in tests/corpus/expected.yaml"),
    }
}

/// Guards issue 9 item 3: every malformed corpus file is rejected by every parser of its kind
/// with a message naming the file, the field or tensor, and what was expected; the corpus and
/// the manifest list the same files.
#[test]
fn corpus_files_fail_with_clear_messages() {
    let manifest_path = corpus().join("expected.yaml");
    let manifest: Manifest = serde_yaml::from_str(&std::fs::read_to_string(&manifest_path).expect("tests/corpus/expected.yaml"))
        .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
    let on_disk = corpus_files();
    let listed: BTreeSet<String> = manifest.keys().cloned().collect();
    let mut problems = Vec::new();
    for f in on_disk.difference(&listed) {
        problems.push(format!("{f}: a corpus file without an expectation in expected.yaml"));
    }
    for f in listed.difference(&on_disk) {
        problems.push(format!("{f}: listed in expected.yaml but not in tests/corpus/"));
    }
    for (rel, parsers) in manifest.iter().filter(|(rel, _)| on_disk.contains(*rel)) {
        let required = required_parsers(rel);
        let given: BTreeSet<&str> = parsers.keys().map(String::as_str).collect();
        if given != required {
            problems.push(format!("{rel}: expected.yaml lists parsers {given:?}; a file of this kind needs exactly {required:?}"));
            continue;
        }
        let path = corpus().join(rel);
        let file_name = path.file_name().expect("file name").to_string_lossy().into_owned();
        for (parser, substrings) in parsers {
            if substrings.is_empty() {
                problems.push(format!("{rel} [{parser}]: no substrings: name at least the field or tensor"));
            }
            let message = match run(parser, &path) {
                Ok(()) => {
                    problems.push(format!("{rel} [{parser}]: accepted; a corpus file must be rejected"));
                    continue;
                }
                Err(m) => m,
            };
            if parser != "pipeline" && !message.contains(&file_name) {
                problems.push(format!("{rel} [{parser}]: the message does not name the file {file_name}: {message}"));
            }
            for s in substrings {
                if !message.contains(s.as_str()) {
                    problems.push(format!("{rel} [{parser}]: the message lacks {s:?}: {message}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} corpus problems:\n{}", problems.len(), problems.join("\n"));
}

/// Prints every corpus message (`cargo test --test corpus -- --ignored --nocapture`), to write
/// or review expected.yaml.
#[test]
#[ignore = "prints the messages for review"]
fn print_corpus_messages() {
    for rel in corpus_files() {
        for parser in required_parsers(&rel) {
            println!("{rel} [{parser}]: {:?}", run(parser, &corpus().join(&rel)));
        }
    }
}
