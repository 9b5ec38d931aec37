//! Property-based tests of every parser the harness exposes to user data (issue 9, "Fuzzed
//! inputs"): case YAML, golden JSON (L4 and L5), Python hex floats, input safetensors,
//! `config.json` (the reference's `ModelConfig` and the harness's `ExportContract`), ONNX
//! protobuf bytes, JPEG files (libjpeg-turbo's code behind an unwinding error manager) and chat
//! templates.
//!
//! Every parser gets three kinds of input: arbitrary bytes or strings; raw mutations of a valid
//! committed file (truncation, byte flips, inserted syntax, deleted spans); and, for the
//! structured formats, mutations of the parsed document (a key dropped, a value replaced by one of
//! another type, a huge, negative or fractional number, an empty array or object). The properties:
//!
//! - never a panic (nor an abort from a huge allocation: the process would die);
//! - every error's message names the file it came from (`fuzz/<name>`);
//! - for a structured mutation, an error also names the mutated key, or (when the mutation broke
//!   a rule that spans keys, e.g. a dropped `layer_types` leaving a KV-shared layer without a
//!   source) another key of the same document.
//!
//! Valid documents are checked to round-trip where the format is written back (goldens, hex
//! floats). Case counts are fixed so the whole target stays well under 30 s in release on two
//! cores; `PROPTEST_CASES=N` runs every property N times instead, `PROPTEST_RNG_SEED=S` replays a
//! run. Malformed files with their exact messages are in `tests/corpus/` (`tests/corpus.rs`).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use onnx_parity::case::Case;
use onnx_parity::golden::{GenerationGolden, Golden};
use onnx_parity::hexfloat::{from_hex, to_hex, HexFloatError};
use onnx_parity::inputs::parse_safetensors;
use onnx_parity::onnx::contract::ExportContract;
use onnx_parity::onnx::graph::GraphSummary;
use onnx_parity_reference::ModelConfig;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use support::files;

// ---------------------------------------------------------------------------------------------
// Configuration and seeds
// ---------------------------------------------------------------------------------------------

/// `cases` runs of a property (or `PROPTEST_CASES`), no regression files written into `tests/`.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every committed case (mobius's cases and ours).
fn case_seeds() -> &'static [String] {
    static S: OnceLock<Vec<String>> = OnceLock::new();
    S.get_or_init(|| {
        files(&repo().join("cases"), ".yaml").iter().filter(|p| !p.ends_with("default_tolerances.yaml")).map(|p| read(p)).collect()
    })
}

/// Every committed golden: (L4 goldens, L5 generation goldens).
fn golden_seeds() -> &'static (Vec<String>, Vec<String>) {
    static S: OnceLock<(Vec<String>, Vec<String>)> = OnceLock::new();
    S.get_or_init(|| {
        let all = files(&repo().join("goldens"), ".json");
        let (gen, top): (Vec<_>, Vec<_>) = all.iter().partition(|p| p.to_string_lossy().ends_with("_generation.json"));
        (top.iter().map(|p| read(p)).collect(), gen.iter().map(|p| read(p)).collect())
    })
}

/// Every fixture checkpoint's `config.json` and the five real configs.
fn config_seeds() -> &'static [String] {
    static S: OnceLock<Vec<String>> = OnceLock::new();
    S.get_or_init(|| {
        let mut v: Vec<PathBuf> =
            files(&repo().join("fixtures"), "config.json").into_iter().filter(|p| p.ends_with("checkpoint/config.json")).collect();
        v.extend(files(&repo().join("cases/configs"), ".json"));
        v.iter().map(|p| read(p)).collect()
    })
}

/// A text-only inputs file from the fixtures and a small image one built here (every optional
/// tensor present).
fn safetensors_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        let text = std::fs::read(repo().join("fixtures/unified-text-kvshare/inputs.safetensors")).expect("fixture inputs");
        vec![text, image_inputs(&[1, 4], &[1, 2, 6], &[1, 2, 2], &[1, 4])]
    })
}

/// Small graph files from the fixtures (an embedding model and a vision encoder).
fn onnx_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        ["fixtures/unified-vision/onnx/embedding/model.onnx", "fixtures/unified-vision/onnx/vision_encoder/model.onnx"]
            .iter()
            .map(|p| std::fs::read(repo().join(p)).expect("fixture graph"))
            .collect()
    })
}

