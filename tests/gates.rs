//! Tests that kill the mutants `cargo mutants` found surviving in the gates (docs/mutation-testing.md):
//! each one pins a rule of expectation, tolerance, case or golden parsing, of the L1/L2/L4 checks
//! or of the tiers' scheduling (skip reasons, stand-ins, the live reference) that no other test
//! observed. Public API only; the module's own unit tests cover the rest.

mod support;

use onnx_parity::case::Candidate;
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
    let s = Signature { metric: Some("max_abs_diff".into()), value: Some(-8.0), within: Some(2.0), ..Default::default() };
    let at = |x: f64| {
        let o = TierOutcome::fail("x").with(|m| m.compared.max_abs_diff = Some(x));
        s.mismatch(&o.metrics, &o.message)
    };
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
    let all = [
        (Status::Pass, "pass"),
        (Status::Fail, "fail"),
        (Status::Ambiguous, "ambiguous"),
        (Status::Skipped, "skipped"),
        (Status::Xfail, "xfail"),
    ];
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
    use onnx_parity::tolerance::Tolerances;
    let c = case_yaml("tolerance_overrides:\n  L4: {cosine_similarity_warn: 0.5}\n", "/c/cat/x.yaml").unwrap();
    let th = c.thresholds(&Tolerances::defaults()).unwrap();
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
    assert_eq!(alone.metrics.value("argmax_match"), Some(serde_json::Value::Bool(true)));
    assert!(!alone.message.contains("note:"), "{}", alone.message);
    let out = l4::compare(&onnx, &[4], &golden, Some(&live), &L4_TOL);
    assert_eq!(out.status, Status::Ambiguous, "{}", out.message);
    assert!(out.message.contains("note: the reference's top-1 2 differs from the golden's 1"), "{}", out.message);
    assert!(!out.message.contains("warning: cosine"), "{}", out.message);
    let same = l4::compare(&onnx, &[4], &golden, Some(&onnx), &L4_TOL);
    assert_eq!(same.status, Status::Pass, "{}", same.message);
    assert!(!same.message.contains("note:"), "{}", same.message);
    let other = l4::compare(&live, &[4], &golden, None, &L4_TOL);
    assert_eq!(other.metrics.value("argmax_match"), Some(serde_json::Value::Bool(false)), "{}", other.message);
}

