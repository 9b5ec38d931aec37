//! Tests that kill the mutants `cargo mutants` found surviving in the gates (docs/mutation-testing.md):
//! each one pins a rule of expectation, tolerance, case or golden parsing that no other test
//! observed. Public API only; the module's own unit tests cover the rest.

use onnx_parity::expectation::{Expectation, Signature};
use onnx_parity::tiers::outcome::TierOutcome;

fn xfail(yaml: &str) -> Result<Expectation, serde_yaml::Error> {
    serde_yaml::from_str(yaml)
}

/// Kills: `Visitor::expecting` returning `Ok(())` (an xfail of the wrong type would then be
/// reported without saying what an xfail entry may be).
#[test]
fn xfail_of_the_wrong_type_says_what_is_expected() {
    let e = xfail("5").unwrap_err().to_string();
    assert!(e.contains("a reason string, or {reason"), "{e}");
}

/// Kills: the band of a negative measured value (`value·within ..= value/within`) with `*` or
/// `/` replaced: −8 within 2 accepts −16 ..= −4, and only that.
#[test]
fn negative_measured_value_band() {
    let s = Signature { metric: Some("m".into()), value: Some(-8.0), within: Some(2.0), ..Default::default() };
    let at = |x: f64| s.mismatch(&TierOutcome::fail("x").metric("m", x));
    for inside in [-16.0, -10.0, -8.0, -4.0] {
        assert_eq!(at(inside), None, "{inside}");
    }
    for outside in [-16.5, -3.9, -0.0, 1.0] {
        assert!(at(outside).is_some(), "{outside}");
    }
}

/// Kills: deleting any field of the struct expression in `Case::for_synthetic_tiers` (it would
/// then keep the real case's checkpoint, export, inputs, tokenizer or `synthetic:`): L1/L3 run
/// on the stand-in's checkpoint, export and inputs, with no tokenizer of the real model, and the
/// rest of the case unchanged.
#[test]
fn synthetic_tiers_take_every_artifact_from_the_stand_in() {
    use onnx_parity::case::Case;
    use std::path::{Path, PathBuf};
    let yaml = "model_id: m\nmodel_type: gemma4\ndtype: float32\nlevels: [L1, L3]\n\
                checkpoint: real/ckpt\nonnx: real/onnx\ntokenizer: real/tokenizer.json\n\
                inputs:\n  prompts: [\"the real prompt\"]\n\
                synthetic:\n  checkpoint: syn/ckpt\n  onnx: syn/onnx\n  inputs:\n    prompts: [\"a tiny prompt\"]\n";
    let case = Case::from_yaml_str(yaml, Path::new("/c/cat/x.yaml")).unwrap();
    let syn = case.synthetic.clone().expect("synthetic parsed");
    let tiers = case.for_synthetic_tiers();
    assert_eq!(tiers.checkpoint.as_deref(), Some(syn.checkpoint.as_path()));
    assert_eq!(tiers.onnx.as_deref(), Some(syn.onnx.as_path()));
    assert_ne!(syn.checkpoint, PathBuf::from("/c/cat/real/ckpt"), "{syn:?}");
    assert_eq!(tiers.inputs, syn.inputs);
    assert_ne!(tiers.inputs, case.inputs);
    assert_eq!(tiers.tokenizer, None);
    assert!(case.tokenizer.is_some());
    assert_eq!(tiers.synthetic, None);
    assert_eq!((&tiers.model_id, tiers.dtype, &tiers.levels), (&case.model_id, case.dtype, &case.levels));
    // Without a stand-in, the case itself.
    let plain = Case::from_yaml_str("model_id: m\nmodel_type: gemma4\ndtype: float32\nlevels: [L1]\n", Path::new("/c/cat/y.yaml")).unwrap();
    assert_eq!(*plain.for_synthetic_tiers(), plain);
}

