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

fn golden_json() -> String {
    let mut g = onnx_parity::golden::Golden::from_logits(&[0.5, 2.0, -1.0, 1.5], &[2, 7]).unwrap();
    g.component_norms = Some(vec![("vision_encoder".into(), 1.5), ("audio_encoder".into(), 2.5)]);
    g.to_json_string()
}

fn golden_err(text: &str) -> String {
    onnx_parity::golden::Golden::from_json_str(text, std::path::Path::new("goldens/c/x.json")).unwrap_err().to_string()
}

/// Kills: the ordered-map visitor's `expecting` writing nothing: a `component_norms` that is not
/// an object says that an object was expected.
#[test]
fn golden_component_map_of_the_wrong_type_says_object() {
    let text = golden_json();
    let start = text.find("\"component_norms\": {").unwrap();
    let bad = format!("{}\"component_norms\": 5\n}}\n", &text[..start]);
    let e = golden_err(&bad);
    assert!(e.contains("expected an object"), "{e}");
}

/// Kills: the duplicate-key check of the ordered map inverted (`==` → `!=`): distinct keys are
/// kept in file order, a repeated key is an error naming it.
#[test]
fn golden_component_map_rejects_only_duplicate_keys() {
    let text = golden_json();
    let g = onnx_parity::golden::Golden::from_json_str(&text, std::path::Path::new("x.json")).unwrap();
    let names: Vec<_> = g.component_norms.unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["vision_encoder", "audio_encoder"]);
    let dup = text.replace("\"audio_encoder\"", "\"vision_encoder\"");
    let e = golden_err(&dup);
    assert!(e.contains("duplicate key \"vision_encoder\""), "{e}");
}

/// Kills: `from_json_named`'s `key == "."` inverted: a value of the wrong type names its key
/// path, a document-level error (unknown key) is not prefixed with "`.`".
#[test]
fn golden_errors_name_the_key_path() {
    let text = golden_json();
    let wrong = text.replacen("\"top1_id\": 1", "\"top1_id\": \"one\"", 1);
    assert_ne!(wrong, text);
    let e = golden_err(&wrong);
    assert!(e.contains("`top1_id`: invalid type"), "{e}");
    let unknown = text.replacen("{\n", "{\n  \"provenance\": 1,\n", 1);
    let e = golden_err(&unknown);
    assert!(e.contains("unknown field `provenance`") && !e.contains("`.`"), "{e}");
}

const L4_TOL: onnx_parity::tolerance::L4Tolerance =
    onnx_parity::tolerance::L4Tolerance { near_tie_margin: 0.01, top10_jaccard_warn: 0.7, cosine_similarity_warn: 0.999 };

/// Kills: `worse` without its `Ambiguous` arm (an ambiguous live verdict would rank as a pass),
/// the "reference's top-1 differs" note inverted, and `argmax_match` inverted: the golden
/// agrees, the live reference's top-1 is the export's near-tied #2, so the tier is ambiguous.
#[test]
fn l4_ambiguous_live_reference_makes_the_tier_ambiguous() {
    use onnx_parity::golden::Golden;
    use onnx_parity::tiers::{l4, outcome::Status};
    let onnx = [0.0f32, 2.0, 1.995];
    let live = [0.0f32, 1.9, 2.0];
    let golden = Golden::from_logits(&onnx, &[4]).unwrap();
    let alone = l4::compare(&onnx, &[4], &golden, None, &L4_TOL);
    assert_eq!(alone.status, Status::Pass, "{}", alone.message);
    assert_eq!(alone.metrics.get("argmax_match"), Some(&serde_json::Value::Bool(true)));
    assert!(!alone.message.contains("note:"), "{}", alone.message);
    let out = l4::compare(&onnx, &[4], &golden, Some(&live), &L4_TOL);
    assert_eq!(out.status, Status::Ambiguous, "{}", out.message);
    assert!(out.message.contains("note: the reference's top-1 2 differs from the golden's 1"), "{}", out.message);
    assert!(!out.message.contains("warning: cosine"), "{}", out.message);
    let same = l4::compare(&onnx, &[4], &golden, Some(&onnx), &L4_TOL);
    assert_eq!(same.status, Status::Pass, "{}", same.message);
    assert!(!same.message.contains("note:"), "{}", same.message);
    let other = l4::compare(&live, &[4], &golden, None, &L4_TOL);
    assert_eq!(other.metrics.get("argmax_match"), Some(&serde_json::Value::Bool(false)), "{}", other.message);
}

