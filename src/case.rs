//! Case YAML (DESIGN §4): what to compare, with which inputs, at which tiers.
//!
//! mobius case files load unchanged; this project adds local artifact paths (`checkpoint`, `onnx`,
//! `tokenizer`, `inputs.tensors`), explicit `inputs.input_ids`, `chat_template`, `levels`, `xfail`,
//! `tolerance_overrides` and `bidirectional`. Unknown keys, wrong types and bad values are errors
//! that name the file, the key and what was expected, because a silently ignored typo
//! (`tolerence_overrides:`) would change what a green run means.
//!
//! Relative paths are resolved against the YAML's folder so a case can be run from anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use thiserror::Error;

use crate::expectation::Expectation;

/// A case file that cannot be used. Every variant names the file.
#[derive(Debug, Error)]
pub enum CaseError {
    #[error("{}: cannot read: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// YAML syntax, unknown key, wrong type or bad value. `message` carries serde_yaml's
    /// `<key path>: <problem>, expected <...> at line L column C`.
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    /// A rule that spans several keys (e.g. neither `level` nor `levels`).
    #[error("{}: `{field}`: {message}", path.display())]
    Invalid { path: PathBuf, field: &'static str, message: String },
}

/// A tier (DESIGN §2). Ordered L1 < … < L5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    L1,
    L2,
    L3,
    L4,
    L5,
}

impl Level {
    pub const ALL: [Level; 5] = [Level::L1, Level::L2, Level::L3, Level::L4, Level::L5];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::L1 => "L1",
            Level::L2 => "L2",
            Level::L3 => "L3",
            Level::L4 => "L4",
            Level::L5 => "L5",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Level::ALL.into_iter().find(|l| l.as_str() == s).ok_or_else(|| format!("unknown level {s:?}, expected one of L1, L2, L3, L4, L5"))
    }
}

impl<'de> Deserialize<'de> for Level {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// Parses mobius's `level:` string: levels joined by `+` (`"L4+L5"`), each at most once.
pub fn parse_level_expr(s: &str) -> Result<BTreeSet<Level>, String> {
    let mut set = BTreeSet::new();
    for part in s.split('+') {
        let level: Level = part.trim().parse().map_err(|e| format!("in level {s:?}: {e} (levels are joined by '+', e.g. \"L4+L5\")"))?;
        if !set.insert(level) {
            return Err(format!("in level {s:?}: {level} is listed twice"));
        }
    }
    Ok(set)
}

/// `level: "L4+L5"` as a set, validated while parsing so errors carry a line number.
#[derive(Debug, Clone)]
struct LevelExpr(BTreeSet<Level>);

impl<'de> Deserialize<'de> for LevelExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_level_expr(&s).map(LevelExpr).map_err(|e| de::Error::custom(format!("`level`: {e}")))
    }
}

/// Weight dtype of the export; selects the tolerance row (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float32,
    Float16,
    Bfloat16,
    /// Weight-only 4-bit quantisation; has no L3 (atol/rtol) row.
    Int4,
}

impl Dtype {
    pub const ALL: [Dtype; 4] = [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16, Dtype::Int4];

    /// The spelling used in YAML and in mobius (`float32`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Int4 => "int4",
        }
    }

    /// ONNX element type of the export's activations (as `onnx::proto::elem_type_name` prints
    /// it). int4 is weight-only (MatMulNBits); its activations stay float32.
    pub fn onnx_elem_type(self) -> &'static str {
        match self {
            Dtype::Float32 | Dtype::Int4 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Dtype::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| format!("unknown dtype {s:?}, expected one of float32, float16, bfloat16, int4"))
    }
}

/// Which attention layers see an image block bidirectionally. HF itself is inconsistent here,
/// so the case says which behaviour the export is judged against (the reference's own enum:
/// `all-layers`, `sliding-windowed`, `none`).
pub use onnx_parity_reference::BidirectionalScope;