/// Kills: the cosine warning at `<=` instead of `<`: a cosine exactly at the threshold does not
/// warn, one just below does.
#[test]
fn l4_cosine_at_the_warn_threshold_does_not_warn() {
    use onnx_parity::golden::Golden;
    use onnx_parity::tiers::l4;
    let onnx = [0.0f32, 2.0, 1.0];
    let live = [0.1f32, 2.0, 1.1];
    let c = onnx_parity::metrics::cosine_similarity(&onnx, &live).unwrap();
    assert!(c < 1.0);
    let golden = Golden::from_logits(&onnx, &[4]).unwrap();
    let at = onnx_parity::tolerance::L4Tolerance { cosine_similarity_warn: c, ..L4_TOL };
    let out = l4::compare(&onnx, &[4], &golden, Some(&live), &at);
    assert!(!out.message.contains("warning: cosine"), "{}", out.message);
    assert_eq!(out.metrics.value("cosine").as_ref().and_then(|v| v.as_f64()), Some(c));
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

// ---- L1, L2 and the tier scheduling (src/tiers/{l1,l2,mod}.rs) -------------------------------

fn repo(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The `.onnx` graph files of an export package, by role (external data is not needed by L1).
fn graph_files(onnx: &std::path::Path) -> std::collections::BTreeMap<String, std::path::PathBuf> {
    onnx_parity::onnx::package::OnnxPackage::open(onnx).unwrap().submodels
}

fn metric_u64(o: &TierOutcome, name: &str) -> u64 {
    o.metrics.value(name).as_ref().and_then(|v| v.as_u64()).unwrap_or_else(|| panic!("metric {name} missing: {:?}", o.metrics))
}

/// Kills: the initialiser and op counts of `l1::check` (`+=` as `-=` / `*=`), a contract tensor
/// looked up by a name other than its own, the "unexpected input" and "unused initialisers"
/// checks inverted, and the dtype / rank / dim comparisons inverted: the committed fixture
/// exports (multimodal gemma4 and unified, text-only) honour their configs' contracts with no
/// violation (the gemma4 decoders leave out the optional `input_ids`: `e.required` as `true`
/// would report it), and their `initializers` / `op_inventory` metrics are the sums over every
/// sub-model.
#[test]
fn l1_fixture_exports_honour_their_contract() {
    use onnx_parity::onnx::graph::GraphSummary;
    use onnx_parity::tiers::{l1, outcome::Status};
    for fixture in ["unified-vision", "gemma4-vision", "gemma4-text-ple", "real-e2b-vision"] {
        let (config, onnx) = (repo(&format!("fixtures/{fixture}/checkpoint/config.json")), repo(&format!("fixtures/{fixture}/onnx")));
        let out = l1::check(&config, &onnx, "float32");
        assert_eq!(out.status, Status::Pass, "{fixture}: {}", out.message);
        assert_eq!(metric_u64(&out, "violations"), 0, "{fixture}");
        let (mut initializers, mut ops) = (0u64, std::collections::BTreeMap::<String, u64>::new());
        for file in graph_files(&onnx).values() {
            let g = GraphSummary::load(file).unwrap();
            initializers += g.initializer_count as u64;
            for (op, n) in g.op_inventory {
                *ops.entry(op).or_default() += n as u64;
            }
        }
        if fixture == "gemma4-vision" {
            let decoder = GraphSummary::load(&graph_files(&onnx)["decoder"]).unwrap();
            assert!(decoder.input("input_ids").is_none(), "the optional input this fixture leaves out");
        }
        assert!(initializers > 0 && !ops.is_empty(), "{fixture}");
        assert_eq!(metric_u64(&out, "initializers"), initializers, "{fixture}");
        assert_eq!(out.metrics.value("op_inventory"), Some(serde_json::to_value(&ops).unwrap()), "{fixture}");
    }
}

/// Kills: `tensor_violations` returning nothing, the dtype, rank and static-dim checks inverted
/// or always / never taken, a missing required input not reported (`e.required` guard as
/// `false`), an unexpected input or unused initialiser not reported: each defect edited into a
/// copy of the unified-vision export is one violation naming the sub-model, the tensor and what
/// the contract expects.
#[test]
fn l1_violations_name_the_tensor_and_what_the_contract_expects() {
    use onnx_parity::onnx::proto::{DimValue, TensorProto, ValueInfoProto};
    use onnx_parity::tiers::{l1, outcome::Status};
    let onnx = repo("fixtures/unified-vision/onnx");
    let config = repo("fixtures/unified-vision/checkpoint/config.json");
    let edited = support::edited_export(&onnx, |role, m| {
        let g = m.graph.as_mut().unwrap();
        let find =
            |list: &[ValueInfoProto], name: &str| list.iter().position(|v| v.name == name).unwrap_or_else(|| panic!("{role}: {name}"));
        match role {
            "decoder" => {
                // unified asks for bidirectional vision attention: the decoder needs input_ids.
                let i = find(&g.input, "input_ids");
                g.input.remove(i);
                let i = find(&g.output, "logits");
                let t = g.output[i].r#type.as_mut().unwrap().tensor_type.as_mut().unwrap();
                t.shape.as_mut().unwrap().dim[2].value = Some(DimValue::DimValue(511));
                let mut extra = g.input[find(&g.input, "attention_mask")].clone();
                extra.name = "past_key_values.99.key".into();
                g.input.push(extra);
                g.initializer.push(TensorProto { dims: vec![2], data_type: 1, name: "unused.weight".into(), ..Default::default() });
            }
            "embedding" => {
                let i = find(&g.input, "input_ids");
                g.input[i].r#type.as_mut().unwrap().tensor_type.as_mut().unwrap().elem_type = 1;
            }
            "vision_encoder" => {
                let i = find(&g.input, "pixel_values");
                g.input[i].r#type.as_mut().unwrap().tensor_type.as_mut().unwrap().shape.as_mut().unwrap().dim.pop();
                let i = find(&g.input, "pixel_position_ids");
                g.input[i].r#type.as_mut().unwrap().tensor_type.as_mut().unwrap().shape = None;
            }
            other => panic!("unexpected sub-model {other}"),
        }
    });
    // The interface check alone: the copies are re-encoded through the crate's partial ONNX
    // schema (no weights, functions without their opsets), which ORT would rightly refuse.
    let out = l1::check_interface(l1::L1Inputs { config: &config, export: edited.path(), float_dtype: "float32", pin: None });
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    let expected = [
        "decoder: input `input_ids` is missing",
        "decoder: output `logits` dim 2 is 511, contract expects 512 (shape [",
        "decoder: unexpected input `past_key_values.99.key` int64 [",
        "decoder: 1 initialisers are never used (e.g. unused.weight)",
        "embedding: input `input_ids` has dtype float32, contract expects int64",
        "vision_encoder: input `pixel_values` has rank 2 [",
        "vision_encoder: input `pixel_position_ids` declares no shape, contract expects [*, *, 2]",
    ];
    for e in expected {
        assert!(out.message.contains(e), "`{e}` not in: {}", out.message);
    }
    assert_eq!(metric_u64(&out, "violations"), expected.len() as u64, "{}", out.message);
    assert!(out.message.starts_with(&format!("{} contract violations: ", expected.len())), "{}", out.message);
    // The activations' element type is the case's: the f32 export is not an f16 one (its float32
    // logits alone would be allowed: a lower-precision build may cast them up).
    let f16 = l1::check(&config, &onnx, "float16");
    assert_eq!(f16.status, Status::Fail, "{}", f16.message);
    assert!(f16.message.contains("decoder: input `past_key_values.0.key` has dtype float32, contract expects float16"), "{}", f16.message);
    assert!(!f16.message.contains("output `logits` has dtype"), "{}", f16.message);
}

/// The committed full-size configs (`cases/configs/`).
fn real_config(name: &str) -> std::path::PathBuf {
    repo(&format!("cases/configs/{name}.json"))
}

fn l2_inputs(config: &std::path::Path) -> onnx_parity::tiers::l2::L2Inputs<'_> {
    onnx_parity::tiers::l2::L2Inputs {
        config,
        checkpoint: None,
        export: None,
        published_parameters: None,
        float_dtype: "float32",
        pin: None,
    }
}

/// Kills: `elements` as 0 / 1, the checkpoint count `reference + audio` as `-` / `*`, the
/// published-count comparison inverted and `gib` as an empty or other string: 12B's real config
/// implies the hub's 11,959,730,224 parameters (one audio tensor included), a published count
/// one off fails naming both and the difference, and the message gives the resident memory.
#[test]
fn l2_parameter_count_equals_the_published_one() {
    use onnx_parity::tiers::{l2, outcome::Status};
    let config = real_config("gemma-4-12B");
    let published = 11_959_730_224;
    let out = l2::check(l2::L2Inputs { published_parameters: Some(published), ..l2_inputs(&config) });
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert_eq!(metric_u64(&out, "checkpoint_parameters"), published);
    let (reference, audio) = (metric_u64(&out, "reference_parameters"), metric_u64(&out, "audio_parameters"));
    assert_eq!((reference, audio), (11_957_272_624, 2_457_600));
    assert!(out.message.contains("= 11,959,730,224 parameters"), "{}", out.message);
    assert!(out.message.contains("equal to the published count"), "{}", out.message);
    let resident = metric_u64(&out, "reference_resident_bytes");
    assert_eq!(resident, reference * 4, "no PLE table: every tensor resident in f32");
    assert!(
        out.message.contains(&format!("reference memory: {:.2} GiB resident (f32)", resident as f64 / (1u64 << 30) as f64)),
        "{}",
        out.message
    );
    assert!(out.message.contains("reference memory: 44.54 GiB resident (f32)"), "{}", out.message);
    let off = l2::check(l2::L2Inputs { published_parameters: Some(published + 1), ..l2_inputs(&config) });
    assert_eq!(off.status, Status::Fail, "{}", off.message);
    assert!(
        off.message.contains("the config implies 11,959,730,224 parameters, the published count is 11,959,730,225 (differs by 1)"),
        "{}",
        off.message
    );
}

/// Kills: the memory arithmetic of `l2::check` (`-`, `*` and `+` swapped in the resident, f32-
/// and bf16-checkpoint figures): E2B's per-layer-embedding table (262,144 × 35·256 elements) is
/// read through the mapping, so it is not resident, and counts 4 bytes an element from an f32
/// checkpoint, 2 from a bf16 one.
#[test]
fn l2_ple_table_is_not_resident() {
    use onnx_parity::tiers::l2;
    let config = real_config("gemma-4-E2B-it");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let t = &json["text_config"];
    let rows = t["vocab_size_per_layer_input"].as_u64().unwrap()
        * t["num_hidden_layers"].as_u64().unwrap()
        * t["hidden_size_per_layer_input"].as_u64().unwrap();
    assert_eq!(rows, 262_144 * 35 * 256);
    let out = l2::check(l2_inputs(&config));
    let reference = metric_u64(&out, "reference_parameters");
    assert_eq!(metric_u64(&out, "reference_resident_bytes"), (reference - rows) * 4);
    assert_eq!(metric_u64(&out, "reference_memory_f32_checkpoint_bytes"), reference * 4);
    assert_eq!(metric_u64(&out, "reference_memory_bf16_checkpoint_bytes"), (reference - rows) * 4 + rows * 2);
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let ple = format!("the PLE table read through the mapping ({} bf16 / {} f32 checkpoint)", gib(rows * 2), gib(rows * 4));
    assert!(out.message.contains(&ple), "`{ple}` not in {}", out.message);
}

/// A checkpoint folder whose `model.safetensors` holds a header listing `tensors` and no data
/// (L2 reads none).
fn header_only_checkpoint(tensors: &[(String, Vec<usize>)]) -> tempfile::TempDir {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, shape) in tensors {
        let bytes = 2 * shape.iter().product::<usize>();
        header.insert(name.clone(), serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [at, at + bytes]}));
        at += bytes;
    }
    let text = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend(text);
    let len = file.len() + at;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, file).unwrap();
    // The data region is a hole (sparse file): offsets are checked against the file's length.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len as u64).unwrap();
    dir
}

