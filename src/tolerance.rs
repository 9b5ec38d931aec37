//! Tolerance tables (`cases/default_tolerances.yaml`, mobius's shape) and the thresholds that
//! apply to one case after its dtype and overrides are taken into account. The file's rows and a
//! case's `tolerance_overrides` are the same value types ([`L3Values`], …), validated once.
//!
//! Precedence for each number: the case's `tolerance_overrides.<level>.<key>` (or mobius's
//! top-level `min_token_match_ratio`, folded in by [`crate::case::Case::thresholds`]) over the
//! table row for the case's dtype. A missing row is
//! an error, except L3 for `int4`, which has no row by design: [`Thresholds::l3`] is then `None`
//! and [`Thresholds::require_l3`] explains why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer};
use serde::Deserialize;
use thiserror::Error;

use crate::level::{Dtype, Level};

/// The built-in defaults, the same file the repository ships.
const DEFAULTS_YAML: &str = include_str!("../cases/default_tolerances.yaml");

#[derive(Debug, Error)]
pub enum ToleranceError {
    #[error("{}: cannot read: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Syntax, unknown key (level, dtype or threshold name), wrong type or bad value.
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    /// A row of the file without one of its keys.
    #[error("{}: `{level}.{dtype}`: missing `{key}`", path.display())]
    Incomplete { path: PathBuf, level: &'static str, dtype: Dtype, key: &'static str },
    #[error("no {level} tolerance for dtype {dtype}: add `{level}: {dtype}:` to the tolerance file or give all of tolerance_overrides.{level} in the case ({missing} missing)")]
    MissingRow { level: Level, dtype: Dtype, missing: &'static str },
}

/// A number from a tolerance file or a case's overrides, checked while parsing: finite and ≥ 0,
/// a ratio also ≤ 1. The message names the key because serde_yaml names neither the key nor the
/// line for errors raised inside a field.
fn checked<'de, D: Deserializer<'de>>(d: D, key: &str, is_ratio: bool) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(x) if is_ratio && !(0.0..=1.0).contains(&x) => Err(de::Error::custom(format!("`{key}`: expected a ratio in [0, 1], got {x}"))),
        Some(x) if !(x.is_finite() && x >= 0.0) => Err(de::Error::custom(format!("`{key}`: expected a finite number ≥ 0, got {x}"))),
        _ => Ok(v),
    }
}

fn atol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "atol", false)
}
fn rtol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "rtol", false)
}
fn margin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "near_tie_margin", false)
}
fn jaccard<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "top10_jaccard_warn", true)
}
fn cosine<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "cosine_similarity_warn", true)
}
/// Also mobius's top-level `min_token_match_ratio` of a case.
pub(crate) fn token_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "min_token_match_ratio", true)
}

/// L3's numbers as written, in a tolerance file's row (where both are required, checked on
/// load) or a case's `tolerance_overrides.L3` (any of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L3Values {
    #[serde(default, deserialize_with = "atol")]
    pub atol: Option<f64>,
    #[serde(default, deserialize_with = "rtol")]
    pub rtol: Option<f64>,
}

fn k<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = checked(d, "k", false)?;
    match v {
        Some(x) if x < 1.0 => {
            Err(de::Error::custom(format!("`k`: expected ≥ 1 (a candidate is allowed at least the reference's own error), got {x}")))
        }
        _ => Ok(v),
    }
}
fn delta_ulps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "delta_ulps", false)
}

/// The calibrated L3 rule's numbers as written (`L3_calibrated.<dtype>`): see
/// [`CalibratedRule`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedValues {
    #[serde(default, deserialize_with = "k")]
    pub k: Option<f64>,
    #[serde(default, deserialize_with = "delta_ulps")]
    pub delta_ulps: Option<f64>,
}

/// The calibrated L3 rule for one precision (`crate::tiers::l3::calibrated`): a candidate's
/// error against the f64 arbiter may be `k` times the reference's own error at the candidate's
/// precision, plus `delta_ulps` units of the precision's roundoff at the row's scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibratedRule {
    pub k: f64,
    pub delta_ulps: f64,
    /// The precision's machine epsilon `ε` (f32 2⁻²³, f16 2⁻¹⁰, bf16 2⁻⁷): one ulp relative to
    /// the top of a value's binade, so `|x − fl(x)| ≤ ε·|x|`.
    pub epsilon: f64,
}

impl CalibratedRule {
    /// `δ`: the allowance per unit of scale.
    pub fn delta(&self) -> f64 {
        self.delta_ulps * self.epsilon
    }
}