/// `inputs:`. mobius's `prompts`, `images`, `audio` plus our explicit ids and tensors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    #[serde(default)]
    pub prompts: Vec<String>,
    /// As written (mobius resolves these against its `testdata/`); not resolved here.
    #[serde(default)]
    pub images: Vec<String>,
    /// As written (mobius speech cases); not resolved here.
    #[serde(default)]
    pub audio: Vec<String>,
    /// Explicit token ids, bypassing the tokenizer.
    #[serde(default)]
    pub input_ids: Option<Vec<i64>>,
    /// safetensors with `input_ids`, `pixel_values`, `image_position_ids`, `mm_token_type_ids`
    /// (DESIGN §4); resolved against the YAML's folder.
    #[serde(default)]
    pub tensors: Option<PathBuf>,
}

/// `generation:` (mobius). Greedy decoding parameters for L5 and golden generation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    #[serde(default)]
    pub max_new_tokens: Option<usize>,
    #[serde(default)]
    pub do_sample: bool,
    /// `eos_token_id: 1` or `eos_token_id: [1, 106]`, always held as a list.
    #[serde(default, deserialize_with = "de_one_or_many")]
    pub eos_token_id: Option<Vec<i64>>,
}

fn de_one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i64>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<i64>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a token id or a list of token ids")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(vec![v]))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v).map(|v| Some(vec![v])).map_err(|_| E::custom(format!("token id {v} is too large")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(id) = seq.next_element::<i64>()? {
                out.push(id);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_any(V)
}

/// Removes `.` and `name/..` pairs lexically, so messages show `fixtures/x` rather than
/// `cases/cat/../../fixtures/x` (no filesystem access: the path may not exist yet).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}

/// `xfail:` a measured, known divergence. A string applies to every tier of the case; a map
/// (`{L3: ..., L5: ...}`) to the tiers it names, each a reason string or a reason with the
/// measured signature (see [`crate::expectation`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Xfail {
    All(Expectation),
    PerLevel(BTreeMap<Level, Expectation>),
}

impl<'de> Deserialize<'de> for Xfail {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Xfail;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reason string, or a map from level (L1..L5) to a reason or {reason, <signature>}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Xfail, E> {
                Ok(Xfail::All(Expectation { reason: v.to_string(), signature: None }))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Xfail, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((level, expectation)) = map.next_entry::<Level, Expectation>()? {
                    if out.insert(level, expectation).is_some() {
                        return Err(de::Error::custom(format!("{level} is listed twice")));
                    }
                }
                Ok(Xfail::PerLevel(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// An optional number checked while parsing; the message names the key itself because
/// serde_yaml reports neither the key nor the line for errors raised inside a field.
fn checked<'de, D: Deserializer<'de>>(d: D, key: &str, is_ratio: bool) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(x) if is_ratio && !(0.0..=1.0).contains(&x) => Err(de::Error::custom(format!("`{key}`: expected a ratio in [0, 1], got {x}"))),
        Some(x) if !(x.is_finite() && x >= 0.0) => Err(de::Error::custom(format!("`{key}`: expected a finite number ≥ 0, got {x}"))),
        _ => Ok(v),
    }
}

fn de_atol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "atol", false)
}
fn de_rtol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "rtol", false)
}
fn de_margin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "near_tie_margin", false)
}
fn de_jaccard<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "top10_jaccard_warn", true)
}
fn de_cosine<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "cosine_similarity_warn", true)
}
fn de_token_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "min_token_match_ratio", true)
}

/// `tolerance_overrides.L3`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L3Override {
    #[serde(default, deserialize_with = "de_atol")]
    pub atol: Option<f64>,
    #[serde(default, deserialize_with = "de_rtol")]
    pub rtol: Option<f64>,
}

/// `tolerance_overrides.L4`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L4Override {
    #[serde(default, deserialize_with = "de_margin")]
    pub near_tie_margin: Option<f64>,
    #[serde(default, deserialize_with = "de_jaccard")]
    pub top10_jaccard_warn: Option<f64>,
    #[serde(default, deserialize_with = "de_cosine")]
    pub cosine_similarity_warn: Option<f64>,
}

