//! Expected failures cannot hide new ones: the committed `unified-vision` case (L3 xfail, the
//! exporter's vision LayerNorm eps) run through the `onnx-parity` binary against copies of its
//! checkpoint and YAML. One NaN weight, a second bug on top of the first, a 10× larger difference
//! than recorded and a pass under an xfail must each be a FAIL; the recorded failure stays XFAIL.
//! Also: every committed xfail carries a measured signature, not a bare reason.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod support;
use support::root;

const CASE: &str = "cases/vision-language/unified-vision.yaml";
const CHECKPOINT: &str = "fixtures/unified-vision/checkpoint";

/// The case's YAML with its relative fixture paths made absolute (so it can live in a temp dir),
/// then `edit` applied to the text.
fn case_copy(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = fs::read_to_string(root().join(CASE)).expect("case yaml");
    let fixtures = root().join("fixtures").display().to_string();
    let text = edit(text.replace("../../fixtures", &fixtures));
    let path = dir.join(format!("{name}.yaml"));
    fs::write(&path, text).expect("write case");
    path
}

/// A copy of the fixture checkpoint with `patch` applied to one element of tensor `name`.
fn checkpoint_copy(dir: &Path, name: &str, index: usize, patch: impl Fn(f32) -> f32) -> PathBuf {
    let out = dir.join("checkpoint");
    fs::create_dir_all(&out).expect("mkdir");
    for entry in fs::read_dir(root().join(CHECKPOINT)).expect("checkpoint dir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), out.join(entry.file_name())).expect("copy");
    }
    let file = out.join("model.safetensors");
    let mut bytes = fs::read(&file).expect("read safetensors");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let info = &header[name];
    assert_eq!(info["dtype"], "F32", "{name} is f32");
    let start = 8 + n + info["data_offsets"][0].as_u64().expect("offset") as usize + 4 * index;
    let old = f32::from_le_bytes(bytes[start..start + 4].try_into().expect("4 bytes"));
    bytes[start..start + 4].copy_from_slice(&patch(old).to_le_bytes());
    fs::write(&file, bytes).expect("write safetensors");
    out
}

/// Runs L3 of `case` and returns (status, message).
fn run_l3(case: &Path, dir: &Path) -> (String, String) {
    let (status, message, _) = support::run_l3(case, dir);
    (status, message)
}

fn with_checkpoint(text: String, checkpoint: &Path) -> String {
    let fixtures = root().join("fixtures").display().to_string();
    text.replace(&format!("checkpoint: {fixtures}/unified-vision/checkpoint"), &format!("checkpoint: {}", checkpoint.display()))
}

/// Guards: the committed case, unchanged, is still the recorded expected failure.
#[test]
fn recorded_failure_is_xfail() {
    let dir = tempfile::tempdir().expect("tmp");
    let case = case_copy(dir.path(), "unified-vision", |t| t);
    let (status, message) = run_l3(&case, dir.path());
    assert_eq!(status, "xfail", "{message}");
}

/// Guards the example: one NaN weight in the vision embedder makes the reference's image
/// features (and logits) NaN. That is a new failure, not the LayerNorm-eps one: FAIL, naming it.
#[test]
fn nan_weight_under_an_xfail_is_a_fail() {
    let dir = tempfile::tempdir().expect("tmp");
    let ckpt = checkpoint_copy(dir.path(), "model.embed_vision.embedding_projection.weight", 0, |_| f32::NAN);
    let case = case_copy(dir.path(), "unified-vision", |t| with_checkpoint(t, &ckpt));
    let (status, message) = run_l3(&case, dir.path());
    assert_eq!(status, "fail", "{message}");
    assert!(message.starts_with("failed differently than expected"), "{message}");
    assert!(message.contains("reference") && message.contains("NaN"), "{message}");
}

/// Guards: a second bug downstream of the expected one (the final norm perturbed: image features
/// unchanged, logits far off) does not match the signature: FAIL "failed differently".
#[test]
fn a_second_bug_under_an_xfail_is_a_fail() {
    let dir = tempfile::tempdir().expect("tmp");
    let ckpt = checkpoint_copy(dir.path(), "model.language_model.norm.weight", 3, |w| w + 4.0);
    let case = case_copy(dir.path(), "unified-vision", |t| with_checkpoint(t, &ckpt));
    let (status, message) = run_l3(&case, dir.path());
    assert_eq!(status, "fail", "{message}");
    assert!(message.starts_with("failed differently than expected"), "{message}");
    assert!(message.contains("max_abs_diff"), "{message}");
}

/// Guards the band: measured values 10× the recorded ones (here: recorded 10× smaller) FAIL.
#[test]
fn ten_times_the_recorded_difference_is_a_fail() {
    let dir = tempfile::tempdir().expect("tmp");
    let case = case_copy(dir.path(), "unified-vision", |t| {
        let edited = t.replace(
            "image_features_max_abs_diff: 1.63e-3, image_features_calibrated_ratio: 5.94e2, max_abs_diff: 8.02e-3,",
            "image_features_max_abs_diff: 1.63e-4, image_features_calibrated_ratio: 5.94e1, max_abs_diff: 8.02e-4,",
        );
        assert_ne!(edited, t, "the case's signature changed; update this test");
        edited
    });
    let (status, message) = run_l3(&case, dir.path());
    assert_eq!(status, "fail", "{message}");
    assert!(message.contains("outside"), "{message}");
}

/// Guards: a tier that passes under an xfail is an unexpected pass (FAIL), so a fixed bug is
/// noticed: the passing `gemma4-vision-one-image` case given an L3 xfail.
#[test]
fn a_pass_under_an_xfail_is_a_fail() {
    let dir = tempfile::tempdir().expect("tmp");
    let text = fs::read_to_string(root().join("cases/vision-language/gemma4-vision-one-image.yaml")).expect("case");
    assert!(!text.contains("xfail:"), "gemma4-vision-one-image is expected to pass");
    let fixtures = root().join("fixtures").display().to_string();
    let text = text.replace("../../fixtures", &fixtures) + "xfail:\n  L3: {reason: \"pretend\", metrics: {max_abs_diff: 1.0}}\n";
    let case = dir.path().join("one-image.yaml");
    fs::write(&case, text).expect("write");
    let (status, message) = run_l3(&case, dir.path());
    assert_eq!(status, "fail", "{message}");
    assert!(message.starts_with("unexpected pass"), "{message}");
}

/// Guards the migration: every committed case's xfail entries carry a measured signature
/// (first divergence, metrics or an error substring), so none can hide a different failure.
#[test]
fn committed_xfails_have_signatures() {
    let mut bare = Vec::new();
    let mut n = 0;
    for category in fs::read_dir(root().join("cases")).expect("cases") {
        let category = category.expect("entry").path();
        let Ok(files) = fs::read_dir(&category) else { continue };
        for file in files {
            let path = file.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let yaml: serde_yaml::Value = serde_yaml::from_str(&fs::read_to_string(&path).expect("read")).expect("yaml");
            let Some(xfail) = yaml.get("xfail").and_then(|x| x.as_mapping()) else { continue };
            for (level, entry) in xfail {
                n += 1;
                if entry.is_string() || entry.as_mapping().is_some_and(|m| m.len() == 1) {
                    bare.push(format!("{}: {:?}", path.display(), level));
                }
            }
        }
    }
    assert!(n >= 20, "expected the committed xfails, found {n}");
    assert!(bare.is_empty(), "xfail entries without a signature: {bare:#?}");
}
