//! Golden files, exactly mobius's (docs/design.md §4): `<case>.json` (L4: last-position top-k and
//! summary) and `<case>_generation.json` (L5: greedy tokens).
//!
//! Files must be byte-identical whichever side wrote them, so writing reproduces Python's
//! `json.dump(obj, f, indent=2)` followed by `"\n"`: two-space indent, `,` at line ends (no
//! trailing space), `": "` after keys, `[]`/`{}` for empty containers, `ensure_ascii` escaping
//! (`\uXXXX`, lower-case, surrogate pairs above U+FFFF), keys in mobius's order. Floats are
//! Python `float.hex()` strings ([`crate::hexfloat`]). Reading is strict: an unknown key is an
//! error, because a key we dropped could not be written back.

use std::fs;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use thiserror::Error;

use crate::hexfloat;
use crate::metrics::top_k;
use crate::onnx::protocol;

#[derive(Debug, Error)]
pub enum GoldenError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Not JSON, an unknown or duplicate key, a missing key or a wrong type.
    #[error("{}: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    /// Well-formed JSON with a bad value (a float string that is not `float.hex()` syntax, a
    /// summary that is not 4 numbers, ...).
    #[error("{}: `{field}`: {message}", path.display())]
    Field { path: PathBuf, field: String, message: String },
    #[error("cannot make a golden from an empty logit vector")]
    EmptyLogits,
    #[error("cannot make a golden from logits containing NaN (first at index {index})")]
    NanLogits { index: usize },
}

/// The golden side of L4's rule: token ids only, so the rule does not depend on the file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoldenTopIds<'a> {
    pub top1: i64,
    pub top2: i64,
    pub top10: &'a [i64],
}

/// `logits_summary`: `[max, min, mean, population std]` of the last-position logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitsSummary {
    pub max: f64,
    pub min: f64,
    pub mean: f64,
    pub std: f64,
}

/// `<case>.json`. Optional parts are `None` when the key is absent (mobius omits empty ones).
#[derive(Debug, Clone, PartialEq)]
pub struct Golden {
    pub top1_id: i64,
    pub top2_id: i64,
    /// Value descending, then index ascending.
    pub top10_ids: Vec<i64>,
    pub top10_logits: Vec<f64>,
    pub logits_summary: LogitsSummary,
    pub input_ids: Vec<i64>,
    /// L2 norms of component outputs, in file order (e.g. `projected_state`).
    pub component_norms: Option<Vec<(String, f64)>>,
    /// Output shapes of components, in file order.
    pub component_shapes: Option<Vec<(String, Vec<i64>)>>,
}

/// `<case>_generation.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationGolden {
    pub model_id: String,
    pub prompt: String,
    /// New tokens only (prompt excluded).
    pub generated_tokens: Vec<i64>,
    /// Decoded text; mobius omits the key when it had no tokenizer.
    #[serde(default)]
    pub generated_text: Option<String>,
}

/// The goldens folder of the case file at `case`, found from where the case lies, never from
/// where the program was built: the nearest folder above it holding `goldens/` (this project's
/// layout, `<repo>/cases/<category>/<case>.yaml` beside `<repo>/goldens/`) or `golden/`
/// (mobius's `testdata/cases` beside `testdata/golden`); with neither, `goldens/` beside the
/// nearest `cases/` folder above it (named in "golden … is missing"), else beside the case's
/// category folder.
pub fn root_for(case: &Path) -> PathBuf {
    let above = || case.ancestors().skip(1);
    for dir in above() {
        for name in ["goldens", "golden"] {
            if dir.join(name).is_dir() {
                return dir.join(name);
            }
        }
    }
    let cases = above().find(|d| d.file_name().is_some_and(|n| n == "cases"));
    let base = cases.and_then(Path::parent).or_else(|| case.parent().and_then(Path::parent)).unwrap_or(Path::new("."));
    base.join("goldens")
}