/// `tolerance_overrides.L5`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L5Override {
    #[serde(default, deserialize_with = "de_token_ratio")]
    pub min_token_match_ratio: Option<f64>,
}

/// `tolerance_overrides:`: the shape of `default_tolerances.yaml` without the dtype level.
/// DESIGN §2: only with a YAML comment stating the measured evidence.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceOverrides {
    #[serde(rename = "L3", default)]
    pub l3: Option<L3Override>,
    #[serde(rename = "L4", default)]
    pub l4: Option<L4Override>,
    #[serde(rename = "L5", default)]
    pub l5: Option<L5Override>,
}

/// The file as written; turned into a [`Case`] by [`Case::load`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    model_id: String,
    model_type: String,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    task_type: Option<String>,
    dtype: Dtype,
    #[serde(default)]
    inputs: Option<Inputs>,
    #[serde(default)]
    level: Option<LevelExpr>,
    #[serde(default)]
    levels: Option<Vec<Level>>,
    #[serde(default)]
    generation: Option<Generation>,
    #[serde(default)]
    skip_reason: Option<String>,
    #[serde(default)]
    ci_skip_reason: Option<String>,
    #[serde(default, deserialize_with = "de_token_ratio")]
    min_token_match_ratio: Option<f64>,
    #[serde(default)]
    notes: Option<String>,
    #[serde(default)]
    checkpoint: Option<PathBuf>,
    #[serde(default)]
    onnx: Option<PathBuf>,
    #[serde(default)]
    tokenizer: Option<PathBuf>,
    #[serde(default)]
    chat_template: Option<bool>,
    #[serde(default)]
    xfail: Option<Xfail>,
    #[serde(default)]
    tolerance_overrides: Option<ToleranceOverrides>,
    #[serde(default)]
    bidirectional: Option<BidirectionalScope>,
    #[serde(default)]
    config: Option<PathBuf>,
    #[serde(default)]
    published_parameters: Option<u64>,
    #[serde(default)]
    synthetic: Option<RawSynthetic>,
}

/// `synthetic:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSynthetic {
    checkpoint: PathBuf,
    onnx: PathBuf,
    #[serde(default)]
    inputs: Option<Inputs>,
    #[serde(default)]
    notes: Option<String>,
}

/// A tiny random stand-in for a real model (a checkpoint derived from its config that keeps
/// every architectural feature, and its export): the graph (L1) and same-function (L3) tiers of
/// a case named after a real model run on it, so they need neither the real weights nor a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub checkpoint: PathBuf,
    pub onnx: PathBuf,
    /// Its own prompt (`inputs.tensors` of the fixture, or prompts through its tokenizer).
    pub inputs: Inputs,
    pub notes: Option<String>,
}

/// One parsed, validated case. Paths are resolved (relative to the YAML's folder).
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The YAML file.
    pub path: PathBuf,
    /// File stem (`gemma-4-e2b`).
    pub name: String,
    /// Parent folder name (`causal-lm`); goldens live under `goldens/<category>/`.
    pub category: String,
    pub model_id: String,
    pub model_type: String,
    pub revision: Option<String>,
    pub task_type: Option<String>,
    pub dtype: Dtype,
    pub inputs: Inputs,
    /// From `levels:` if present, else from mobius's `level:`.
    pub levels: BTreeSet<Level>,
    pub generation: Generation,
    pub skip_reason: Option<String>,
    pub ci_skip_reason: Option<String>,
    /// mobius's per-case L5 override (same meaning as `tolerance_overrides.L5`).
    pub min_token_match_ratio: Option<f64>,
    pub notes: Option<String>,
    /// Local HF-format checkpoint folder.
    pub checkpoint: Option<PathBuf>,
    /// Local export package folder.
    pub onnx: Option<PathBuf>,
    /// tokenizer.json (else the checkpoint's is used).
    pub tokenizer: Option<PathBuf>,
    /// Whether prompts go through the tokenizer's chat template: `None` = mobius's convention
    /// (`text-generation` cases are plain completions, every other task uses the template when
    /// the tokenizer has one), `Some(true)` = required, `Some(false)` = never (see
    /// `inputs::prompt`).
    pub chat_template: Option<bool>,
    pub xfail: Option<Xfail>,
    pub tolerance_overrides: ToleranceOverrides,
    /// `None` = the model type's default (what its HF `forward` does).
    pub bidirectional: Option<BidirectionalScope>,
    /// The real model's `config.json` (L2 when the checkpoint itself is absent).
    pub config: Option<PathBuf>,
    /// The hub's parameter count of the real model; L2 fails when the config implies another.
    pub published_parameters: Option<u64>,
    /// The stand-in L1 and L3 run on.
    pub synthetic: Option<Synthetic>,
}

