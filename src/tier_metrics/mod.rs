//! A trial's measurements as typed fields: what each tier records ([`L1Metrics`] … [`L5Metrics`],
//! [`QuantizationMetrics`]), the numbers several tiers share ([`Compared`]) and what the trial adds
//! ([`Trial`]). The tiers write fields and the readers (HTML, Markdown, repro, report merging)
//! read fields; the JSON of reports and trial records is their rendering: one flat object whose
//! keys are the fields' names (what reports carried when the metrics were a string map, so files
//! move between versions unchanged), plus the per-stage keys (`<stage>_max_abs_diff`,
//! `<component>_calibrated_ratio`) and, for a trial that judged several implementations at once,
//! each one's keys under `<label>/`. An `xfail` signature names keys of that rendering
//! ([`Metrics::value`]).

pub mod json;
mod l1;
mod l3;
mod tokens;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use l1::{L1Metrics, L2Metrics};
pub use l3::{
    AdoptedStep, CalibratedRow, CalibrationRow, L3Metrics, L3Rule, QuantizationMetrics, RuleVerdict, ScaleMismatch, WeightErrorRow,
    MODULE_NOT_IDENTIFIABLE,
};
pub use tokens::{L4Metrics, L5Metrics};

json::metrics! {
    /// Numbers more than one tier reports under one name (the reports' key columns).
    pub struct Compared {
        /// Largest `|actual − expected|` of the prefill logits (L3).
        pub max_abs_diff: f64,
        pub mean_abs_diff: f64,
        /// L3: of the prefill logits; L4: of the last position's against the live reference's.
        pub cosine: f64,
        /// Whether the last position's argmax agrees (L3, L4).
        pub argmax_match: bool,
        pub top10_jaccard: f64,
        pub token_match_ratio: f64,
    }
}

json::metrics! {
    /// What the trial adds to its tier's findings.
    pub struct Trial {
        /// An xfail's signature, as the case states it (beside the measured values).
        pub xfail_signature: String,
        /// Where a candidate's numbers come from when its EP left compute nodes to the CPU EP.
        pub partitioned: String,
        /// A golden's `input_ids` differed from the case's and were replayed (L4, L5).
        pub input_ids_replayed: bool,
    }
}

/// A trial's measurements (see the module doc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub compared: Compared,
    pub trial: Trial,
    pub l1: L1Metrics,
    pub l2: L2Metrics,
    pub l3: L3Metrics,
    pub quantized: QuantizationMetrics,
    pub l4: L4Metrics,
    pub l5: L5Metrics,
    /// L3: each judged stage's largest difference, by the stage's text (`logits`,
    /// `image_features`, …): `<stage>_max_abs_diff` in JSON.
    pub stage_max_abs_diff: BTreeMap<String, f64>,
    /// L3 under the calibrated rule: each component's ratio: `<component>_calibrated_ratio`.
    pub component_calibrated_ratio: BTreeMap<String, f64>,
    /// Several implementations judged in one trial: each one's metrics by its label
    /// (`<label>/<key>` in JSON).
    pub candidates: Vec<(String, Metrics)>,
    /// Keys this version does not know (a record written by another version), kept as they
    /// were so that merging records loses nothing.
    pub other: BTreeMap<String, Value>,
}

const STAGE_MAX_ABS_DIFF: &str = "_max_abs_diff";
const COMPONENT_CALIBRATED_RATIO: &str = "_calibrated_ratio";

/// The typed parts, flattened into one object (serde's names are the keys).
#[derive(Serialize)]
struct Parts<'a> {
    #[serde(flatten)]
    compared: &'a Compared,
    #[serde(flatten)]
    trial: &'a Trial,
    #[serde(flatten)]
    l1: &'a L1Metrics,
    #[serde(flatten)]
    l2: &'a L2Metrics,
    #[serde(flatten)]
    l3: &'a L3Metrics,
    #[serde(flatten)]
    quantized: &'a QuantizationMetrics,
    #[serde(flatten)]
    l4: &'a L4Metrics,
    #[serde(flatten)]
    l5: &'a L5Metrics,
}

#[derive(Deserialize)]
struct OwnedParts {
    #[serde(flatten)]
    compared: Compared,
    #[serde(flatten)]
    trial: Trial,
    #[serde(flatten)]
    l1: L1Metrics,
    #[serde(flatten)]
    l2: L2Metrics,
    #[serde(flatten)]
    l3: L3Metrics,
    #[serde(flatten)]
    quantized: QuantizationMetrics,
    #[serde(flatten)]
    l4: L4Metrics,
    #[serde(flatten)]
    l5: L5Metrics,
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

impl Metrics {
    /// The JSON object reports carry (keys sorted).
    pub fn rendered(&self) -> Map<String, Value> {
        let parts = Parts {
            compared: &self.compared,
            trial: &self.trial,
            l1: &self.l1,
            l2: &self.l2,
            l3: &self.l3,
            quantized: &self.quantized,
            l4: &self.l4,
            l5: &self.l5,
        };
        let mut out = match serde_json::to_value(parts) {
            Ok(Value::Object(m)) => m,
            // Structs of plain fields always serialise to an object.
            _ => Map::new(),
        };
        for (stage, v) in &self.stage_max_abs_diff {
            out.insert(format!("{stage}{STAGE_MAX_ABS_DIFF}"), Value::from(*v));
        }
        for (component, v) in &self.component_calibrated_ratio {
            out.insert(format!("{component}{COMPONENT_CALIBRATED_RATIO}"), Value::from(*v));
        }
        for (label, m) in &self.candidates {
            out.extend(m.rendered().into_iter().map(|(k, v)| (format!("{label}/{k}"), v)));
        }
        out.extend(self.other.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// The rendered value under `key` (an `xfail` signature's, a report column's).
    pub fn value(&self, key: &str) -> Option<Value> {
        self.rendered().remove(key)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self == &Metrics::default()
    }

    /// Reads a rendered object back (a trial record, a report).
    pub fn from_rendered(map: Map<String, Value>) -> Result<Self, serde_json::Error> {
        let mut own = Map::new();
        let mut by_label: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
        for (k, v) in map {
            match k.rsplit_once('/') {
                Some((label, key)) => {
                    by_label.entry(label.to_string()).or_default().insert(key.to_string(), v);
                }
                None => {
                    own.insert(k, v);
                }
            }
        }
        let parts: OwnedParts = serde_json::from_value(Value::Object(own))?;
        let mut out = Metrics {
            compared: parts.compared,
            trial: parts.trial,
            l1: parts.l1,
            l2: parts.l2,
            l3: parts.l3,
            quantized: parts.quantized,
            l4: parts.l4,
            l5: parts.l5,
            ..Metrics::default()
        };
        for (k, v) in parts.rest {
            let number = || <f64 as json::Lenient>::from_json(v.clone()).ok().flatten();
            if let (Some(stage), Some(x)) = (k.strip_suffix(STAGE_MAX_ABS_DIFF), number()) {
                out.stage_max_abs_diff.insert(stage.to_string(), x);
            } else if let (Some(component), Some(x)) = (k.strip_suffix(COMPONENT_CALIBRATED_RATIO), number()) {
                out.component_calibrated_ratio.insert(component.to_string(), x);
            } else {
                out.other.insert(k, v);
            }
        }
        for (label, m) in by_label {
            out.candidates.push((label, Metrics::from_rendered(m)?));
        }
        Ok(out)
    }
}

impl Serialize for Metrics {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.rendered().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Metrics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Metrics::from_rendered(Map::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