/// What E2B's real config implies a checkpoint holds: the reference's tensors, then the audio
/// tower's.
fn e2b_manifest() -> (onnx_parity_reference::audio_manifest::Manifest, onnx_parity_reference::audio_manifest::Manifest) {
    use onnx_parity_reference::audio_manifest::audio_manifest;
    use onnx_parity_reference::{Gemma4, ModelConfig};
    let config = ModelConfig::from_file(&real_config("gemma-4-E2B-it")).unwrap();
    let audio = audio_manifest(config.family().into(), config.audio_config().unwrap(), config.text().hidden_size).unwrap();
    let model = Gemma4::dry(config).unwrap();
    (model.weight_manifest().iter().map(|(n, s)| (n.clone(), s.clone())).collect(), audio)
}

/// Kills: every mutant of the checkpoint-header check in `l2::check` — the audio-shape guard
/// (`*want == shape` always / never / inverted), the "HF ignores it" guard always / never, the
/// audio and ignored counters (`+=` as `-=` / `*=`), the missing-audio and unexpected-tensor
/// checks inverted: a checkpoint holding exactly what E2B's config implies passes and says how
/// many audio tensors it holds; a K/V tensor of a KV-shared layer is counted as ignored by HF;
/// a tensor nothing reads, an audio tensor of the wrong shape and a missing one each fail by name.
#[test]
fn l2_checkpoint_headers_hold_exactly_what_the_config_implies() {
    use onnx_parity::tiers::{l2, outcome::Status};
    let config = real_config("gemma-4-E2B-it");
    let (reference, audio) = e2b_manifest();
    assert_eq!((reference.len(), audio.len()), (1199, 752));
    let run = |tensors: Vec<(String, Vec<usize>)>| {
        let dir = header_only_checkpoint(&tensors);
        let out = l2::check(l2::L2Inputs { checkpoint: Some(dir.path()), ..l2_inputs(&config) });
        assert_eq!(out.metrics.value("checked"), Some(serde_json::Value::from("config + checkpoint headers")), "{}", out.message);
        out
    };
    let all: Vec<_> = reference.iter().chain(&audio).cloned().collect();
    let out = run(all.clone());
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert!(out.message.contains("every tensor present with its shape; 752 audio tensors present (not run)"), "{}", out.message);
    assert!(!out.message.contains("HF ignores"), "{}", out.message);
    assert_eq!(metric_u64(&out, "checkpoint_parameters"), 5_104_298_467);

    // Layer 20 is past the first KV-shared layer (15 of 35): HF drops its K/V projections.
    let shared = "model.language_model.layers.20.self_attn.k_proj.weight";
    assert!(!reference.iter().any(|(n, _)| n == shared), "the reference reads no K/V of a shared layer");
    let mut with_shared = all.clone();
    with_shared.push((shared.into(), vec![256, 1536]));
    let out = run(with_shared);
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert!(
        out.message.contains("752 audio tensors present (not run); 1 K/V tensors of KV-shared layers that HF ignores"),
        "{}",
        out.message
    );

    let mut extra = all.clone();
    extra.push(("model.language_model.layers.3.self_attn.rotary.weight".into(), vec![4]));
    let out = run(extra);
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(
        out.message.contains("checkpoint: 1 tensors no Gemma 4 module reads (e.g. model.language_model.layers.3.self_attn.rotary.weight)"),
        "{}",
        out.message
    );

    let (name, shape) = audio[0].clone();
    let mut reshaped = all.clone();
    let wrong: Vec<usize> = shape.iter().map(|d| d + 1).collect();
    reshaped.iter_mut().find(|(n, _)| *n == name).unwrap().1 = wrong.clone();
    let out = run(reshaped);
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(
        out.message.contains(&format!("checkpoint: audio tensor `{name}` has shape {wrong:?}, the config implies {shape:?}")),
        "{}",
        out.message
    );
    assert!(out.message.contains("751 audio tensors present"), "{}", out.message);

    let missing: Vec<_> = all.iter().filter(|(n, _)| *n != name).cloned().collect();
    let out = run(missing);
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(out.message.contains(&format!("checkpoint: audio tensor `{name}` is missing")), "{}", out.message);
}