impl Case {
    /// Reads and validates one case file.
    pub fn load(path: &Path) -> Result<Case, CaseError> {
        let text = std::fs::read_to_string(path).map_err(|source| CaseError::Io { path: path.to_path_buf(), source })?;
        Case::from_yaml_str(&text, path)
    }

    /// Parses case YAML as if it were read from `path` (used for names and relative paths).
    pub fn from_yaml_str(text: &str, path: &Path) -> Result<Case, CaseError> {
        let raw: RawCase = serde_yaml::from_str(text).map_err(|e| CaseError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        let invalid = |field: &'static str, message: String| CaseError::Invalid { path: path.to_path_buf(), field, message };

        let levels = match (&raw.levels, &raw.level) {
            (Some(list), _) => {
                let set: BTreeSet<Level> = list.iter().copied().collect();
                if set.is_empty() {
                    return Err(invalid("levels", "must list at least one of L1..L5".into()));
                }
                if set.len() != list.len() {
                    return Err(invalid("levels", "lists a level twice".into()));
                }
                set
            }
            (None, Some(expr)) => expr.0.clone(),
            (None, None) => return Err(invalid("levels", "missing: give `levels: [L1, ..]` or mobius's `level: \"L4+L5\"`".into())),
        };
        let overrides = raw.tolerance_overrides.unwrap_or_default();
        let override_ratio = overrides.l5.as_ref().and_then(|l5| l5.min_token_match_ratio);
        if raw.min_token_match_ratio.is_some() && override_ratio.is_some() {
            return Err(invalid("min_token_match_ratio", "given both at top level and in tolerance_overrides.L5; keep one".into()));
        }

        let base = path.parent().unwrap_or(Path::new(""));
        let resolve = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { normalize(&base.join(p)) });
        let mut inputs = raw.inputs.unwrap_or_default();
        inputs.tensors = resolve(inputs.tensors.take());
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let category = path.parent().and_then(|p| p.file_name()).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();

        Ok(Case {
            path: path.to_path_buf(),
            name,
            category,
            model_id: raw.model_id,
            model_type: raw.model_type,
            revision: raw.revision,
            task_type: raw.task_type,
            dtype: raw.dtype,
            inputs,
            levels,
            generation: raw.generation.unwrap_or_default(),
            skip_reason: raw.skip_reason,
            ci_skip_reason: raw.ci_skip_reason,
            min_token_match_ratio: raw.min_token_match_ratio,
            notes: raw.notes,
            checkpoint: resolve(raw.checkpoint),
            onnx: resolve(raw.onnx),
            tokenizer: resolve(raw.tokenizer),
            chat_template: raw.chat_template,
            xfail: raw.xfail,
            tolerance_overrides: overrides,
            bidirectional: raw.bidirectional,
            config: resolve(raw.config),
            published_parameters: raw.published_parameters,
            synthetic: raw.synthetic.map(|syn| {
                let mut inputs = syn.inputs.unwrap_or_default();
                inputs.tensors = resolve(inputs.tensors.take());
                Synthetic {
                    checkpoint: resolve(Some(syn.checkpoint)).unwrap_or_default(),
                    onnx: resolve(Some(syn.onnx)).unwrap_or_default(),
                    inputs,
                    notes: syn.notes,
                }
            }),
        })
    }

