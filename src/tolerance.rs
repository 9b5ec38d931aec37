//! Tolerance tables (`cases/default_tolerances.yaml`, mobius's shape) and the thresholds that
//! apply to one case after its dtype and overrides are taken into account (DESIGN §2).
//!
//! Precedence for each number: the case's `tolerance_overrides.<level>.<key>` (or mobius's
//! top-level `min_token_match_ratio`) over the table row for the case's dtype. A missing row is
//! an error, except L3 for `int4`, which has no row by design: [`Thresholds::l3`] is then `None`
//! and [`Thresholds::require_l3`] explains why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer};
use serde::Deserialize;
use thiserror::Error;

use crate::case::{Case, Dtype, Level};

/// The built-in defaults, the same file the repository ships.
const DEFAULTS_YAML: &str = include_str!("../cases/default_tolerances.yaml");

#[derive(Debug, Error)]
pub enum ToleranceError {
    #[error("{}: cannot read: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Syntax, unknown key (level, dtype or threshold name), wrong type or bad value.
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("no {level} tolerance for dtype {dtype}: add `{level}: {dtype}:` to the tolerance file or give all of tolerance_overrides.{level} in the case ({missing} missing)")]
    MissingRow { level: Level, dtype: Dtype, missing: &'static str },
}

/// A number checked while parsing; the message names the key because serde_yaml does not.
fn checked<'de, D: Deserializer<'de>>(d: D, key: &str, is_ratio: bool) -> Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if is_ratio && !(0.0..=1.0).contains(&x) {
        Err(de::Error::custom(format!("`{key}`: expected a ratio in [0, 1], got {x}")))
    } else if !(x.is_finite() && x >= 0.0) {
        Err(de::Error::custom(format!("`{key}`: expected a finite number ≥ 0, got {x}")))
    } else {
        Ok(x)
    }
}

fn atol<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "atol", false)
}
fn rtol<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "rtol", false)
}
fn margin<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "near_tie_margin", false)
}
fn jaccard<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "top10_jaccard_warn", true)
}
fn cosine<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "cosine_similarity_warn", true)
}
fn token_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, "min_token_match_ratio", true)
}

/// L3 row: `|actual − ref| ≤ atol + rtol·|ref|`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L3Tolerance {
    #[serde(deserialize_with = "atol")]
    pub atol: f64,
    #[serde(deserialize_with = "rtol")]
    pub rtol: f64,
}

/// L4 row: the near-tie margin gates AMBIGUOUS; the other two only warn.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L4Tolerance {
    #[serde(deserialize_with = "margin")]
    pub near_tie_margin: f64,
    #[serde(deserialize_with = "jaccard")]
    pub top10_jaccard_warn: f64,
    #[serde(deserialize_with = "cosine")]
    pub cosine_similarity_warn: f64,
}

/// L5 row.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L5Tolerance {
    #[serde(deserialize_with = "token_ratio")]
    pub min_token_match_ratio: f64,
}

/// A tolerance file: per level, per dtype rows.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tolerances {
    #[serde(rename = "L3", default)]
    pub l3: BTreeMap<Dtype, L3Tolerance>,
    #[serde(rename = "L4", default)]
    pub l4: BTreeMap<Dtype, L4Tolerance>,
    #[serde(rename = "L5", default)]
    pub l5: BTreeMap<Dtype, L5Tolerance>,
}

impl Tolerances {
    /// DESIGN §2 defaults (embedded `cases/default_tolerances.yaml`).
    pub fn defaults() -> Tolerances {
        // The embedded file is part of this crate and covered by `defaults_match_design`.
        Tolerances::from_yaml_str(DEFAULTS_YAML, Path::new("cases/default_tolerances.yaml"))
            .expect("embedded default_tolerances.yaml is valid")
    }

    /// Reads a tolerance file (same shape as the defaults).
    pub fn load(path: &Path) -> Result<Tolerances, ToleranceError> {
        let text = std::fs::read_to_string(path).map_err(|source| ToleranceError::Io { path: path.to_path_buf(), source })?;
        Tolerances::from_yaml_str(&text, path)
    }

    /// Parses tolerance YAML; `origin` only names the source in errors.
    pub fn from_yaml_str(text: &str, origin: &Path) -> Result<Tolerances, ToleranceError> {
        serde_yaml::from_str(text).map_err(|e| ToleranceError::Parse { path: origin.to_path_buf(), message: e.to_string() })
    }
}

/// What applies to one case.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    pub dtype: Dtype,
    /// `None` when the dtype has no L3 row and the case does not give both atol and rtol (int4).
    pub l3: Option<L3Tolerance>,
    pub l4: L4Tolerance,
    pub l5: L5Tolerance,
    /// Which numbers the case changed (`"L3.atol"`, …), for reports.
    pub overridden: Vec<String>,
}