/// A safetensors file with `input_ids`, `pixel_values`, `image_position_ids`, `mm_token_type_ids`
/// of the given shapes (zero-filled).
fn image_inputs(ids: &[usize], px: &[usize], pos: &[usize], mm: &[usize]) -> Vec<u8> {
    use safetensors::tensor::{Dtype, TensorView};
    let n = |s: &[usize]| s.iter().product::<usize>();
    let bufs = [
        ("input_ids", Dtype::I64, ids, vec![0u8; 8 * n(ids)]),
        ("pixel_values", Dtype::F32, px, vec![0u8; 4 * n(px)]),
        ("image_position_ids", Dtype::I64, pos, vec![0u8; 8 * n(pos)]),
        ("mm_token_type_ids", Dtype::I64, mm, vec![0u8; 8 * n(mm)]),
    ];
    let views: Vec<(&str, TensorView<'_>)> =
        bufs.iter().map(|(name, dt, shape, data)| (*name, TensorView::new(*dt, shape.to_vec(), data).expect("view"))).collect();
    safetensors::serialize(views, None).expect("serialize")
}

// ---------------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------------

/// One step of a path into a JSON document.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Idx(usize),
}

/// Every node's path (the document itself included), in document order.
fn node_paths(v: &Value) -> Vec<Vec<Seg>> {
    fn walk(v: &Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        out.push(prefix.clone());
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    prefix.push(Seg::Key(k.clone()));
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    prefix.push(Seg::Idx(i));
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Every object key of a document.
fn all_keys(v: &Value) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                keys.extend(m.keys().cloned());
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    keys
}

/// What a structured mutation does at the chosen node.
#[derive(Debug, Clone)]
enum Edit {
    /// Remove the key (or array element); the document itself cannot be dropped and is emptied.
    Drop,
    /// Replace the value.
    Set(Value),
}

/// Values of every JSON type, and the numbers parsers get wrong: huge, negative, fractional,
/// beyond i64/u64, zero.
fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!("x")),
        Just(json!("")),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(-0.5)),
        Just(json!(1.5)),
        Just(json!(i64::MIN)),
        Just(json!(i64::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(1u64 << 40)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "a", null])),
        Just(json!({"unknown_key": 1})),
        Just(json!("0x1.8p+3")),
        Just(json!("nan")),
        Just(json!("-inf")),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z_]{0,12}".prop_map(Value::String),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![1 => Just(Edit::Drop), 3 => replacement().prop_map(Edit::Set)]
}

/// Applies `edit` at the `at`-th node; returns the object keys on its path, outermost first
/// (empty for the document itself, or an element of a top-level array).
fn mutate(doc: &mut Value, at: Index, edit: &Edit) -> Vec<String> {
    let paths = node_paths(doc);
    let path = at.get(&paths).clone();
    let keys: Vec<String> = path
        .iter()
        .filter_map(|s| match s {
            Seg::Key(k) => Some(k.clone()),
            Seg::Idx(_) => None,
        })
        .collect();

    let Some((last, parent_path)) = path.split_last() else {
        *doc = match edit {
            Edit::Drop => json!({}),
            Edit::Set(v) => v.clone(),
        };
        return keys;
    };
    let mut parent = &mut *doc;
    for s in parent_path {
        parent = match s {
            Seg::Key(k) => &mut parent[k.as_str()],
            Seg::Idx(i) => &mut parent[*i],
        };
    }
    match (edit, last, parent) {
        (Edit::Drop, Seg::Key(k), Value::Object(m)) => {
            m.remove(k);
        }
        (Edit::Drop, Seg::Idx(i), Value::Array(a)) => {
            a.remove(*i);
        }
        (Edit::Set(v), Seg::Key(k), Value::Object(m)) => {
            m.insert(k.clone(), v.clone());
        }
        (Edit::Set(v), Seg::Idx(i), Value::Array(a)) => a[*i] = v.clone(),
        _ => unreachable!("paths come from the document"),
    }
    keys
}

/// A byte-level mutation of a valid file.
#[derive(Debug, Clone)]
enum RawEdit {
    Truncate(Index),
    Flip(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Duplicate(Index, usize),
}

/// Syntax fragments of JSON, YAML and hex floats that turn a valid file into a subtly broken one.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "\"",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\n",
            "\t",
            "- ",
            "  ",
            "&a ",
            "*a",
            "!!binary ",
            "? ",
            "|",
            "1e400",
            "-",
            "\0",
            "~",
            "null",
            "\\ud800",
            "'",
            "#",
            "99999999999999999999999",
            "0x",
            "p+",
            "p-99999",
            "nan",
            "inf",
            "\u{feff}",
            "é",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 1..8),
    ]
}

fn raw_edit() -> impl Strategy<Value = RawEdit> {
    prop_oneof![
        any::<Index>().prop_map(RawEdit::Truncate),
        (any::<Index>(), 1..=255u8).prop_map(|(i, x)| RawEdit::Flip(i, x)),
        (any::<Index>(), fragment()).prop_map(|(i, f)| RawEdit::Insert(i, f)),
        (any::<Index>(), 1..64usize).prop_map(|(i, n)| RawEdit::Delete(i, n)),
        (any::<Index>(), 1..64usize).prop_map(|(i, n)| RawEdit::Duplicate(i, n)),
    ]
}