    /// The case L1 and L3 run on: the synthetic stand-in (its checkpoint, export and inputs, the
    /// rest of this case unchanged) when the case has one, else the case itself.
    pub fn for_synthetic_tiers(&self) -> std::borrow::Cow<'_, Case> {
        match &self.synthetic {
            None => std::borrow::Cow::Borrowed(self),
            Some(s) => std::borrow::Cow::Owned(Case {
                checkpoint: Some(s.checkpoint.clone()),
                onnx: Some(s.onnx.clone()),
                inputs: s.inputs.clone(),
                tokenizer: None,
                synthetic: None,
                ..self.clone()
            }),
        }
    }

    /// The `xfail` reason that applies to `level`, if any.
    pub fn xfail_for(&self, level: Level) -> Option<&Expectation> {
        match &self.xfail {
            None => None,
            Some(Xfail::All(e)) => Some(e),
            Some(Xfail::PerLevel(map)) => map.get(&level),
        }
    }
}

fn is_case_file(path: &Path) -> bool {
    let yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    yaml && path.file_name().and_then(|n| n.to_str()) != Some("default_tolerances.yaml")
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, Result<Case, CaseError>)>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(source) => {
            out.push((dir.to_path_buf(), Err(CaseError::Io { path: dir.to_path_buf(), source })));
            return;
        }
    };
    for entry in entries {
        match entry {
            Ok(entry) => {
                let p = entry.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if is_case_file(&p) {
                    let parsed = Case::load(&p);
                    out.push((p, parsed));
                }
            }
            Err(source) => out.push((dir.to_path_buf(), Err(CaseError::Io { path: dir.to_path_buf(), source }))),
        }
    }
}