/// Kills: the full-size export's L1 verdict inverted in `l2::check`: an export whose dims are
/// not the config's fails L2 with L1's violations; one that honours it is a note.
#[test]
fn l2_full_size_export_must_honour_the_contract() {
    use onnx_parity::tiers::{l2, outcome::Status};
    let config = real_config("gemma-4-E2B-it");
    let tiny = repo("fixtures/real-e2b-vision/onnx");
    let out = l2::check(l2::L2Inputs { export: Some(&tiny), ..l2_inputs(&config) });
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(out.message.starts_with(&format!("full-size export {}: ", tiny.display())), "{}", out.message);
    assert!(out.message.contains("contract violations"), "{}", out.message);
    assert!(metric_u64(&out, "export_violations") > 0);
    // Its own (tiny) config: the export honours it.
    let own = repo("fixtures/real-e2b-vision/checkpoint/config.json");
    let out = l2::check(l2::L2Inputs { export: Some(&tiny), ..l2_inputs(&own) });
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert!(out.message.contains(&format!("full-size export {} honours the contract", tiny.display())), "{}", out.message);
    assert_eq!(metric_u64(&out, "export_violations"), 0);
}

fn skip_case(dir: &std::path::Path, fields: &str) -> onnx_parity::case::Case {
    let yaml = format!("model_id: m\nmodel_type: gemma4_unified\ndtype: float32\nlevels: [L1, L2, L3, L4, L5]\n{fields}");
    onnx_parity::case::Case::from_yaml_str(&yaml, &dir.join("cat/x.yaml")).unwrap()
}