/// Applies `edits` in turn; positions index the first `window` bytes (where a binary format's
/// header lives) or the whole file when `window` is `None`.
fn apply_raw(bytes: &[u8], edits: &[RawEdit], window: Option<usize>) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for e in edits {
        let span = window.unwrap_or(b.len()).min(b.len()) + 1;
        let at = |i: &Index| i.index(span).min(b.len());
        match e {
            RawEdit::Truncate(i) => b.truncate(at(i)),
            RawEdit::Flip(i, x) => {
                let p = at(i);
                if p < b.len() {
                    b[p] ^= x;
                }
            }
            RawEdit::Insert(i, f) => {
                let p = at(i);
                b.splice(p..p, f.iter().copied());
            }
            RawEdit::Delete(i, n) => {
                let p = at(i);
                let end = (p + n).min(b.len());
                b.drain(p..end);
            }
            RawEdit::Duplicate(i, n) => {
                let p = at(i);
                let end = (p + n).min(b.len());
                let copy = b[p..end].to_vec();
                b.splice(p..p, copy);
            }
        }
    }
    b
}

/// Asserts the message names the file.
fn names_file(message: &str, origin: &Path) -> Result<(), TestCaseError> {
    prop_assert!(message.contains(&origin.display().to_string()), "the error does not name {}: {message}", origin.display());
    Ok(())
}

/// Asserts the message names the file and a key on the mutated `path` (the key itself or the
/// section it sits in: `rope_parameters` for `rope_parameters.full_attention.rope_type`), or, for
/// a rule spanning keys (a dropped `layer_types` leaving a KV-shared layer without a source),
/// another key of the document (`keys`).
fn names_file_and_key(message: &str, origin: &Path, path: &[String], keys: &BTreeSet<String>) -> Result<(), TestCaseError> {
    names_file(message, origin)?;
    if !path.is_empty() {
        let on_path = path.iter().any(|k| message.contains(k.as_str()));
        let other = keys.iter().any(|k| k.len() > 2 && message.contains(k.as_str()));
        prop_assert!(on_path || other, "the error names neither a key of {:?} nor another key: {}", path, message);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Parsers under test, each with the origin its errors must name
// ---------------------------------------------------------------------------------------------

const CASE: &str = "fuzz/cases/case.yaml";
const GOLDEN: &str = "fuzz/goldens/case.json";
const GENERATION: &str = "fuzz/goldens/case_generation.json";
const CONFIG: &str = "fuzz/checkpoint/config.json";
const INPUTS: &str = "fuzz/inputs.safetensors";
const GRAPH: &str = "fuzz/onnx/model.onnx";

fn case(text: &str) -> Result<(), String> {
    Case::from_yaml_str(text, Path::new(CASE)).map(drop).map_err(|e| e.to_string())
}

fn golden(text: &str) -> Result<(), String> {
    Golden::from_json_str(text, Path::new(GOLDEN)).map(drop).map_err(|e| e.to_string())
}

fn generation(text: &str) -> Result<(), String> {
    GenerationGolden::from_json_str(text, Path::new(GENERATION)).map(drop).map_err(|e| e.to_string())
}

/// Both readers of `config.json`; the first error (both must name the file).
fn config_json(text: &str) -> Result<(), String> {
    let reference = ModelConfig::from_json_str_at(text, Path::new(CONFIG)).map(drop).map_err(|e| e.to_string());
    let contract = ExportContract::from_config_str(text, Path::new(CONFIG)).map(drop).map_err(|e| e.to_string());
    reference.and(contract)
}

/// Both readers of `config.json`, each checked on its own.
fn config_errors(text: &str) -> Vec<String> {
    let reference = ModelConfig::from_json_str_at(text, Path::new(CONFIG)).err().map(|e| e.to_string());
    let contract = ExportContract::from_config_str(text, Path::new(CONFIG)).err().map(|e| e.to_string());
    reference.into_iter().chain(contract).collect()
}

fn inputs(bytes: &[u8]) -> Result<(), String> {
    parse_safetensors(bytes, Path::new(INPUTS)).map(drop).map_err(|e| e.to_string())
}

fn graph(bytes: &[u8]) -> Result<(), String> {
    GraphSummary::from_bytes(bytes, Path::new(GRAPH)).map(drop).map_err(|e| e.to_string())
}

/// A parser under test: `Ok` or the message a person would see.
type TextParser = fn(&str) -> Result<(), String>;

/// Text parsers by name, for the shared properties.
fn text_parser(which: usize) -> (&'static str, TextParser) {
    [(CASE, case as TextParser), (GOLDEN, golden), (GENERATION, generation), (CONFIG, config_json)][which]
}

fn text_seeds(which: usize) -> &'static [String] {
    match which {
        0 => case_seeds(),
        1 => &golden_seeds().0,
        2 => &golden_seeds().1,
        _ => config_seeds(),
    }
}

/// Serialises a mutated document in the parser's format (YAML for cases, JSON otherwise).
fn serialise(which: usize, doc: &Value) -> String {
    if which == 0 {
        serde_yaml::to_string(doc).expect("YAML")
    } else {
        serde_json::to_string_pretty(doc).expect("JSON")
    }
}

fn parse_doc(which: usize, text: &str) -> Value {
    if which == 0 {
        serde_yaml::from_str(text).expect("a committed case is YAML")
    } else {
        serde_json::from_str(text).expect("a committed file is JSON")
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds are valid
// ---------------------------------------------------------------------------------------------

/// Guards the mutation bases: every seed parses, so a mutant's error is the mutation's.
#[test]
fn every_seed_parses() {
    assert!(case_seeds().len() >= 10 && golden_seeds().0.len() >= 5 && golden_seeds().1.len() >= 5 && config_seeds().len() >= 10);
    for which in 0..4 {
        let (origin, parse) = text_parser(which);
        for (i, seed) in text_seeds(which).iter().enumerate() {
            assert_eq!(parse(seed), Ok(()), "{origin} seed {i}");
            // The re-serialised document (what structured mutations start from) parses too.
            assert_eq!(parse(&serialise(which, &parse_doc(which, seed))), Ok(()), "{origin} seed {i} re-serialised");
        }
    }
    for seed in safetensors_seeds() {
        assert_eq!(inputs(seed), Ok(()));
    }
    for seed in onnx_seeds() {
        assert_eq!(graph(seed), Ok(()));
    }
}

// ---------------------------------------------------------------------------------------------
// Text formats: case YAML, goldens, config.json
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(384))]

    /// Arbitrary text: no panic; an error names the file.
    #[test]
    fn text_formats_arbitrary_text(which in 0..4usize, text in prop_oneof!["\\PC{0,200}", any::<String>()]) {
        let (origin, parse) = text_parser(which);
        if let Err(m) = parse(&text) {
            names_file(&m, Path::new(origin))?;
        }
    }

    /// Raw mutations of committed files (truncated, flipped, inserted syntax): no panic; an
    /// error names the file.
    #[test]
    fn text_formats_raw_mutations(which in 0..4usize, seed in any::<Index>(), edits in prop::collection::vec(raw_edit(), 1..4)) {
        let (origin, parse) = text_parser(which);
        let base = seed.get(text_seeds(which));
        let text = String::from_utf8_lossy(&apply_raw(base.as_bytes(), &edits, None)).into_owned();
        if let Err(m) = parse(&text) {
            names_file(&m, Path::new(origin))?;
        }
    }
}