impl Thresholds {
    /// The L3 row, or why there is none.
    pub fn require_l3(&self) -> Result<L3Tolerance, ToleranceError> {
        self.l3.ok_or(ToleranceError::MissingRow { level: Level::L3, dtype: self.dtype, missing: "atol, rtol" })
    }
}

/// One number: the override if given, else the table's, else missing.
fn pick(key: &'static str, over: Option<f64>, row: Option<f64>, overridden: &mut Vec<String>) -> Option<f64> {
    if over.is_some() {
        overridden.push(key.to_string());
    }
    over.or(row)
}

/// Resolves the thresholds for `case`: its dtype's rows with its overrides applied.
pub fn resolve(tol: &Tolerances, case: &Case) -> Result<Thresholds, ToleranceError> {
    let dtype = case.dtype;
    let ov = &case.tolerance_overrides;
    let mut overridden = Vec::new();

    let row3 = tol.l3.get(&dtype);
    let o3 = ov.l3.clone().unwrap_or_default();
    let atol = pick("L3.atol", o3.atol, row3.map(|r| r.atol), &mut overridden);
    let rtol = pick("L3.rtol", o3.rtol, row3.map(|r| r.rtol), &mut overridden);
    let l3 = match (atol, rtol) {
        (Some(atol), Some(rtol)) => Some(L3Tolerance { atol, rtol }),
        _ => None,
    };

    let row4 = tol.l4.get(&dtype);
    let o4 = ov.l4.clone().unwrap_or_default();
    let margin = pick("L4.near_tie_margin", o4.near_tie_margin, row4.map(|r| r.near_tie_margin), &mut overridden);
    let jacc = pick("L4.top10_jaccard_warn", o4.top10_jaccard_warn, row4.map(|r| r.top10_jaccard_warn), &mut overridden);
    let cos = pick("L4.cosine_similarity_warn", o4.cosine_similarity_warn, row4.map(|r| r.cosine_similarity_warn), &mut overridden);
    let l4 = match (margin, jacc, cos) {
        (Some(near_tie_margin), Some(top10_jaccard_warn), Some(cosine_similarity_warn)) => {
            L4Tolerance { near_tie_margin, top10_jaccard_warn, cosine_similarity_warn }
        }
        _ => {
            let missing = if margin.is_none() {
                "near_tie_margin"
            } else if jacc.is_none() {
                "top10_jaccard_warn"
            } else {
                "cosine_similarity_warn"
            };
            return Err(ToleranceError::MissingRow { level: Level::L4, dtype, missing });
        }
    };

    // Case::load rejects giving both spellings of the L5 override.
    let case_ratio = ov.l5.as_ref().and_then(|o| o.min_token_match_ratio).or(case.min_token_match_ratio);
    let ratio = pick("L5.min_token_match_ratio", case_ratio, tol.l5.get(&dtype).map(|r| r.min_token_match_ratio), &mut overridden);
    let l5 = match ratio {
        Some(min_token_match_ratio) => L5Tolerance { min_token_match_ratio },
        None => return Err(ToleranceError::MissingRow { level: Level::L5, dtype, missing: "min_token_match_ratio" }),
    };
    Ok(Thresholds { dtype, l3, l4, l5, overridden })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(extra: &str, dtype: &str) -> Case {
        let yaml = format!("model_id: m\nmodel_type: t\ndtype: {dtype}\nlevel: L3+L4+L5\n{extra}");
        Case::from_yaml_str(&yaml, Path::new("/c/cat/x.yaml")).unwrap()
    }

    /// Guards: the shipped defaults are exactly the numbers of DESIGN §2.
    #[test]
    fn defaults_match_design() {
        let t = Tolerances::defaults();
        let l3 = |d| t.l3.get(&d).map(|r| (r.atol, r.rtol));
        assert_eq!(l3(Dtype::Float32), Some((1e-3, 1e-3)));
        assert_eq!(l3(Dtype::Float16), Some((1e-1, 1e-1)));
        assert_eq!(l3(Dtype::Bfloat16), Some((5e-1, 5e-1)));
        assert_eq!(l3(Dtype::Int4), None);
        let l4 = |d| t.l4.get(&d).map(|r| (r.near_tie_margin, r.top10_jaccard_warn, r.cosine_similarity_warn)).unwrap();
        assert_eq!(l4(Dtype::Float32), (0.01, 0.7, 0.999));
        assert_eq!(l4(Dtype::Float16), (0.1, 0.5, 0.99));
        assert_eq!(l4(Dtype::Bfloat16), (0.5, 0.4, 0.95));
        assert_eq!(l4(Dtype::Int4), (1.0, 0.3, 0.9));
        let l5 = |d| t.l5.get(&d).map(|r| r.min_token_match_ratio).unwrap();
        assert_eq!([l5(Dtype::Float32), l5(Dtype::Float16), l5(Dtype::Bfloat16), l5(Dtype::Int4)], [1.0, 0.9, 0.8, 0.7]);
    }

    /// Guards: the case dtype picks the row.
    #[test]
    fn dtype_selects_row() {
        let t = Tolerances::defaults();
        let th = resolve(&t, &case("", "bfloat16")).unwrap();
        assert_eq!(th.l3, Some(L3Tolerance { atol: 0.5, rtol: 0.5 }));
        assert_eq!(th.l4.near_tie_margin, 0.5);
        assert_eq!(th.l5.min_token_match_ratio, 0.8);
        assert!(th.overridden.is_empty());
    }

    /// Guards: overrides replace only the numbers they name; the rest come from the row.
    #[test]
    fn overrides_apply_per_key() {
        let t = Tolerances::defaults();
        let c = case(
            "tolerance_overrides:\n  L3: {atol: 0.02}\n  L4: {top10_jaccard_warn: 0.2}\n  L5: {min_token_match_ratio: 0.5}\n",
            "float32",
        );
        let th = resolve(&t, &c).unwrap();
        assert_eq!(th.l3, Some(L3Tolerance { atol: 0.02, rtol: 1e-3 }));
        assert_eq!(th.l4, L4Tolerance { near_tie_margin: 0.01, top10_jaccard_warn: 0.2, cosine_similarity_warn: 0.999 });
        assert_eq!(th.l5.min_token_match_ratio, 0.5);
        assert_eq!(th.overridden, vec!["L3.atol", "L4.top10_jaccard_warn", "L5.min_token_match_ratio"]);
    }

    /// Guards: mobius's top-level `min_token_match_ratio` overrides the L5 row.
    #[test]
    fn top_level_ratio_overrides_l5() {
        let th = resolve(&Tolerances::defaults(), &case("min_token_match_ratio: 0.85\n", "float32")).unwrap();
        assert_eq!(th.l5.min_token_match_ratio, 0.85);
    }

    /// Guards: int4 has no L3 row: L4/L5 still resolve, L3 is absent with a clear error, and a
    /// case giving both atol and rtol supplies it.
    #[test]
    fn int4_has_no_l3_row() {
        let t = Tolerances::defaults();
        let th = resolve(&t, &case("", "int4")).unwrap();
        assert_eq!(th.l3, None);
        let msg = th.require_l3().unwrap_err().to_string();
        assert!(msg.contains("L3") && msg.contains("int4"), "{msg}");
        assert_eq!(th.l4.near_tie_margin, 1.0);
        let th = resolve(&t, &case("tolerance_overrides:\n  L3: {atol: 1.0}\n", "int4")).unwrap();
        assert_eq!(th.l3, None, "half an L3 row is not a row");
        let th = resolve(&t, &case("tolerance_overrides:\n  L3: {atol: 1.0, rtol: 0.5}\n", "int4")).unwrap();
        assert_eq!(th.require_l3().unwrap(), L3Tolerance { atol: 1.0, rtol: 0.5 });
    }

    /// Guards: a tolerance file missing an L4/L5 row for the case's dtype is an error naming it.
    #[test]
    fn missing_rows_are_errors() {
        let t = Tolerances::from_yaml_str(
            "L4:\n  float32: {near_tie_margin: 0.01, top10_jaccard_warn: 0.7, cosine_similarity_warn: 0.999}\n",
            Path::new("t.yaml"),
        )
        .unwrap();
        let e = resolve(&t, &case("", "float32")).unwrap_err().to_string();
        assert!(e.contains("L5") && e.contains("float32"), "{e}");
        let e = resolve(&t, &case("", "float16")).unwrap_err().to_string();
        assert!(e.contains("L4") && e.contains("float16"), "{e}");
    }

    /// Guards: tolerance files are strict: unknown level, dtype or key, and bad values, fail.
    #[test]
    fn tolerance_files_are_strict() {
        for bad in [
            "L6: {}\n",
            "L3:\n  float64: {atol: 1, rtol: 1}\n",
            "L3:\n  float32: {atol: 1, rtol: 1, extra: 2}\n",
            "L3:\n  float32: {atol: 1}\n",
            "L3:\n  float32: {atol: -1, rtol: 1}\n",
            "L5:\n  float32: {min_token_match_ratio: 2}\n",
        ] {
            let e = Tolerances::from_yaml_str(bad, Path::new("tol.yaml"));
            assert!(e.is_err(), "{bad:?} should be rejected");
            assert!(e.unwrap_err().to_string().starts_with("tol.yaml: "));
        }
        let e = Tolerances::from_yaml_str("L3:\n  float32: {atol: -1, rtol: 1}\n", Path::new("tol.yaml")).unwrap_err().to_string();
        assert!(e.contains("`atol`") && e.contains("-1"), "the bad key is named: {e}");
    }
}