fn no_goldens() -> onnx_parity::tiers::RunOptions {
    onnx_parity::tiers::RunOptions::with_goldens(std::path::PathBuf::from("/nonexistent-goldens"))
}

/// Kills: every mutant of `artifact_skip` (its body as `None` / `""` / `"xyzzy"`, the `None`
/// arms deleted, the config.json, weights and export-folder guards always / never / inverted,
/// `needs_weights && …` as `||`) and `level == Level::L3` inverted in `static_skip`: L1 and L3
/// need a checkpoint with config.json and an existing export folder, L3 also the weights, and
/// each missing piece is the skip reason, naming it.
#[test]
fn l1_l3_skip_reasons_name_the_missing_artifact() {
    use onnx_parity::case::Level::{L1, L3};
    use onnx_parity::tiers::static_skip;
    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, onnx) = (tmp.path().join("ckpt"), tmp.path().join("onnx"));
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::create_dir_all(&onnx).unwrap();
    let opts = no_goldens();
    let reason = |fields: String, level| static_skip(&skip_case(tmp.path(), &fields), &Candidate::default(), level, &opts);
    let both = format!("checkpoint: {}\nonnx: {}\n", ckpt.display(), onnx.display());

    let none = reason(format!("onnx: {}\n", onnx.display()), L1).unwrap();
    assert_eq!(
        none,
        format!(
            "no local checkpoint: add `checkpoint: <HF folder with config.json>` (or a `synthetic:` stand-in) to {}",
            tmp.path().join("cat/x.yaml").display()
        )
    );
    assert_eq!(reason(both.clone(), L1).unwrap(), format!("checkpoint {} has no config.json: download or regenerate it", ckpt.display()));
    std::fs::write(ckpt.join("config.json"), "{}").unwrap();
    assert_eq!(reason(both.clone(), L1), None, "L1 reads no weights");
    assert_eq!(
        reason(both.clone(), L3).unwrap(),
        format!("checkpoint {} has no safetensors weights: download or regenerate them", ckpt.display())
    );
    std::fs::write(ckpt.join("model.safetensors"), "").unwrap();
    assert_eq!(reason(both.clone(), L3), None);
    assert_eq!(reason(both, L1), None);
    let no_onnx = reason(format!("checkpoint: {}\n", ckpt.display()), L3).unwrap();
    assert!(no_onnx.starts_with("no ONNX export: add `onnx: <export folder>` (or a `synthetic:` stand-in) to "), "{no_onnx}");
    let gone = tmp.path().join("gone");
    let missing = reason(format!("checkpoint: {}\nonnx: {}\n", ckpt.display(), gone.display()), L1).unwrap();
    assert_eq!(missing, format!("ONNX export {} does not exist: export it (scripts/make-fixtures.sh for fixtures)", gone.display()));
}