/// Kills: the cosine warning at `<=` instead of `<`: a cosine exactly at the threshold does not
/// warn, one just below does.
#[test]
fn l4_cosine_at_the_warn_threshold_does_not_warn() {
    use onnx_parity::golden::Golden;
    use onnx_parity::tiers::l4;
    let onnx = [0.0f32, 2.0, 1.0];
    let live = [0.1f32, 2.0, 1.1];
    let c = onnx_parity::compare::cosine_similarity(&onnx, &live).unwrap();
    assert!(c < 1.0);
    let golden = Golden::from_logits(&onnx, &[4]).unwrap();
    let at = onnx_parity::tolerance::L4Tolerance { cosine_similarity_warn: c, ..L4_TOL };
    let out = l4::compare(&onnx, &[4], &golden, Some(&live), &at);
    assert!(!out.message.contains("warning: cosine"), "{}", out.message);
    assert_eq!(out.metrics.get("cosine").and_then(|v| v.as_f64()), Some(c));
    let above = onnx_parity::tolerance::L4Tolerance { cosine_similarity_warn: c + 1e-9, ..L4_TOL };
    let out = l4::compare(&onnx, &[4], &golden, Some(&live), &above);
    assert!(out.message.contains("warning: cosine"), "{}", out.message);
}

/// Kills: the token-id check `t < 0` as `t == 0` or `t <= 0`: id 0 (pad) is a valid token
/// anywhere, a negative id is an error naming the field.
#[test]
fn golden_token_ids_zero_is_valid_negative_is_not() {
    use onnx_parity::golden::{GenerationGolden, Golden};
    let p = std::path::Path::new("goldens/c/x.json");
    let g = Golden::from_logits(&[3.0, 1.0, 2.0], &[0, 5]).unwrap();
    assert_eq!((g.top1_id, g.top10_ids[2]), (0, 1));
    let text = g.to_json_string();
    assert_eq!(Golden::from_json_str(&text, p).unwrap(), g);
    let neg = text.replacen("\"top1_id\": 0", "\"top1_id\": -1", 1);
    assert_ne!(neg, text);
    let e = golden_err(&neg);
    assert!(e.contains("`top1_id`: expected a token id ≥ 0, found -1"), "{e}");
    let gen = GenerationGolden { model_id: "m".into(), prompt: "p".into(), generated_tokens: vec![0, 7], generated_text: None };
    let text = gen.to_json_string();
    assert_eq!(GenerationGolden::from_json_str(&text, p).unwrap(), gen);
    let neg = text.replacen("    7\n", "    -7\n", 1);
    assert_ne!(neg, text);
    let e = GenerationGolden::from_json_str(&neg, p).unwrap_err().to_string();
    assert!(e.contains("`generated_tokens[1]`: expected a token id ≥ 0, found -7"), "{e}");
}

/// Kills: `pairwise_sum`'s `n < 8` as `n <= 8`: numpy sums exactly 8 values as the unrolled
/// pairs `((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7))`, not one after the other; with 2^53 and ±1 the
/// two orders round differently (1 vs 0), so the golden's mean is numpy's 1/8.
#[test]
fn golden_mean_of_eight_logits_sums_in_pairs() {
    let big = 9_007_199_254_740_992.0f32; // 2^53, exact in f32 and f64
    let g = onnx_parity::golden::Golden::from_logits(&[1.0, big, 1.0, -big, 0.0, 0.0, 0.0, 0.0], &[]).unwrap();
    assert_eq!(g.logits_summary.mean, 0.125);
}

/// Kills: the unrolled loop of `pairwise_sum` skipped (`i < n - n % 8` as `>`): numpy adds
/// x[j + 8] into accumulator j before pairing, so 2^53 and −2^53 cancel in accumulator 0 and the
/// 1 survives (mean 1/16); summing the first 8 in pairs and the rest one by one loses it.
#[test]
fn golden_mean_of_sixteen_logits_uses_eight_accumulators() {
    let big = 9_007_199_254_740_992.0f32; // 2^53
    let mut x = [0.0f32; 16];
    (x[0], x[1], x[8]) = (big, 1.0, -big);
    let g = onnx_parity::golden::Golden::from_logits(&x, &[]).unwrap();
    assert_eq!(g.logits_summary.mean, 0.0625);
}

/// Kills: `pairwise_sum` splitting a block of more than 128 anywhere but at half rounded down to
/// a multiple of 8 (136 → 64 + 72): with 2^53, 1 and −2^53 placed around the split, the 1 is lost
/// or kept depending on which half it falls in.
#[test]
fn golden_mean_splits_long_blocks_where_numpy_does() {
    let big = 9_007_199_254_740_992.0f32; // 2^53
    let mean = |one_at: usize| {
        let mut x = [0.0f32; 136];
        (x[0], x[one_at], x[100]) = (big, 1.0, -big);
        onnx_parity::golden::Golden::from_logits(&x, &[]).unwrap().logits_summary.mean
    };
    // 1 at 60: first half, rounded into 2^53 there (a split at 60 or 17 would keep it).
    assert_eq!(mean(60), 0.0);
    // 1 at 64: second half, it survives −2^53 + 1 (a split at 72 would lose it).
    assert_eq!(mean(64), 1.0 / 136.0);
}