proptest! {
    #![proptest_config(config(768))]

    /// Structured mutations of committed files (key dropped, value of another type, huge,
    /// negative, empty): no panic; an error names the file and the key.
    #[test]
    fn text_formats_structured_mutations(which in 0..4usize, seed in any::<Index>(), at in any::<Index>(), e in edit()) {
        let (origin, _) = text_parser(which);
        let mut doc = parse_doc(which, seed.get(text_seeds(which)).as_str());
        let keys = all_keys(&doc);
        let path = mutate(&mut doc, at, &e);
        let text = serialise(which, &doc);
        let errors = match which {
            3 => config_errors(&text),
            _ => text_parser(which).1(&text).err().into_iter().collect(),
        };
        for m in errors {
            names_file_and_key(&m, Path::new(origin), &path, &keys)?;
        }
    }

    /// Two structured mutations at once (a dropped key and a mistyped one, ...).
    #[test]
    fn text_formats_double_mutations(which in 0..4usize, seed in any::<Index>(), at in any::<Index>(), e in edit(), at2 in any::<Index>(), e2 in edit()) {
        let (origin, _) = text_parser(which);
        let mut doc = parse_doc(which, seed.get(text_seeds(which)).as_str());
        mutate(&mut doc, at, &e);
        mutate(&mut doc, at2, &e2);
        let text = serialise(which, &doc);
        let errors = match which {
            3 => config_errors(&text),
            _ => text_parser(which).1(&text).err().into_iter().collect(),
        };
        for m in errors {
            names_file(&m, Path::new(origin))?;
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Generated goldens round-trip: `from_logits` (±Inf kept, any vocabulary size) → the file's
    /// bytes → parsed → the same bytes.
    #[test]
    fn golden_round_trip(
        logits in prop::collection::vec(prop_oneof![8 => -1e4f32..1e4, 1 => Just(f32::INFINITY), 1 => Just(f32::NEG_INFINITY), 1 => any::<f32>().prop_filter("not NaN", |x| !x.is_nan())], 1..40),
        ids in prop::collection::vec(0..=i64::MAX, 0..8),
    ) {
        let g = Golden::from_logits(&logits, &ids).expect("no NaN");
        let text = g.to_json_string();
        let back = Golden::from_json_str(&text, Path::new(GOLDEN)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.to_json_string(), text);
        prop_assert_eq!(back.top10_ids, g.top10_ids);
    }

    /// Generation goldens with any text (escaping, surrogate pairs) round-trip byte-identically.
    #[test]
    fn generation_golden_round_trip(model_id in any::<String>(), prompt in any::<String>(), tokens in prop::collection::vec(0..=i64::MAX, 0..12), text in prop::option::of(any::<String>())) {
        let g = GenerationGolden { model_id, prompt, generated_tokens: tokens, generated_text: text };
        let s = g.to_json_string();
        let back = GenerationGolden::from_json_str(&s, Path::new(GENERATION)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.to_json_string(), s);
        prop_assert_eq!(back, g);
    }
}

// ---------------------------------------------------------------------------------------------
// Hex floats
// ---------------------------------------------------------------------------------------------

fn roundtrips(x: f64) -> Result<(), TestCaseError> {
    let s = to_hex(x);
    let back = from_hex(&s).map_err(|e| TestCaseError::fail(format!("{x:e} → {s}: {e}")))?;
    prop_assert_eq!(back.to_bits(), x.to_bits(), "{:e} → {} → {:e}", x, s, back);
    Ok(())
}

/// CPython's `float.hex()` shape: `[-]0x1.<13 hex>p±E` (normal), `[-]0x0.<13 hex>p-1022`
/// (subnormal), `[-]0x0.0p+0` (zero).
fn python_shaped(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    if body == "0x0.0p+0" {
        return true;
    }
    let Some(rest) = body.strip_prefix("0x1.").or_else(|| body.strip_prefix("0x0.")) else { return false };
    let Some((mant, exp)) = rest.split_once('p') else { return false };
    let exp_ok = (exp.starts_with('+') || exp.starts_with('-')) && exp[1..].bytes().all(|c| c.is_ascii_digit()) && exp.len() > 1;
    mant.len() == 13
        && mant.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && exp_ok
        && (body.starts_with("0x1.") || exp == "-1022")
}

/// Guards the edges of the f32 range exactly: ±0, the smallest and largest subnormals, the
/// smallest normal, the largest finite, and ±Inf / NaN as the module defines them.
#[test]
fn hexfloat_f32_edges_and_non_finite() {
    let edges = [0.0f32, -0.0, f32::from_bits(1), f32::from_bits(0x007f_ffff), f32::MIN_POSITIVE, f32::MAX, f32::MIN, 1.0, -1.0];
    for x in edges {
        let s = to_hex(f64::from(x));
        assert!(python_shaped(&s), "{s}");
        assert_eq!(from_hex(&s).map(f64::to_bits), Ok(f64::from(x).to_bits()), "{s}");
    }
    assert_eq!(to_hex(-0.0), "-0x0.0p+0");
    assert_eq!(to_hex(f64::from(f32::from_bits(1))), "0x1.0000000000000p-149");
    assert_eq!(to_hex(f64::INFINITY), "inf");
    assert_eq!(to_hex(f64::NEG_INFINITY), "-inf");
    assert_eq!(to_hex(f64::NAN), "nan");
    assert_eq!(to_hex(-f64::NAN), "nan", "a NaN's sign is dropped, as Python's repr does");
    for s in ["inf", "Infinity", "+INF", " inf\n"] {
        assert_eq!(from_hex(s), Ok(f64::INFINITY), "{s:?}");
    }
    for s in ["-inf", "-infinity", "-Inf"] {
        assert_eq!(from_hex(s), Ok(f64::NEG_INFINITY), "{s:?}");
    }
    for s in ["nan", "NaN", "-nan", "+NAN"] {
        assert!(from_hex(s).is_ok_and(f64::is_nan), "{s:?}");
    }
    // Beyond f64: an error (Python's OverflowError), never a silent infinity.
    for s in ["0x1p+1024", "0x2p+1023", "0x1.fffffffffffff8p+1023", "-0x1p+99999999999999999999"] {
        assert!(matches!(from_hex(s), Err(HexFloatError::Overflow { .. })), "{s}");
    }
    for s in ["", " ", "0x", "0xp+1", "0x1p", "0x1p+", "0x1.8q+3", "0x1.8p+3.0", "--0x1", "0x1 p+3", "infinit", "nana"] {
        let e = from_hex(s).expect_err(s);
        assert!(e.to_string().contains(&format!("{s:?}")), "the error names the literal: {e}");
    }
}

proptest! {
    #![proptest_config(config(4096))]

    /// Every finite f32 (normals, subnormals, ±0) survives to_hex → from_hex bit-exactly.
    #[test]
    fn hexfloat_f32_round_trip(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        if x.is_finite() {
            let s = to_hex(f64::from(x));
            prop_assert!(python_shaped(&s), "{}", s);
            roundtrips(f64::from(x))?;
        } else if x.is_nan() {
            prop_assert_eq!(to_hex(f64::from(x)), "nan");
        }
    }

    /// The f32 subnormals specifically (1 in 256 of random bit patterns).
    #[test]
    fn hexfloat_f32_subnormal_round_trip(mant in 1u32..0x0080_0000, negative in any::<bool>()) {
        let x = f32::from_bits(mant | if negative { 0x8000_0000 } else { 0 });
        roundtrips(f64::from(x))?;
    }

    /// Every finite f64 (f64 subnormals included) round-trips too.
    #[test]
    fn hexfloat_f64_round_trip(bits in any::<u64>()) {
        let x = f64::from_bits(bits);
        if x.is_finite() {
            prop_assert!(python_shaped(&to_hex(x)), "{}", to_hex(x));
            roundtrips(x)?;
        }
    }

    /// Other spellings of the same value parse to it: the mantissa as an integer (`0x<M>p<E>`),
    /// upper case, leading zeros, a fraction shifted by whole digits, `+` sign, whitespace.
    #[test]
    fn hexfloat_equivalent_spellings(mant in 1u64..(1 << 53), exp in -1074i64..=971, negative in any::<bool>(), zeros in 0usize..4, shift in 0usize..6, upper in any::<bool>()) {
        // mant·2^exp is exact in f64 when the value is normal or an exact subnormal.
        let x = (mant as f64) * 2f64.powi(exp as i32);
        prop_assume!(x.is_finite() && x != 0.0 && x / 2f64.powi(exp as i32) == mant as f64);
        let sign = if negative { "-" } else { "+" };
        let digits = format!("{}{mant:x}", "0".repeat(zeros));
        let split = digits.len().saturating_sub(shift).max(1);
        let (int, frac) = digits.split_at(split);
        let frac_exp = exp + 4 * frac.len() as i64;
        let mut s = format!(" {sign}0x{int}.{frac}p{frac_exp:+}\n");
        if upper {
            s = s.to_uppercase();
        }
        let want = if negative { -x } else { x };
        prop_assert_eq!(from_hex(&s).map(f64::to_bits), Ok(want.to_bits()), "{:?}", s);
    }

    /// Exponents far outside the f64 range: overflow is an error, underflow rounds to zero or a
    /// subnormal; never a panic.
    #[test]
    fn hexfloat_extreme_exponents(mant in "[0-9a-f]{1,40}", frac in "[0-9a-f]{0,40}", exp in prop_oneof![any::<i64>(), -3000i64..3000]) {
        let s = format!("0x{mant}.{frac}p{exp}");
        match from_hex(&s) {
            Ok(v) => prop_assert!(v.is_finite() && v >= 0.0, "{} → {}", s, v),
            Err(e) => {
                prop_assert!(matches!(e, HexFloatError::Overflow { .. }), "{}: {}", s, e);
                prop_assert!(e.to_string().contains(&s));
            }
        }
    }

    /// Arbitrary text and mutated valid literals: no panic; an error quotes the literal.
    #[test]
    fn hexfloat_arbitrary_text(text in prop_oneof!["\\PC{0,40}", "[-+ ]?(0[xX])?[0-9a-fA-F.]{0,20}([pP][-+]?[0-9]{0,25})?", any::<String>()]) {
        if let Err(e) = from_hex(&text) {
            prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e);
        }
    }

    #[test]
    fn hexfloat_mutated_literals(bits in any::<u64>(), edits in prop::collection::vec(raw_edit(), 1..3)) {
        let s = to_hex(f64::from_bits(bits));
        let text = String::from_utf8_lossy(&apply_raw(s.as_bytes(), &edits, None)).into_owned();
        if let Err(e) = from_hex(&text) {
            prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Input safetensors
// ---------------------------------------------------------------------------------------------

/// Splits a safetensors file into its header JSON and data.
fn split_safetensors(bytes: &[u8]) -> (Value, &[u8]) {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).expect("header JSON"), &bytes[8 + n..])
}

fn join_safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    let h = serde_json::to_vec(header).expect("JSON");
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

proptest! {
    #![proptest_config(config(512))]

    /// Arbitrary bytes, and bytes behind a plausible or absurd header length: no panic; an error
    /// names the file.
    #[test]
    fn safetensors_arbitrary_bytes(len in prop_oneof![any::<u64>(), 0u64..64], body in prop::collection::vec(any::<u8>(), 0..128)) {
        for bytes in [body.clone(), [len.to_le_bytes().as_slice(), &body].concat()] {
            if let Err(m) = inputs(&bytes) {
                names_file(&m, Path::new(INPUTS))?;
            }
        }
    }

    /// Raw mutations of valid files, concentrated on the header: no panic; an error names the
    /// file.
    #[test]
    fn safetensors_raw_mutations(seed in any::<Index>(), edits in prop::collection::vec(raw_edit(), 1..4)) {
        let base = seed.get(safetensors_seeds());
        let header = 8 + u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
        let bytes = apply_raw(base, &edits, Some(header + 8));
        if let Err(m) = inputs(&bytes) {
            names_file(&m, Path::new(INPUTS))?;
        }
    }

    /// Structured header mutations (dtype, shape, data_offsets, a tensor dropped): no panic; an
    /// error names the file, and the tensor when the header itself is well-formed.
    #[test]
    fn safetensors_header_mutations(seed in any::<Index>(), at in any::<Index>(), e in edit()) {
        let (mut header, data) = split_safetensors(seed.get(safetensors_seeds()).as_slice());
        let key = mutate(&mut header, at, &e);
        let bytes = join_safetensors(&header, data);
        if let Err(m) = inputs(&bytes) {
            names_file(&m, Path::new(INPUTS))?;
            // A header the safetensors crate accepts fails on a named tensor.
            if !m.contains("is not a safetensors file") {
                let tensors = ["input_ids", "pixel_values", "image_position_ids", "mm_token_type_ids", "input_features"];
                prop_assert!(tensors.iter().any(|t| m.contains(t)), "no tensor named (mutated {:?}): {}", key, m);
            }
        }
    }

    /// Valid files of arbitrary (small) shapes: accepted exactly when the shapes follow the HF
    /// processor layout, otherwise an error naming the file and the tensor.
    #[test]
    fn safetensors_shapes(ids in prop::collection::vec(0usize..4, 0..4), px in prop::collection::vec(0usize..4, 0..5), pos in prop::collection::vec(0usize..4, 0..5), mm in prop::collection::vec(0usize..5, 0..4)) {
        let bytes = image_inputs(&ids, &px, &pos, &mm);
        let valid = ids.len() == 2 && ids[0] == 1 && ids[1] > 0 && px.len() == 3 && pos == [px[0], px[1], 2] && mm == [1, ids[1]];
        match inputs(&bytes) {
            Ok(()) => prop_assert!(valid, "accepted ids {:?} px {:?} pos {:?} mm {:?}", ids, px, pos, mm),
            Err(m) => {
                prop_assert!(!valid, "rejected a valid file: {}", m);
                names_file(&m, Path::new(INPUTS))?;
                prop_assert!(["input_ids", "pixel_values", "image_position_ids", "mm_token_type_ids"].iter().any(|t| m.contains(t)), "{}", m);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ONNX protobuf
// ---------------------------------------------------------------------------------------------

/// A protobuf length-delimited field.
fn field(tag: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut varint = |mut v: u64| loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    varint(u64::from(tag << 3 | 2));
    varint(body.len() as u64);
    out.extend_from_slice(body);
    out
}

/// Guards: subgraphs nested deeper than any real export (If inside If, 2000 levels) are a decode
/// error naming the file, not a stack overflow.
#[test]
fn onnx_deeply_nested_subgraphs() {
    let mut graph = Vec::new();
    for _ in 0..2000 {
        let attribute = field(6, &graph); // AttributeProto.g
        let node = field(5, &attribute); // NodeProto.attribute
        graph = field(1, &node); // GraphProto.node
    }
    let model = field(7, &graph); // ModelProto.graph
    let e = graph_error(&model);
    assert!(e.contains(GRAPH), "{e}");
}

fn graph_error(bytes: &[u8]) -> String {
    graph(bytes).expect_err("must fail")
}

proptest! {
    #![proptest_config(config(512))]

    /// Arbitrary bytes: no panic; an error names the file.
    #[test]
    fn onnx_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(m) = graph(&bytes) {
            names_file(&m, Path::new(GRAPH))?;
        }
    }

    /// Raw mutations of fixture graphs (truncated, flipped, spliced bytes): no panic; an error
    /// names the file.
    #[test]
    fn onnx_raw_mutations(seed in any::<Index>(), edits in prop::collection::vec(raw_edit(), 1..5)) {
        let bytes = apply_raw(seed.get(onnx_seeds()).as_slice(), &edits, None);
        if let Err(m) = graph(&bytes) {
            names_file(&m, Path::new(GRAPH))?;
        }
    }

    /// A valid graph's bytes behind a field whose length prefix claims more than there is (up to
    /// 2^64 − 1): an error, never an allocation of the claimed size.
    #[test]
    fn onnx_huge_length_prefix(seed in any::<Index>(), len in prop_oneof![any::<u64>(), Just(u64::MAX), Just(1u64 << 40)]) {
        let mut bytes = vec![7 << 3 | 2]; // ModelProto.graph
        let mut v = len;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 { bytes.push(byte); break; }
            bytes.push(byte | 0x80);
        }
        bytes.extend_from_slice(&seed.get(onnx_seeds())[..64]);
        if let Err(m) = graph(&bytes) {
            names_file(&m, Path::new(GRAPH))?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JPEG decoding and chat templates
// ---------------------------------------------------------------------------------------------

fn jpeg_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| files(&repo().join("fixtures/jpeg"), ".jpg").iter().map(|p| std::fs::read(p).expect("jpeg")).collect())
}

/// A JPEG result must be a consistent image or a non-empty reason.
fn jpeg_ok_or_reason(bytes: &[u8]) -> Result<(), TestCaseError> {
    match onnx_parity::inputs::jpeg::decode_like_pil(bytes) {
        Ok(img) => {
            prop_assert_eq!(img.rgb.len(), img.width * img.height * 3);
            prop_assert!(img.width * img.height <= onnx_parity::inputs::jpeg::PIL_MAX_PIXELS);
        }
        Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
    }
    Ok(())
}

const TEMPLATE: &str = "fuzz/chat_template.jinja";

fn render(template: &str) -> Result<String, String> {
    use onnx_parity::inputs::processor::chat::{ChatTemplate, Content};
    let tokens = [("bos_token", "<bos>"), ("image_token", "<|image|>")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    ChatTemplate::from_text(template, TEMPLATE)
        .render_user_turn(&[Content::Image, Content::Text("Describe.".into())], &tokens)
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(config(256))]

    /// Raw mutations of the fixture JPEGs (flipped, spliced, truncated bytes): libjpeg's fatal
    /// errors and truncation come back as errors, never a panic or an abort; what decodes is a
    /// consistent image.
    #[test]
    fn jpeg_raw_mutations(seed in any::<Index>(), edits in prop::collection::vec(raw_edit(), 1..4)) {
        jpeg_ok_or_reason(&apply_raw(seed.get(jpeg_seeds()).as_slice(), &edits, None))?;
    }

    /// Arbitrary bytes behind a JPEG start-of-image marker, and a fixture's header with its size
    /// fields overwritten (up to 2047 px a side, and 65535×65535, beyond PIL's bomb limit, which
    /// must be refused before any allocation): an error or a consistent image. (Sizes between
    /// decode fully, the missing data grey, as libjpeg and so PIL do: slow, not wrong — a random
    /// SOF marker in `body` can claim up to PIL's limit, ~1.3 GB and a second when it happens.)
    #[test]
    fn jpeg_arbitrary_bytes_and_sizes(body in prop::collection::vec(any::<u8>(), 0..256), seed in any::<Index>(), (w, h) in prop_oneof![(0u16..2048, 0u16..2048), Just((u16::MAX, u16::MAX)), Just((u16::MAX, 2731))]) {
        let mut bytes = vec![0xff, 0xd8];
        bytes.extend(&body);
        jpeg_ok_or_reason(&bytes)?;
        let mut bytes = seed.get(jpeg_seeds()).clone();
        // SOF0/SOF1/SOF2 marker: FF C0|C1|C2, length (2), precision (1), height (2), width (2).
        if let Some(at) = bytes.windows(2).position(|m| m[0] == 0xff && (0xc0..=0xc2).contains(&m[1])) {
            if bytes.len() > at + 9 {
                bytes[at + 5..at + 7].copy_from_slice(&h.to_be_bytes());
                bytes[at + 7..at + 9].copy_from_slice(&w.to_be_bytes());
            }
        }
        jpeg_ok_or_reason(&bytes)?;
    }

    /// Chat templates: arbitrary text and raw mutations of the committed template render or
    /// fail with an error naming the template file, never panic.
    #[test]
    fn chat_template_arbitrary_and_mutated(text in prop_oneof!["\\PC{0,120}", "[{}%#\\-+ a-z'\\[\\]|()=.]{0,80}"], edits in prop::collection::vec(raw_edit(), 1..4)) {
        if let Err(m) = render(&text) {
            names_file(&m, Path::new(TEMPLATE))?;
        }
        let seed = std::fs::read(repo().join("fixtures/chat-template/chat_template.jinja")).expect("template");
        if let Ok(mutated) = String::from_utf8(apply_raw(&seed, &edits, None)) {
            if let Err(m) = render(&mutated) {
                names_file(&m, Path::new(TEMPLATE))?;
            }
        }
    }
}