/// Kills: the audio check of `static_skip` inverted (`!` deleted): a case with audio inputs is
/// skipped as out of scope, one without is not.
#[test]
fn audio_inputs_are_skipped_as_out_of_scope() {
    use onnx_parity::case::Level::L1;
    use onnx_parity::tiers::static_skip;
    let fixture = repo("fixtures/unified-vision");
    let fields = format!("checkpoint: {0}/checkpoint\nonnx: {0}/onnx\n", fixture.display());
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(static_skip(&skip_case(tmp.path(), &fields), &Candidate::default(), L1, &no_goldens()), None);
    let audio = skip_case(tmp.path(), &format!("{fields}inputs:\n  audio: [\"speech.wav\"]\n"));
    assert_eq!(
        static_skip(&audio, &Candidate::default(), L1, &no_goldens()).as_deref(),
        Some("audio inputs are out of scope: the reference implements text and vision only")
    );
}

/// Kills: `level == Level::L4` inverted and the `!needed.is_file()` test inverted in
/// `static_skip`: L4 needs `<case>.json`, L5 `<case>_generation.json`, each skipped naming the
/// one that is missing.
#[test]
fn l4_l5_skip_names_their_own_golden() {
    use onnx_parity::case::Level::{L4, L5};
    use onnx_parity::tiers::{static_skip, RunOptions};
    let tmp = tempfile::tempdir().unwrap();
    // An export folder that exists (a missing one is its own skip, before the goldens).
    let export = tmp.path().join("export");
    std::fs::create_dir_all(&export).unwrap();
    let case = skip_case(tmp.path(), &format!("onnx: {}\n", export.display()));
    let goldens = tmp.path().join("goldens");
    std::fs::create_dir_all(goldens.join("cat")).unwrap();
    let opts = RunOptions::with_goldens(goldens.clone());
    let (json, generation) = (goldens.join("cat/x.json"), goldens.join("cat/x_generation.json"));
    let missing = |p: &std::path::Path| format!("golden {} is missing: run", p.display());
    std::fs::write(&json, "{}").unwrap();
    assert_eq!(static_skip(&case, &Candidate::default(), L4, &opts), None);
    let l5 = static_skip(&case, &Candidate::default(), L5, &opts).unwrap();
    assert!(l5.starts_with(&missing(&generation)), "{l5}");
    std::fs::remove_file(&json).unwrap();
    std::fs::write(&generation, "{}").unwrap();
    assert_eq!(static_skip(&case, &Candidate::default(), L5, &opts), None);
    let l4 = static_skip(&case, &Candidate::default(), L4, &opts).unwrap();
    assert!(l4.starts_with(&missing(&json)), "{l4}");
}