/// The machine epsilon of a float dtype (one ulp at 1); `None` for int4, whose error is not a
/// rounding of the reference's arithmetic.
pub fn epsilon(dtype: Dtype) -> Option<f64> {
    match dtype {
        Dtype::Float32 => Some(2f64.powi(-23)),
        Dtype::Float16 => Some(2f64.powi(-10)),
        Dtype::Bfloat16 => Some(2f64.powi(-7)),
        Dtype::Int4 | Dtype::Int8 => None,
    }
}

/// L4's numbers as written (see [`L3Values`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L4Values {
    #[serde(default, deserialize_with = "margin")]
    pub near_tie_margin: Option<f64>,
    #[serde(default, deserialize_with = "jaccard")]
    pub top10_jaccard_warn: Option<f64>,
    #[serde(default, deserialize_with = "cosine")]
    pub cosine_similarity_warn: Option<f64>,
}

/// L5's number as written (see [`L3Values`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L5Values {
    #[serde(default, deserialize_with = "token_ratio")]
    pub min_token_match_ratio: Option<f64>,
}

/// A case's `tolerance_overrides:`, the shape of one dtype's rows of `default_tolerances.yaml`.
/// Only with a YAML comment stating the measured evidence (docs/design.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceOverrides {
    #[serde(rename = "L3", default)]
    pub l3: Option<L3Values>,
    #[serde(rename = "L4", default)]
    pub l4: Option<L4Values>,
    #[serde(rename = "L5", default)]
    pub l5: Option<L5Values>,
}

/// L3 thresholds: `|actual − ref| ≤ atol + rtol·|ref|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct L3Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

/// L4 thresholds: the near-tie margin gates AMBIGUOUS; the other two only warn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct L4Tolerance {
    pub near_tie_margin: f64,
    pub top10_jaccard_warn: f64,
    pub cosine_similarity_warn: f64,
}

/// L5 threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct L5Tolerance {
    pub min_token_match_ratio: f64,
}

/// A tolerance file: per level, per dtype rows, each complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerances {
    pub l3: BTreeMap<Dtype, L3Tolerance>,
    /// The calibrated rule per precision (float dtypes only).
    pub l3_calibrated: BTreeMap<Dtype, CalibratedRule>,
    pub l4: BTreeMap<Dtype, L4Tolerance>,
    pub l5: BTreeMap<Dtype, L5Tolerance>,
}

/// The file as written: rows of the same value types a case's overrides use.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTolerances {
    #[serde(rename = "L3", default)]
    l3: BTreeMap<Dtype, L3Values>,
    #[serde(rename = "L3_calibrated", default)]
    l3_calibrated: BTreeMap<Dtype, CalibratedValues>,
    #[serde(rename = "L4", default)]
    l4: BTreeMap<Dtype, L4Values>,
    #[serde(rename = "L5", default)]
    l5: BTreeMap<Dtype, L5Values>,
}

/// A key a tolerance file's row lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Missing {
    level: &'static str,
    dtype: Dtype,
    key: &'static str,
}

/// A row's value, which a tolerance file must give.
fn required(level: &'static str, dtype: Dtype, key: &'static str, v: Option<f64>) -> Result<f64, Missing> {
    v.ok_or(Missing { level, dtype, key })
}

impl RawTolerances {
    /// Every row complete, or the first missing key.
    fn complete(self) -> Result<Tolerances, Missing> {
        let mut t = Tolerances { l3: BTreeMap::new(), l3_calibrated: BTreeMap::new(), l4: BTreeMap::new(), l5: BTreeMap::new() };
        for (d, r) in self.l3 {
            t.l3.insert(d, L3Tolerance { atol: required("L3", d, "atol", r.atol)?, rtol: required("L3", d, "rtol", r.rtol)? });
        }
        for (d, r) in self.l3_calibrated {
            // int4 has no roundoff of its own: its row would be meaningless.
            let epsilon = epsilon(d).ok_or(Missing { level: "L3_calibrated", dtype: d, key: "a float dtype" })?;
            let k = required("L3_calibrated", d, "k", r.k)?;
            let delta_ulps = required("L3_calibrated", d, "delta_ulps", r.delta_ulps)?;
            t.l3_calibrated.insert(d, CalibratedRule { k, delta_ulps, epsilon });
        }
        for (d, r) in self.l4 {
            let row = L4Tolerance {
                near_tie_margin: required("L4", d, "near_tie_margin", r.near_tie_margin)?,
                top10_jaccard_warn: required("L4", d, "top10_jaccard_warn", r.top10_jaccard_warn)?,
                cosine_similarity_warn: required("L4", d, "cosine_similarity_warn", r.cosine_similarity_warn)?,
            };
            t.l4.insert(d, row);
        }
        for (d, r) in self.l5 {
            t.l5.insert(d, L5Tolerance { min_token_match_ratio: required("L5", d, "min_token_match_ratio", r.min_token_match_ratio)? });
        }
        Ok(t)
    }
}