/// `(<root>/<category>/<case>.json, <root>/<category>/<case>_generation.json)`.
pub fn golden_paths(goldens_root: &Path, category: &str, case_name: &str) -> (PathBuf, PathBuf) {
    let dir = goldens_root.join(category);
    (dir.join(format!("{case_name}.json")), dir.join(format!("{case_name}_generation.json")))
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// The file as JSON holds it (floats still strings).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGolden {
    top1_id: i64,
    top2_id: i64,
    top10_ids: Vec<i64>,
    top10_logits: Vec<String>,
    logits_summary: Vec<String>,
    input_ids: Vec<i64>,
    #[serde(default, deserialize_with = "ordered_map")]
    component_norms: Option<Vec<(String, String)>>,
    #[serde(default, deserialize_with = "ordered_map")]
    component_shapes: Option<Vec<(String, Vec<i64>)>>,
}

/// A JSON object as a list of entries in file order (serde_json's map would sort the keys and
/// break byte-identical rewriting). Duplicate keys are rejected.
fn ordered_map<'de, D, V>(d: D) -> Result<Option<Vec<(String, V)>>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct OrderedVisitor<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> Visitor<'de> for OrderedVisitor<V> {
        type Value = Vec<(String, V)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Vec<(String, V)> = Vec::new();
            while let Some((k, v)) = map.next_entry::<String, V>()? {
                if out.iter().any(|(seen, _)| *seen == k) {
                    return Err(de::Error::custom(format!("duplicate key {k:?}")));
                }
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(OrderedVisitor(std::marker::PhantomData)).map(Some)
}

/// `serde_json::from_str`, naming the key path of a value of the wrong type (serde_json alone says
/// `invalid type: string "x", expected i64 at line 2 column 16` without the key).
fn from_json_named<T: de::DeserializeOwned>(text: &str, origin: &Path) -> Result<T, GoldenError> {
    let json = |source| GoldenError::Json { path: origin.to_path_buf(), source };
    let mut d = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut d).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        // "." is the document itself: unknown, missing and duplicate keys already name the key.
        json(if key == "." { inner } else { <serde_json::Error as de::Error>::custom(format!("`{key}`: {inner}")) })
    })?;
    d.end().map_err(json)?;
    Ok(value)
}

fn read_optional(path: &Path) -> Result<Option<String>, GoldenError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GoldenError::Io { path: path.to_path_buf(), source }),
    }
}

impl Golden {
    /// Reads a golden; a missing file is `Ok(None)` (the caller decides whether that skips).
    pub fn load(path: &Path) -> Result<Option<Golden>, GoldenError> {
        read_optional(path)?.map(|text| Golden::from_json_str(&text, path)).transpose()
    }