/// Kills: `tier_case` without its `L1 | L3` arm: L1 and L3 of a case with `synthetic:` run on
/// the stand-in, L2/L4/L5 on the real artifacts.
#[test]
fn synthetic_stand_in_serves_l1_and_l3_only() {
    use onnx_parity::case::Level;
    use onnx_parity::tiers::tier_case;
    let tmp = tempfile::tempdir().unwrap();
    let case = skip_case(tmp.path(), "checkpoint: /real/ckpt\nonnx: /real/onnx\nsynthetic:\n  checkpoint: /syn/ckpt\n  onnx: /syn/onnx\n");
    for level in Level::ALL {
        let want = if matches!(level, Level::L1 | Level::L3) { "/syn/ckpt" } else { "/real/ckpt" };
        assert_eq!(tier_case(&case, level).checkpoint.as_deref(), Some(std::path::Path::new(want)), "{level}");
    }
}

/// Kills: `run_level`'s L1 arm deleted (L1 would report a skip instead of checking): L1 of the
/// unified-vision case, and of the E2B case on its synthetic stand-in, checks the export and
/// passes.
#[test]
fn run_level_l1_checks_the_export() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    use onnx_parity::tiers::{outcome::Status, run_level, static_skip};
    for case in ["cases/vision-language/unified-vision.yaml", "cases/causal-lm/gemma-4-e2b.yaml"] {
        let case = Case::load(&repo(case)).unwrap();
        let opts = onnx_parity::tiers::RunOptions::with_goldens(repo("goldens"));
        assert_eq!(static_skip(&case, &Candidate::default(), Level::L1, &opts), None);
        let out = run_level(&case, &Candidate::default(), Level::L1, &opts, &CaseEvaluations::default());
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert!(out.message.contains("sub-models honour the contract of"), "{}", out.message);
    }
}

/// Kills: `live_reference` as `Ok(None)` (L4/L5 judged on the golden alone although the case
/// has a checkpoint): with the reference available, L4 also reports the export's cosine with the
/// reference's logits and L5 the token match against the reference's own greedy tokens. Runs
/// both back ends on the tiny unified-text-kvshare case (ONNX Runtime from the cache).
#[test]
fn l4_l5_use_the_live_reference_when_the_case_has_a_checkpoint() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    use onnx_parity::tiers::{outcome::Status, run_level, static_skip, RunOptions};
    let case = Case::load(&repo("cases/causal-lm/unified-text-kvshare.yaml")).unwrap();
    let opts = RunOptions::with_goldens(repo("goldens"));
    let evals = CaseEvaluations::default();
    for level in [Level::L4, Level::L5] {
        assert_eq!(static_skip(&case, &Candidate::default(), level, &opts), None);
    }
    let l4 = run_level(&case, &Candidate::default(), Level::L4, &opts, &evals);
    assert_eq!(l4.status, Status::Pass, "{}", l4.message);
    let cosine = l4.metrics.value("cosine").as_ref().and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("no cosine: {:?}", l4.metrics));
    assert!(cosine > 0.999, "{cosine}");
    let l5 = run_level(&case, &Candidate::default(), Level::L5, &opts, &evals);
    assert_eq!(l5.status, Status::Pass, "{}", l5.message);
    assert_eq!(l5.metrics.value("reference_token_match_ratio").as_ref().and_then(|v| v.as_f64()), Some(1.0), "{}", l5.message);
    assert!(l5.message.contains("live reference: ratio 1.000"), "{}", l5.message);
    // The golden was made on the case's own ids: nothing was replayed, nothing to warn about.
    for out in [&l4, &l5] {
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        assert_eq!(out.metrics.trial.input_ids_replayed, None);
    }
}

