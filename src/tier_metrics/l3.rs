//! What L3 (the export's function against the reference's) records: the prefill logits under
//! both rules, the decode steps, the components, the sub-models in isolation, the decoder layers
//! and the blame; for a quantized build, its quantization, the weights' and activation scales'
//! checks and the quantization's cost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::json::{metrics, strict};
use crate::names::named_enum;

named_enum! {
    /// Which rule decided L3.
    pub enum L3Rule("L3 rule") {
        Calibrated = "calibrated",
        Fixed = "fixed",
    }
}

named_enum! {
    /// One rule's verdict on one tensor (or on the gate as a whole).
    pub enum RuleVerdict("rule verdict") {
        Pass = "pass",
        Fail = "fail",
    }
}

impl RuleVerdict {
    pub fn of(pass: bool) -> Self {
        if pass {
            RuleVerdict::Pass
        } else {
            RuleVerdict::Fail
        }
    }
}

/// [`L3Metrics::divergent_module`]'s value when the blamed layer's modules cannot be told apart.
pub const MODULE_NOT_IDENTIFIABLE: &str = "not identifiable";

strict!(L3Rule, RuleVerdict, BTreeMap<String, CalibrationRow>);

metrics! {
    /// L3's findings on the export's arithmetic.
    pub struct L3Metrics {
        /// The first stage that differs ([`crate::outputs::Stage`]'s text; `weights` or
        /// `activation scales` for a quantized build whose check failed).
        pub first_divergence: String,
        pub atol: f64,
        pub rtol: f64,
        /// Cached decode steps compared (the prefill's last position not counted).
        pub decode_steps: usize,
        pub decode_max_abs_diff: f64,
        /// The worst cached decode step's calibrated ratio.
        pub decode_calibrated_ratio: f64,
        pub bidirectional_scope: String,
        pub l3_rule: L3Rule,
        /// mobius's fixed row on the gate (prefill logits and every decode step), whichever
        /// rule decided.
        pub fixed_row_status: RuleVerdict,
        /// The prefill logits' worst-row ratio `e_cand / (e_floor + δ·scale/k)`: the rule passes
        /// iff ≤ k.
        pub calibrated_ratio: f64,
        pub calibrated_k: f64,
        /// The prefill logits against the f64 arbiter: the candidate's error and the reference's
        /// own (at the candidate's precision), rms and max over the tensor.
        pub e_cand_rms: f64,
        pub e_cand_max: f64,
        pub e_floor_rms: f64,
        pub e_floor_max: f64,
        /// Per compared tensor (`logits`, `decode`, components): both errors, the ratio, and
        /// both rules' verdicts.
        pub calibration: BTreeMap<String, CalibrationRow>,
        /// Per prompt position: the largest logit difference over the vocabulary (the plot).
        pub logits_position_max_abs_diff: Vec<f64>,
        /// `[first, last]` prompt positions of each image block (the plot shades them).
        pub image_blocks: Vec<[usize; 2]>,
        pub layers_localised: bool,
        /// Per decoder layer, in layer order (propagated).
        pub layer_max_abs_diff: Vec<f64>,
        /// Per layer (propagated): the calibrated ratio, and `max|cand − f64|` beside
        /// `max|ref_p − f64|`.
        pub layer_calibrated_ratio: Vec<f64>,
        pub layer_e_cand: Vec<f64>,
        pub layer_e_floor: Vec<f64>,
        /// Per layer fed the reference's (arbiter's) stream entering it: what blames a layer.
        pub layer_local_max_abs_diff: Vec<f64>,
        pub layer_local_calibrated_ratio: Vec<f64>,
        pub layer_local_e_cand: Vec<f64>,
        pub layer_local_e_floor: Vec<f64>,
        pub first_divergent_layer: usize,
        /// The part of the blamed layer where it starts (`layer 3 mlp`), or
        /// [`MODULE_NOT_IDENTIFIABLE`].
        pub divergent_module: String,
        /// Each sub-model on the reference's own inputs for it.
        pub vision_encoder_isolated_max_abs_diff: f64,
        pub embedding_isolated_max_abs_diff: f64,
        pub decoder_isolated_max_abs_diff: f64,
        /// Whether the decoder alone agrees with the reference on the reference's inputs.
        pub decoder_isolated_pass: bool,
        pub decoder_isolated_calibrated_ratio: f64,
        /// A GPU run: the largest maximum relative error of the TF32 probe's back ends.
        pub tf32_probe_max_rel_err: f64,
    }
}

/// One tensor's row of [`L3Metrics::calibration`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRow {
    #[serde(deserialize_with = "super::json::float")]
    pub max_abs_diff: f64,
    pub fixed_row_status: RuleVerdict,
    /// Under the calibrated rule.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<CalibratedRow>,
}

/// The calibrated rule's part of a [`CalibrationRow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibratedRow {
    #[serde(deserialize_with = "super::json::float")]
    pub e_cand_rms: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub e_cand_max: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub e_floor_rms: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub e_floor_max: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub ratio: f64,
    pub calibrated_status: RuleVerdict,
}

strict!(Vec<AdoptedStep>, BTreeMap<String, WeightErrorRow>, BTreeMap<String, ScaleMismatch>);

metrics! {
    /// L3 of a quantized build (`tiers::l3::quantization`).
    pub struct QuantizationMetrics {
        /// The build's quantization as its graphs say.
        pub quantization: String,
        /// How the EP's quantized kernel was modelled.
        pub quantization_kernel_model: String,
        /// Near-ties where the floors took the candidate's int8 activation step: how many, and
        /// the first few.
        pub int8_steps_adopted: usize,
        pub int8_steps_adopted_first: Vec<AdoptedStep>,
        /// Per quantized weight (by checkpoint key): its error against the checkpoint.
        pub quantization_weight_error: BTreeMap<String, WeightErrorRow>,
        pub quantization_weight_error_ratio_max: f64,
        /// Activations quantized with one scale and dequantized with another, by `key (which)`.
        pub quantization_activation_scale_mismatch: BTreeMap<String, ScaleMismatch>,
        /// The export against the float reference: mean and 99th percentile of the per-position
        /// KL divergence (nats), the share of positions whose top-1 agrees, and the per-position KL.
        pub quantization_kl_mean: f64,
        pub quantization_kl_p99: f64,
        pub quantization_top1_agreement: f64,
        pub quantization_kl: Vec<f64>,
    }
}

/// One near-tie where a floor took the candidate's int8 step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdoptedStep {
    /// `local`, `prefill` or `isolated decoder`.
    pub run: String,
    /// `floor` or `f64`.
    #[serde(rename = "in")]
    pub which: String,
    pub key: String,
    pub row: usize,
    pub col: usize,
    /// The scaled activation as the reference and the candidate computed it.
    #[serde(deserialize_with = "super::json::float")]
    pub own: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub candidate: f64,
}

/// One quantized weight's error against the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightErrorRow {
    pub node: String,
    pub bits: u32,
    #[serde(deserialize_with = "super::json::float")]
    pub relative_error: f64,
    /// Its error over the median of its population's (`null` in JSON when infinite).
    #[serde(deserialize_with = "super::json::float")]
    pub ratio_to_median: f64,
    /// A weight whose steps are read: its error over what rounding to nearest on its grid gives.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "super::json::lenient")]
    pub rounding_error: Option<f64>,
}

/// An activation the build quantizes with one scale and dequantizes with another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleMismatch {
    pub dequantized_by: String,
    #[serde(deserialize_with = "super::json::float")]
    pub scale: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub quantized_with: f64,
    #[serde(deserialize_with = "super::json::float")]
    pub ratio: f64,
}