/// Kills: `Status::as_str` returning `""` or another word, and `Display` writing nothing: the
/// parity harness and reports print these words (`xfail: expected failure (...)`).
#[test]
fn status_words() {
    use onnx_parity::tiers::outcome::Status;
    let all = [(Status::Pass, "pass"), (Status::Fail, "fail"), (Status::Ambiguous, "ambiguous"), (Status::Skipped, "skipped"), (Status::Xfail, "xfail")];
    for (s, word) in all {
        assert_eq!(s.as_str(), word);
        assert_eq!(s.to_string(), word);
        assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::from(word));
    }
}

/// Kills: `Dtype::onnx_elem_type` returning `""` or another word (L1 and L2 compare it with the
/// export's activation element type): int4 is weight-only, its activations stay float32.
#[test]
fn dtype_activation_element_types() {
    use onnx_parity::case::Dtype;
    let want = [(Dtype::Float32, "float32"), (Dtype::Float16, "float16"), (Dtype::Bfloat16, "bfloat16"), (Dtype::Int4, "float32")];
    for (d, elem) in want {
        assert_eq!(d.onnx_elem_type(), elem, "{d}");
    }
}

fn case_yaml(extra: &str, path: &str) -> Result<onnx_parity::case::Case, onnx_parity::case::CaseError> {
    let yaml = format!("model_id: m\nmodel_type: gemma4\ndtype: float32\nlevels: [L1]\n{extra}");
    onnx_parity::case::Case::from_yaml_str(&yaml, std::path::Path::new(path))
}

/// Kills: `eos_token_id`'s integer visitors returning `None`: one id, of either sign, is a
/// one-entry list.
#[test]
fn eos_token_id_one_integer() {
    let c = case_yaml("generation:\n  eos_token_id: 106\n", "/c/cat/x.yaml").unwrap();
    assert_eq!(c.generation.eos_token_id, Some(vec![106]));
    let c = case_yaml("generation:\n  eos_token_id: -1\n", "/c/cat/x.yaml").unwrap();
    assert_eq!(c.generation.eos_token_id, Some(vec![-1]));
    let c = case_yaml("generation:\n  eos_token_id: [1, 106]\n", "/c/cat/x.yaml").unwrap();
    assert_eq!(c.generation.eos_token_id, Some(vec![1, 106]));
}

/// Kills: `normalize` popping a component that is not a name for `..` (the guard replaced by
/// `true`): a relative case path keeps the `..` that climbs above its start.
#[test]
fn relative_paths_keep_leading_parent_dirs() {
    let c = case_yaml("checkpoint: ../../../fx/ckpt\n", "cases/cat/x.yaml").unwrap();
    assert_eq!(c.checkpoint, Some(std::path::PathBuf::from("../fx/ckpt")));
    let c = case_yaml("checkpoint: ../../fx/ckpt\n", "cases/cat/x.yaml").unwrap();
    assert_eq!(c.checkpoint, Some(std::path::PathBuf::from("fx/ckpt")));
}

/// Kills: `Xfail`'s `Visitor::expecting` writing nothing: an `xfail:` of the wrong type says
/// what it may be.
#[test]
fn case_xfail_of_the_wrong_type_says_what_is_expected() {
    let e = case_yaml("xfail: 5\n", "/c/cat/x.yaml").unwrap_err().to_string();
    assert!(e.contains("a reason string, or a map from level"), "{e}");
}

/// Kills: the case's `tolerance_overrides.L4.cosine_similarity_warn` parser returning a constant
/// or nothing: the override reaches the resolved thresholds, and a ratio above 1 is rejected.
#[test]
fn cosine_warn_override_is_parsed() {
    use onnx_parity::tolerance::{resolve, Tolerances};
    let c = case_yaml("tolerance_overrides:\n  L4: {cosine_similarity_warn: 0.5}\n", "/c/cat/x.yaml").unwrap();
    let th = resolve(&Tolerances::defaults(), &c).unwrap();
    assert_eq!(th.l4.cosine_similarity_warn, 0.5);
    assert!(th.overridden.iter().any(|k| k == "L4.cosine_similarity_warn"), "{:?}", th.overridden);
    assert!(case_yaml("tolerance_overrides:\n  L4: {cosine_similarity_warn: 1.5}\n", "/c/cat/x.yaml").is_err());
}