impl Tolerances {
    /// The defaults (embedded `cases/default_tolerances.yaml`, mobius's numbers).
    pub fn defaults() -> Tolerances {
        // The embedded file is part of this crate and covered by `defaults_match_design`.
        #[allow(clippy::expect_used)]
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
        let raw: RawTolerances =
            serde_yaml::from_str(text).map_err(|e| ToleranceError::Parse { path: origin.to_path_buf(), message: e.to_string() })?;
        raw.complete().map_err(|m| ToleranceError::Incomplete { path: origin.to_path_buf(), level: m.level, dtype: m.dtype, key: m.key })
    }
}

/// What applies to one case.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    pub dtype: Dtype,
    /// `None` when the dtype has no L3 row and the case does not give both atol and rtol (int4).
    pub l3: Option<L3Tolerance>,
    /// The calibrated rule for the dtype; `None` without an `L3_calibrated` row (int4).
    pub l3_calibrated: Option<CalibratedRule>,
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

/// Resolves the thresholds for an export of `dtype`: the dtype's rows with `overrides` applied.
pub fn resolve(tol: &Tolerances, dtype: Dtype, overrides: &ToleranceOverrides) -> Result<Thresholds, ToleranceError> {
    let ov = overrides;
    let mut overridden = Vec::new();

    // A quantized build's L3 compares it with the reference on its own dequantized weights: the
    // arithmetic is its activations' precision's, and so are the rows.
    let row3 = tol.l3.get(&dtype.compute());
    let o3 = ov.l3.unwrap_or_default();
    let atol = pick("L3.atol", o3.atol, row3.map(|r| r.atol), &mut overridden);
    let rtol = pick("L3.rtol", o3.rtol, row3.map(|r| r.rtol), &mut overridden);
    let l3 = match (atol, rtol) {
        (Some(atol), Some(rtol)) => Some(L3Tolerance { atol, rtol }),
        _ => None,
    };

    let row4 = tol.l4.get(&dtype);
    let o4 = ov.l4.unwrap_or_default();
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

    let case_ratio = ov.l5.and_then(|o| o.min_token_match_ratio);
    let ratio = pick("L5.min_token_match_ratio", case_ratio, tol.l5.get(&dtype).map(|r| r.min_token_match_ratio), &mut overridden);
    let l5 = match ratio {
        Some(min_token_match_ratio) => L5Tolerance { min_token_match_ratio },
        None => return Err(ToleranceError::MissingRow { level: Level::L5, dtype, missing: "min_token_match_ratio" }),
    };
    let l3_calibrated = tol.l3_calibrated.get(&dtype.compute()).copied();
    Ok(Thresholds { dtype, l3, l3_calibrated, l4, l5, overridden })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the shipped defaults are exactly the numbers of mobius (docs/design.md).
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

    /// Guards the calibrated block: every float dtype has a row (k ≥ 1, δ ≥ 0, the dtype's
    /// roundoff), int4 none; k < 1, an int4 row and a missing key are rejected naming the key.
    #[test]
    fn calibrated_rows() {
        let t = Tolerances::defaults();
        for (d, u) in [(Dtype::Float32, 2f64.powi(-23)), (Dtype::Float16, 2f64.powi(-10)), (Dtype::Bfloat16, 2f64.powi(-7))] {
            let r = t.l3_calibrated.get(&d).unwrap_or_else(|| panic!("no L3_calibrated row for {d}"));
            assert!(r.k >= 1.0 && r.delta_ulps >= 0.0, "{r:?}");
            assert_eq!(r.epsilon, u);
        }
        assert!(!t.l3_calibrated.contains_key(&Dtype::Int4));
        for (bad, names) in [
            ("L3_calibrated:\n  float32: {k: 0.5, delta_ulps: 1}\n", "`k`"),
            ("L3_calibrated:\n  int4: {k: 4, delta_ulps: 1}\n", "a float dtype"),
            ("L3_calibrated:\n  float32: {k: 4}\n", "delta_ulps"),
        ] {
            let e = Tolerances::from_yaml_str(bad, Path::new("tol.yaml")).unwrap_err().to_string();
            assert!(e.contains(names), "{bad:?}: {e}");
        }
    }
}