/// Kills: `replayed` answering a fresh evaluation of the case's own inputs (with no warning, an
/// empty one or another one) instead of the golden's ids: when the golden's `input_ids` differ
/// from the case's, L4 and L5 run on the golden's ids (so L4 does not fail as "made for other
/// input_ids") and both warn, naming the first differing position.
#[test]
fn l4_l5_replay_the_golden_input_ids_and_warn() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    use onnx_parity::tiers::{run_level, RunOptions};
    let case = Case::load(&repo("cases/causal-lm/unified-text-kvshare.yaml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("causal-lm");
    std::fs::create_dir_all(&dir).unwrap();
    let mut golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo("goldens/causal-lm/unified-text-kvshare.json")).unwrap()).unwrap();
    assert_eq!(golden["input_ids"][5], 304);
    golden["input_ids"][5] = 305.into();
    std::fs::write(dir.join("unified-text-kvshare.json"), serde_json::to_string_pretty(&golden).unwrap()).unwrap();
    std::fs::copy(repo("goldens/causal-lm/unified-text-kvshare_generation.json"), dir.join("unified-text-kvshare_generation.json"))
        .unwrap();
    let opts = RunOptions::with_goldens(tmp.path());
    let evals = CaseEvaluations::default();
    let drift = "the case's input_ids differ from the golden's at position 5 (case 304, golden 305; 24 vs 24 ids)";
    for level in [Level::L4, Level::L5] {
        let out = run_level(&case, &Candidate::default(), level, &opts, &evals);
        assert!(!out.message.contains("made for other input_ids"), "{level}: {}", out.message);
        assert_eq!(out.warnings.len(), 1, "{level}: {:?}", out.warnings);
        assert!(out.warnings[0].starts_with(drift), "{level}: {}", out.warnings[0]);
        assert!(
            out.warnings[0].ends_with("this tier ran on the golden's input_ids (with the case's images), as mobius's L4 does"),
            "{}",
            out.warnings[0]
        );
        assert_eq!(out.metrics.value("input_ids_replayed"), Some(serde_json::Value::Bool(true)), "{level}");
    }
}

/// Kills: a run without L5 still decoding a candidate a second time, freely, when its forced run
/// was not its own greedy decode (a whole generation for nothing: only L5 reads it), and a run
/// with L5 not decoding it. The MoE fixture's export disagrees with the reference's greedy tokens
/// (issue: router softmaxed twice), so its forced run is not its free one.
#[test]
fn a_run_without_l5_decodes_no_candidate_twice() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    let case = Case::load(&repo("cases/causal-lm/gemma4-text-moe.yaml")).unwrap();
    for needed in [true, false] {
        let evals = CaseEvaluations::for_case(&case).decoding_freely(needed);
        let eval = evals.for_level(Level::L3, &case);
        let reference = eval.reference(&case).expect("the reference runs").run.generation.tokens.clone();
        let run = eval.candidates(&case, &Candidate::default()).remove(0).expect("the export runs");
        match (&run.free, needed) {
            (Some(free), true) => assert_ne!(free.tokens, reference, "the fixture's export decodes other tokens than the reference"),
            (None, false) => {}
            (free, _) => panic!("decoding freely {needed}: free run {free:?}"),
        }
        assert_eq!(run.forced.generation.tokens, reference, "the forced run is fed the reference's tokens either way");
    }
}