    /// Parses golden JSON; `origin` only names the source in errors.
    pub fn from_json_str(text: &str, origin: &Path) -> Result<Golden, GoldenError> {
        let raw: RawGolden = from_json_named(text, origin)?;
        let field_err = |field: String, message: String| GoldenError::Field { path: origin.to_path_buf(), field, message };
        let hex = |field: &str, i: usize, s: &str| hexfloat::from_hex(s).map_err(|e| field_err(format!("{field}[{i}]"), e.to_string()));
        let top10_logits = raw.top10_logits.iter().enumerate().map(|(i, s)| hex("top10_logits", i, s)).collect::<Result<Vec<_>, _>>()?;
        if let Some(i) = top10_logits.iter().position(|v| v.is_nan()) {
            // `from_logits` refuses NaN logits; a golden ranking a NaN is never right.
            return Err(field_err(
                format!("top10_logits[{i}]"),
                "expected a number, found NaN (a golden's top-10 logits are never NaN)".into(),
            ));
        }
        if raw.top10_ids.is_empty() {
            return Err(field_err("top10_ids".into(), "expected at least one token id (the top-1), found an empty list".into()));
        }
        let token =
            |field: String, t: i64| if t < 0 { Err(field_err(field, format!("expected a token id ≥ 0, found {t}"))) } else { Ok(()) };
        token("top1_id".into(), raw.top1_id)?;
        token("top2_id".into(), raw.top2_id)?;
        for (field, list) in [("top10_ids", &raw.top10_ids), (protocol::INPUT_IDS, &raw.input_ids)] {
            for (i, &t) in list.iter().enumerate() {
                token(format!("{field}[{i}]"), t)?;
            }
        }
        if top10_logits.len() != raw.top10_ids.len() {
            return Err(field_err("top10_logits".into(), format!("{} values for {} top10_ids", top10_logits.len(), raw.top10_ids.len())));
        }
        let summary = raw.logits_summary.iter().enumerate().map(|(i, s)| hex("logits_summary", i, s)).collect::<Result<Vec<_>, _>>()?;
        let [max, min, mean, std] = summary[..] else {
            return Err(field_err("logits_summary".into(), format!("expected [max, min, mean, std], got {} values", summary.len())));
        };
        let component_norms = match raw.component_norms {
            None => None,
            Some(entries) => Some(
                entries
                    .into_iter()
                    .map(|(k, s)| {
                        hexfloat::from_hex(&s).map(|v| (k.clone(), v)).map_err(|e| field_err(format!("component_norms.{k}"), e.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(Golden {
            top1_id: raw.top1_id,
            top2_id: raw.top2_id,
            top10_ids: raw.top10_ids,
            top10_logits,
            logits_summary: LogitsSummary { max, min, mean, std },
            input_ids: raw.input_ids,
            component_norms,
            component_shapes: raw.component_shapes,
        })
    }

    /// The ids L4 compares against.
    pub fn top_ids(&self) -> GoldenTopIds<'_> {
        GoldenTopIds { top1: self.top1_id, top2: self.top2_id, top10: &self.top10_ids }
    }

    /// Builds a golden from last-position logits the way mobius's `_extract_logits_golden` does:
    /// top-10 by value descending (ties: index ascending, where numpy's reversed `argsort` leaves
    /// ties in an unspecified order), `top2_id = top1_id` for a one-token vocabulary, and the
    /// summary of the logits widened to f64 with numpy's algorithms, so the mean and std are
    /// bit-identical to `np.mean` / `np.std` of `logits.astype(np.float64)`: pairwise summation
    /// (8-way unrolled blocks of ≤128, split in halves rounded to a multiple of 8), mean = sum / n,
    /// std = sqrt(pairwise_sum((x − mean)²) / n). ±Inf is kept (it prints as `inf`); NaN is an
    /// error, a golden with NaN logits is never right.
    pub fn from_logits(last_token_logits: &[f32], input_ids: &[i64]) -> Result<Golden, GoldenError> {
        if last_token_logits.is_empty() {
            return Err(GoldenError::EmptyLogits);
        }
        if let Some(index) = last_token_logits.iter().position(|v| v.is_nan()) {
            return Err(GoldenError::NanLogits { index });
        }
        let top = top_k(last_token_logits, 10);
        let top10_ids: Vec<i64> = top.iter().map(|&i| i as i64).collect();
        let top10_logits = top.iter().map(|&i| f64::from(last_token_logits[i])).collect();
        let top1_id = top10_ids[0];
        let top2_id = top10_ids.get(1).copied().unwrap_or(top1_id);
        Ok(Golden {
            top1_id,
            top2_id,
            top10_ids,
            top10_logits,
            logits_summary: logits_summary(last_token_logits),
            input_ids: input_ids.to_vec(),
            component_norms: None,
            component_shapes: None,
        })
    }

    /// The file's exact bytes (Python `json.dump(indent=2)` + `"\n"`).
    pub fn to_json_string(&self) -> String {
        let hexes = |v: &[f64]| Json::Arr(v.iter().map(|&x| Json::Str(hexfloat::to_hex(x))).collect());
        let ints = |v: &[i64]| Json::Arr(v.iter().map(|&x| Json::Int(x)).collect());
        let s = &self.logits_summary;
        let mut obj = vec![
            ("top1_id".to_string(), Json::Int(self.top1_id)),
            ("top2_id".to_string(), Json::Int(self.top2_id)),
            ("top10_ids".to_string(), ints(&self.top10_ids)),
            ("top10_logits".to_string(), hexes(&self.top10_logits)),
            ("logits_summary".to_string(), hexes(&[s.max, s.min, s.mean, s.std])),
            (protocol::INPUT_IDS.to_string(), ints(&self.input_ids)),
        ];
        if let Some(norms) = &self.component_norms {
            obj.push((
                "component_norms".into(),
                Json::Obj(norms.iter().map(|(k, v)| (k.clone(), Json::Str(hexfloat::to_hex(*v)))).collect()),
            ));
        }
        if let Some(shapes) = &self.component_shapes {
            obj.push(("component_shapes".into(), Json::Obj(shapes.iter().map(|(k, v)| (k.clone(), ints(v))).collect())));
        }
        dump(&Json::Obj(obj))
    }

    /// Writes the file atomically: temp file in the same folder, fsync, rename.
    pub fn save_atomic(&self, path: &Path) -> Result<(), GoldenError> {
        write_atomic(path, self.to_json_string().as_bytes())
    }
}

impl GenerationGolden {
    /// Reads a generation golden; a missing file is `Ok(None)`.
    pub fn load(path: &Path) -> Result<Option<GenerationGolden>, GoldenError> {
        read_optional(path)?.map(|text| GenerationGolden::from_json_str(&text, path)).transpose()
    }

    pub fn from_json_str(text: &str, origin: &Path) -> Result<GenerationGolden, GoldenError> {
        let g: GenerationGolden = from_json_named(text, origin)?;
        if let Some(i) = g.generated_tokens.iter().position(|&t| t < 0) {
            return Err(GoldenError::Field {
                path: origin.to_path_buf(),
                field: format!("generated_tokens[{i}]"),
                message: format!("expected a token id ≥ 0, found {}", g.generated_tokens[i]),
            });
        }
        Ok(g)
    }

    /// The file's exact bytes (Python `json.dump(indent=2)` + `"\n"`).
    pub fn to_json_string(&self) -> String {
        let mut obj = vec![
            ("model_id".to_string(), Json::Str(self.model_id.clone())),
            ("prompt".to_string(), Json::Str(self.prompt.clone())),
            ("generated_tokens".to_string(), Json::Arr(self.generated_tokens.iter().map(|&t| Json::Int(t)).collect())),
        ];
        if let Some(text) = &self.generated_text {
            obj.push(("generated_text".to_string(), Json::Str(text.clone())));
        }
        dump(&Json::Obj(obj))
    }

    /// Writes the file atomically: temp file in the same folder, fsync, rename.
    pub fn save_atomic(&self, path: &Path) -> Result<(), GoldenError> {
        write_atomic(path, self.to_json_string().as_bytes())
    }
}

// ---------------------------------------------------------------------------------------------
// numpy-compatible summary
// ---------------------------------------------------------------------------------------------

/// numpy's `pairwise_sum` for a contiguous float64 array (the inner loop of `np.add.reduce`).
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &a[i..] {
            res += x;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `[max, min, mean, std]` as numpy computes them on `logits.astype(np.float64)`.
fn logits_summary(logits: &[f32]) -> LogitsSummary {
    let x: Vec<f64> = logits.iter().map(|&v| f64::from(v)).collect();
    let n = x.len() as f64;
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = x.iter().copied().fold(f64::INFINITY, f64::min);
    // The reduction starts from add's identity 0.0, then adds the pairwise sum.
    let mean = (0.0 + pairwise_sum(&x)) / n;
    let sq: Vec<f64> = x.iter().map(|&v| (v - mean) * (v - mean)).collect();
    let std = ((0.0 + pairwise_sum(&sq)) / n).sqrt();
    LogitsSummary { max, min, mean, std }
}

// ---------------------------------------------------------------------------------------------
// Python-compatible JSON writing
// ---------------------------------------------------------------------------------------------

/// The subset of JSON goldens use, with object keys in insertion order.
enum Json {
    Int(i64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// `json.dumps(value, indent=2) + "\n"`.
fn dump(value: &Json) -> String {
    let mut out = String::new();
    write_value(value, 0, &mut out);
    out.push('\n');
    out
}

fn newline_indent(level: usize, out: &mut String) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_value(value: &Json, level: usize, out: &mut String) {
    match value {
        Json::Int(i) => out.push_str(&i.to_string()),
        Json::Str(s) => crate::python_json::write_string(s, true, out),
        Json::Arr(items) if items.is_empty() => out.push_str("[]"),
        Json::Obj(items) if items.is_empty() => out.push_str("{}"),
        Json::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(level + 1, out);
                write_value(item, level + 1, out);
            }
            newline_indent(level, out);
            out.push(']');
        }
        Json::Obj(items) => {
            out.push('{');
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(level + 1, out);
                crate::python_json::write_string(k, true, out);
                out.push_str(": ");
                write_value(v, level + 1, out);
            }
            newline_indent(level, out);
            out.push('}');
        }
    }
}

/// Temp file beside `path`, fsync, rename over `path`, then fsync the folder (best effort), so a
/// crash leaves either the old file or the new one, never a torn golden.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), GoldenError> {
    crate::atomic::write_atomic(path, bytes).map_err(|source| GoldenError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: a case's goldens are found from where the case file lies (this project's
    /// `goldens/` and mobius's `golden/` beside `cases/`), the nearest winning; with none,
    /// `goldens/` beside the `cases/` folder is what a missing golden names.
    #[test]
    fn goldens_are_found_beside_the_cases() {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("cases/causal-lm")).expect("mkdir");
        let case = repo.join("cases/causal-lm/x.yaml");
        assert_eq!(root_for(&case), repo.join("goldens"), "none yet: beside cases/");
        std::fs::create_dir_all(repo.join("goldens")).expect("mkdir");
        assert_eq!(root_for(&case), repo.join("goldens"));
        let mobius = dir.path().join("mobius/testdata");
        std::fs::create_dir_all(mobius.join("cases/vl")).expect("mkdir");
        std::fs::create_dir_all(mobius.join("golden")).expect("mkdir");
        assert_eq!(root_for(&mobius.join("cases/vl/y.yaml")), mobius.join("golden"));
        let lone = dir.path().join("elsewhere/cat/z.yaml");
        assert_eq!(root_for(&lone), dir.path().join("elsewhere/goldens"), "beside the category folder");
    }

    /// Guards: the writer matches `json.dumps(obj, indent=2)` for the shapes mobius writes,
    /// including empty containers and ensure_ascii escapes (expected text from CPython 3).
    #[test]
    fn writer_matches_python_json_dump() {
        let g = GenerationGolden {
            model_id: "m/x".into(),
            prompt: "tab\there \"q\" back\\slash\u{1}\u{7f}".into(),
            generated_tokens: vec![],
            generated_text: Some("é 中 😀\n\r\u{8}\u{c}/".into()),
        };
        // python3 -c 'import json; print(json.dumps({"model_id": "m/x", "prompt": "tab\there \"q\" back\\slash\x01\x7f",
        //   "generated_tokens": [], "generated_text": "é 中 😀\n\r\b\f/"}, indent=2))'
        let want = "{\n  \"model_id\": \"m/x\",\n  \"prompt\": \"tab\\there \\\"q\\\" back\\\\slash\\u0001\\u007f\",\n  \"generated_tokens\": [],\n  \"generated_text\": \"\\u00e9 \\u4e2d \\ud83d\\ude00\\n\\r\\b\\f/\"\n}\n";
        assert_eq!(g.to_json_string(), want);
        let back = GenerationGolden::from_json_str(want, Path::new("x.json")).unwrap();
        assert_eq!(back, g, "escapes decode back to the same text");
        let nested = Json::Obj(vec![("a".into(), Json::Arr(vec![Json::Int(-1), Json::Arr(vec![])])), ("b".into(), Json::Obj(vec![]))]);
        assert_eq!(dump(&nested), "{\n  \"a\": [\n    -1,\n    []\n  ],\n  \"b\": {}\n}\n");
    }

    /// Guards: mobius omits `generated_text` when it had no tokenizer; absence round-trips.
    #[test]
    fn generation_without_text() {
        let text = "{\n  \"model_id\": \"m\",\n  \"prompt\": \"p\",\n  \"generated_tokens\": [\n    5\n  ]\n}\n";
        let g = GenerationGolden::from_json_str(text, Path::new("g.json")).unwrap();
        assert_eq!(g.generated_text, None);
        assert_eq!(g.to_json_string(), text);
    }

    /// The test vector of `from_logits_matches_numpy`, computed in f32 exactly as numpy does:
    /// `(k/37 − 13)·scale[i % 5]` with `k = 7919·i mod 1000`.
    fn numpy_vector(n: usize) -> Vec<f32> {
        let scale = [1.0f32, 10.0, 100.0, 1000.0, 0.001];
        (0..n).map(|i| ((((i * 7919) % 1000) as f32) / 37.0 - 13.0) * scale[i % 5]).collect()
    }

    /// Guards: `logits_summary` is bit-identical to numpy 2.4's `np.max/min/mean/std` of the
    /// logits widened to float64 (pairwise summation; a naive running sum differs for n=262144).
    /// Expected strings from `float(np.mean(x.astype(np.float64))).hex()` etc.
    #[test]
    fn from_logits_matches_numpy() {
        let cases: [(usize, [&str; 4]); 4] = [
            (5, ["0x1.d2375a0000000p+12", "-0x1.a000000000000p+3", "0x1.aa7c4351d299ap+10", "0x1.6a723449b4c9bp+11"]),
            (100, ["0x1.8994c20000000p+13", "-0x1.61e2980000000p+13", "0x1.3d95706d9a15cp+7", "0x1.b6d24166d14b9p+11"]),
            (1000, ["0x1.b3cf900000000p+13", "-0x1.948f900000000p+13", "0x1.bef3a4dc9dae1p+6", "0x1.b70441b95ef79p+11"]),
            (262_144, ["0x1.b3cf900000000p+13", "-0x1.948f900000000p+13", "0x1.befb7d0398541p+6", "0x1.b702d0df0b117p+11"]),
        ];
        for (n, want) in cases {
            let g = Golden::from_logits(&numpy_vector(n), &[2, 3]).unwrap();
            let s = g.logits_summary;
            let got = [s.max, s.min, s.mean, s.std].map(hexfloat::to_hex);
            assert_eq!(got, want.map(String::from), "n = {n}");
        }
        // The naive sum really differs at this size, so the test can tell the algorithms apart.
        let x: Vec<f64> = numpy_vector(262_144).iter().map(|&v| f64::from(v)).collect();
        let naive = x.iter().sum::<f64>() / x.len() as f64;
        assert_ne!(hexfloat::to_hex(naive), "0x1.befb7d0398541p+6");
    }

    /// Guards: top-10 order (value desc, index asc), top2 = top1 for one logit, f32 values kept
    /// exactly, NaN and empty input rejected.
    #[test]
    fn from_logits_top_k_rules() {
        let logits = [1.0f32, 5.0, 5.0, -2.0, 0.1, 7.5, 3.0, 3.0, 3.0, 0.0, -1.0, 2.0];
        let g = Golden::from_logits(&logits, &[9]).unwrap();
        assert_eq!(g.top10_ids, vec![5, 1, 2, 6, 7, 8, 11, 0, 4, 9]);
        assert_eq!((g.top1_id, g.top2_id), (5, 1));
        assert_eq!(g.top10_logits[8], f64::from(0.1f32));
        assert_eq!(g.input_ids, vec![9]);
        let one = Golden::from_logits(&[4.0], &[]).unwrap();
        assert_eq!((one.top1_id, one.top2_id, one.logits_summary.std), (0, 0, 0.0));
        assert!(matches!(Golden::from_logits(&[1.0, f32::NAN], &[]), Err(GoldenError::NanLogits { index: 1 })));
        assert!(matches!(Golden::from_logits(&[], &[]), Err(GoldenError::EmptyLogits)));
        let inf = Golden::from_logits(&[f32::NEG_INFINITY, 1.0], &[]).unwrap();
        assert!(inf.to_json_string().contains("\"-inf\""), "−inf is written as Python does");
    }

    /// Guards: a golden built here survives save → load unchanged, and the file is written
    /// atomically (no temp files left, parent folders created, an existing file replaced).
    #[test]
    fn save_atomic_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (json, gen) = golden_paths(&dir.path().join("goldens"), "causal-lm", "tiny");
        assert!(json.ends_with("goldens/causal-lm/tiny.json"));
        assert!(gen.ends_with("goldens/causal-lm/tiny_generation.json"));
        assert_eq!(Golden::load(&json).unwrap(), None, "a missing golden is None, not an error");
        assert_eq!(GenerationGolden::load(&gen).unwrap(), None);
        let mut g = Golden::from_logits(&numpy_vector(300), &[2, 105]).unwrap();
        g.component_norms = Some(vec![("vision_encoder".into(), 42.5)]);
        g.component_shapes = Some(vec![("vision_encoder".into(), vec![1, 577, 1024])]);
        g.save_atomic(&json).unwrap();
        assert_eq!(Golden::load(&json).unwrap(), Some(g.clone()));
        let gg =
            GenerationGolden { model_id: "m".into(), prompt: "p".into(), generated_tokens: vec![1, 2], generated_text: Some("x".into()) };
        gg.save_atomic(&gen).unwrap();
        gg.save_atomic(&gen).unwrap();
        assert_eq!(GenerationGolden::load(&gen).unwrap(), Some(gg));
        let names: Vec<_> = fs::read_dir(json.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2, "temp files left behind: {names:?}");
    }

    /// Guards: reading is strict: unknown keys, bad hex floats and a malformed summary are
    /// errors naming the file and field.
    #[test]
    fn reading_is_strict() {
        let base = Golden::from_logits(&numpy_vector(20), &[1]).unwrap().to_json_string();
        let p = Path::new("goldens/x.json");
        let unknown = base.replacen("{\n", "{\n  \"provenance\": {},\n", 1);
        let e = Golden::from_json_str(&unknown, p).unwrap_err().to_string();
        assert!(e.contains("x.json") && e.contains("provenance"), "{e}");
        let bad_hex = base.replacen("\"0x1", "\"0y1", 1);
        let e = Golden::from_json_str(&bad_hex, p).unwrap_err().to_string();
        assert!(e.contains("top10_logits[0]"), "{e}");
        let g = Golden::from_json_str(&base, p).unwrap();
        let short = base
            .replace(&format!(",\n    \"{}\"\n  ],\n  \"input_ids\"", hexfloat::to_hex(g.logits_summary.std)), "\n  ],\n  \"input_ids\"");
        let e = Golden::from_json_str(&short, p).unwrap_err().to_string();
        assert!(e.contains("logits_summary"), "{e}");
        let dup = "{\"model_id\": \"a\", \"model_id\": \"b\", \"prompt\": \"p\", \"generated_tokens\": []}";
        assert!(GenerationGolden::from_json_str(dup, p).is_err());
        let e = Golden::load(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_err();
        assert!(matches!(e, GoldenError::Io { .. }), "a folder is an I/O error, not None");
    }

    /// Guards (mutation testing): containers nested in an array are indented one level deeper,
    /// as `json.dumps([[1], {"k": [2]}], indent=2)` does (no golden writes this shape yet, so
    /// only this test sees the array branch's recursion level).
    #[test]
    fn writer_indents_containers_nested_in_arrays() {
        let v = Json::Arr(vec![Json::Arr(vec![Json::Int(1)]), Json::Obj(vec![("k".into(), Json::Arr(vec![Json::Int(2)]))])]);
        assert_eq!(dump(&v), "[\n  [\n    1\n  ],\n  {\n    \"k\": [\n      2\n    ]\n  }\n]\n");
    }
}