/// Finds and parses cases. Each path is a case file (taken as is) or a folder walked
/// recursively for `*.yaml` / `*.yml`, skipping `default_tolerances.yaml`. A path that does not
/// exist is an `Io` error entry, so a typo in a root is seen. Sorted by path, duplicates removed.
pub fn discover(paths: &[PathBuf]) -> Vec<(PathBuf, Result<Case, CaseError>)> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out);
        } else {
            out.push((p.clone(), Case::load(p)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Case, CaseError> {
        Case::from_yaml_str(yaml, Path::new("/cases/causal-lm/demo.yaml"))
    }

    const MINIMAL: &str = "model_id: m\nmodel_type: gemma4_text\ndtype: float32\nlevel: \"L4+L5\"\n";

    /// Guards: every case this repository ships under `cases/` loads (a malformed one would
    /// otherwise only show up as a failing trial of the parity target).
    #[test]
    fn repository_cases_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
        // `cases/` is committed: its absence is a broken checkout, not a reason to pass.
        assert!(root.is_dir(), "{} is missing", root.display());
        let found = discover(&[root]);
        assert!(found.len() >= 20, "expected the committed cases, found {}", found.len());
        for (path, parsed) in found {
            if let Err(e) = parsed {
                panic!("{}: {e}", path.display());
            }
        }
    }

    /// Guards: our additions parse, and relative paths resolve against the YAML's folder while
    /// absolute ones stay.
    #[test]
    fn additions_parse_and_paths_resolve() {
        let yaml = r#"
model_id: tiny/gemma4
model_type: gemma4_unified
dtype: float16
levels: [L1, L3, L5]
checkpoint: ../../fixtures/tiny/checkpoint
onnx: /abs/onnx
tokenizer: tok/tokenizer.json
inputs:
  input_ids: [2, 105, 106]
  tensors: inputs.safetensors
generation:
  max_new_tokens: 8
  eos_token_id: [1, 106]
xfail: "exporter drops the bidirectional block (measured: L3 max_abs_diff 0.8)"
tolerance_overrides:
  # measured: f16 decode drifts by 0.15 on step 3
  L3: {atol: 0.2}
  L4: {near_tie_margin: 0.2}
bidirectional: sliding-windowed
"#;
        let c = parse(yaml).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L1, Level::L3, Level::L5]));
        assert_eq!(c.dtype, Dtype::Float16);
        // `..` is resolved lexically so messages show short paths.
        assert_eq!(c.checkpoint, Some(PathBuf::from("/fixtures/tiny/checkpoint")));
        assert_eq!(c.onnx, Some(PathBuf::from("/abs/onnx")));
        assert_eq!(c.tokenizer, Some(PathBuf::from("/cases/causal-lm/tok/tokenizer.json")));
        assert_eq!(c.inputs.tensors, Some(PathBuf::from("/cases/causal-lm/inputs.safetensors")));
        assert_eq!(c.inputs.input_ids, Some(vec![2, 105, 106]));
        assert_eq!(c.generation.eos_token_id, Some(vec![1, 106]));
        assert_eq!(c.bidirectional, Some(BidirectionalScope::SlidingWindowed));
        assert_eq!(c.tolerance_overrides.l3, Some(L3Override { atol: Some(0.2), rtol: None }));
        assert_eq!(c.xfail_for(Level::L3), c.xfail_for(Level::L5));
        assert!(c.xfail_for(Level::L1).unwrap().reason.starts_with("exporter"));
        assert_eq!((c.name.as_str(), c.category.as_str()), ("demo", "causal-lm"));
    }

    /// Guards: `levels:` wins over `level:`; `level:` alone is parsed; neither is an error.
    #[test]
    fn levels_source() {
        let c = parse(&format!("{MINIMAL}levels: [L3]\n")).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L3]));
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L4, Level::L5]));
        let e = parse("model_id: m\nmodel_type: t\ndtype: float32\n").unwrap_err();
        assert!(matches!(e, CaseError::Invalid { field: "levels", .. }), "{e}");
        assert!(parse(&format!("{MINIMAL}levels: []\n")).is_err());
        assert!(parse(&format!("{MINIMAL}levels: [L3, L3]\n")).is_err());
    }

    /// Guards: per-level xfail applies only to the levels it names.
    #[test]
    fn xfail_per_level() {
        let c = parse(&format!("{MINIMAL}xfail:\n  L5: drifts after 12 tokens\n")).unwrap();
        assert_eq!(c.xfail_for(Level::L5).map(|e| e.reason.as_str()), Some("drifts after 12 tokens"));
        assert_eq!(c.xfail_for(Level::L4), None);
        assert!(parse(&format!("{MINIMAL}xfail:\n  L9: x\n")).is_err());
    }

    /// Guards: an unknown key is an error naming the file and the key (top level and nested).
    #[test]
    fn unknown_key_is_named() {
        let e = parse(&format!("{MINIMAL}tolerence_overrides: {{}}\n")).unwrap_err().to_string();
        assert!(e.contains("/cases/causal-lm/demo.yaml") && e.contains("tolerence_overrides"), "{e}");
        assert!(e.contains("tolerance_overrides"), "should list the expected keys: {e}");
        let e = parse(&format!("{MINIMAL}inputs:\n  prompt: [hi]\n")).unwrap_err().to_string();
        assert!(e.contains("demo.yaml") && e.contains("`prompt`") && e.contains("prompts"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  L3: {{atol: 1, margin: 2}}\n")).unwrap_err().to_string();
        assert!(e.contains("margin"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  float32: {{atol: 1}}\n")).unwrap_err().to_string();
        assert!(e.contains("float32"), "dtype level is not part of overrides: {e}");
    }

    /// Guards: wrong types are errors naming the key and the expected type.
    #[test]
    fn wrong_type_is_named() {
        let e =
            parse("model_id: m\nmodel_type: t\ndtype: float32\nlevel: L4\ngeneration:\n  max_new_tokens: many\n").unwrap_err().to_string();
        assert!(e.contains("demo.yaml") && e.contains("max_new_tokens"), "{e}");
        let e = parse(&format!("{MINIMAL}inputs:\n  input_ids: [1, two]\n")).unwrap_err().to_string();
        assert!(e.contains("input_ids"), "{e}");
        let e = parse(&format!("{MINIMAL}generation:\n  eos_token_id: one\n")).unwrap_err().to_string();
        assert!(e.contains("eos_token_id") && e.contains("token id"), "{e}");
        let e = parse("model_type: t\ndtype: float32\nlevel: L4\n").unwrap_err().to_string();
        assert!(e.contains("model_id"), "missing required key must be named: {e}");
    }

    /// Guards: bad values (dtype, level strings, bidirectional, ratios) are rejected with the
    /// allowed values in the message.
    #[test]
    fn bad_values_are_rejected() {
        let e = parse("model_id: m\nmodel_type: t\ndtype: float64\nlevel: L4\n").unwrap_err().to_string();
        assert!(e.contains("dtype") && e.contains("float64") && e.contains("bfloat16"), "{e}");
        for bad in ["L6", "L4+L4", "L4,L5", "l4", "L4+"] {
            let e = parse(&format!("model_id: m\nmodel_type: t\ndtype: int4\nlevel: \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("level"), "{bad}: {e}");
        }
        let e = parse(&format!("{MINIMAL}bidirectional: both\n")).unwrap_err().to_string();
        assert!(e.contains("bidirectional") && e.contains("sliding-windowed"), "{e}");
        let e = parse(&format!("{MINIMAL}min_token_match_ratio: 1.5\n")).unwrap_err().to_string();
        assert!(e.contains("min_token_match_ratio") && e.contains("[0, 1]"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  L3: {{atol: -1}}\n")).unwrap_err().to_string();
        assert!(e.contains("atol"), "{e}");
        let e = parse(&format!("{MINIMAL}min_token_match_ratio: 0.9\ntolerance_overrides:\n  L5: {{min_token_match_ratio: 0.8}}\n"))
            .unwrap_err();
        assert!(matches!(e, CaseError::Invalid { field: "min_token_match_ratio", .. }), "{e}");
    }

    /// Guards: discovery walks folders recursively, takes .yaml/.yml, skips
    /// default_tolerances.yaml, reports unreadable / malformed files as entries, and sorts.
    #[test]
    fn discover_walks_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("b-cat");
        std::fs::create_dir_all(sub.join("deeper")).unwrap();
        std::fs::write(dir.path().join("default_tolerances.yaml"), "L3: {}\n").unwrap();
        std::fs::write(sub.join("z.yaml"), MINIMAL).unwrap();
        std::fs::write(sub.join("a.yml"), MINIMAL).unwrap();
        std::fs::write(sub.join("deeper/bad.yaml"), "model_id: [\n").unwrap();
        std::fs::write(sub.join("notes.txt"), "x").unwrap();
        let missing = dir.path().join("nope.yaml");
        let found = discover(&[dir.path().to_path_buf(), missing.clone()]);
        let names: Vec<String> = found.iter().map(|(p, _)| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
        assert_eq!(names, vec!["b-cat/a.yml", "b-cat/deeper/bad.yaml", "b-cat/z.yaml", "nope.yaml"]);
        assert!(found[0].1.is_ok());
        assert!(matches!(found[1].1, Err(CaseError::Parse { .. })));
        assert!(matches!(found[3].1, Err(CaseError::Io { .. })));
        assert_eq!(found[2].1.as_ref().unwrap().category, "b-cat");
    }

    /// Guards: Display spellings used in trial names and reports.
    #[test]
    fn display_spellings() {
        assert_eq!(Level::L3.to_string(), "L3");
        assert_eq!(Dtype::Bfloat16.to_string(), "bfloat16");
        assert_eq!("int4".parse::<Dtype>().unwrap(), Dtype::Int4);
        assert_eq!(BidirectionalScope::AllLayers.to_string(), "all-layers");
        assert_eq!(parse_level_expr("L1+L2+L3+L4+L5").unwrap().len(), 5);
    }
}
