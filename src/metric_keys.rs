//! The names of the metrics a tier outcome carries. The tiers write them, expected-failure
//! signatures (case YAML) and reports read them: one spelling each, here.

use std::collections::BTreeMap;

/// A tier's named numbers (and a few strings, such as [`FIRST_DIVERGENCE`]).
pub type Metrics = BTreeMap<String, serde_json::Value>;

// Shared by L3, L4 and L5 (and the reports' key columns).
/// Largest `|actual − expected|` of the prefill logits (L3).
pub const MAX_ABS_DIFF: &str = "max_abs_diff";
/// A GPU run's L3: the largest maximum relative error of the TF32 probe's back ends.
pub const TF32_PROBE_MAX_REL_ERR: &str = "tf32_probe_max_rel_err";
pub const MEAN_ABS_DIFF: &str = "mean_abs_diff";
pub const COSINE: &str = "cosine";
/// Whether the last position's argmax agrees.
pub const ARGMAX_MATCH: &str = "argmax_match";
pub const TOP10_JACCARD: &str = "top10_jaccard";
pub const TOKEN_MATCH_RATIO: &str = "token_match_ratio";
/// How many contract violations (L1).
pub const VIOLATIONS: &str = "violations";
/// A golden's `input_ids` differed from the case's and were replayed (L4, L5).
pub const INPUT_IDS_REPLAYED: &str = "input_ids_replayed";

// L3.
/// The first stage that differs ([`crate::outputs::Stage`]'s text).
pub const FIRST_DIVERGENCE: &str = "first_divergence";
pub const ATOL: &str = "atol";
pub const RTOL: &str = "rtol";
pub const DECODE_MAX_ABS_DIFF: &str = "decode_max_abs_diff";
pub const DECODE_STEPS: &str = "decode_steps";
pub const BIDIRECTIONAL_SCOPE: &str = "bidirectional_scope";
pub const LAYERS_LOCALISED: &str = "layers_localised";
/// Per decoder layer, in layer order.
pub const LAYER_MAX_ABS_DIFF: &str = "layer_max_abs_diff";
pub const FIRST_DIVERGENT_LAYER: &str = "first_divergent_layer";
/// Per layer: the layer fed the reference's residual stream entering it.
pub const LAYER_LOCAL_MAX_ABS_DIFF: &str = "layer_local_max_abs_diff";
/// The part of the blamed layer where it starts ("layer 3 mlp"), or why it is not identifiable.
pub const DIVERGENT_MODULE: &str = "divergent_module";
/// [`DIVERGENT_MODULE`]'s value when the blamed layer's modules cannot be told apart.
pub const MODULE_NOT_IDENTIFIABLE: &str = "not identifiable";
/// Each sub-model on the reference's own inputs for it.
pub const VISION_ENCODER_ISOLATED_MAX_ABS_DIFF: &str = "vision_encoder_isolated_max_abs_diff";
pub const EMBEDDING_ISOLATED_MAX_ABS_DIFF: &str = "embedding_isolated_max_abs_diff";
pub const DECODER_ISOLATED_MAX_ABS_DIFF: &str = "decoder_isolated_max_abs_diff";
/// Whether the decoder alone agrees with the reference on the reference's inputs.
pub const DECODER_ISOLATED_PASS: &str = "decoder_isolated_pass";
// L3 of a quantized build (`tiers::l3::quantization`).
/// The build's quantization as its graphs say (the protocol line's part).
pub const QUANTIZATION: &str = "quantization";
/// How the EP's quantized kernel was modelled (`accuracy_level 4 modelled as MLAS's int8
/// activation blocks (CPUExecutionProvider)`).
pub const QUANTIZATION_KERNEL_MODEL: &str = "quantization_kernel_model";
/// Near-ties where the local floors took the candidate's int8 activation step (how many, and the
/// first few with key, position, channel and both scaled values).
pub const INT8_STEPS_ADOPTED: &str = "int8_steps_adopted";
pub const QUANTIZATION_ACTIVATION_SCALE_MISMATCH: &str = "quantization_activation_scale_mismatch";
pub const QUANTIZED_ACTIVATIONS: &str = "quantized_activations";
pub const INT8_STEPS_ADOPTED_FIRST: &str = "int8_steps_adopted_first";
/// Per quantized weight: node, bits, `relative_error` against the checkpoint, `ratio_to_median`.
pub const QUANTIZATION_WEIGHT_ERROR: &str = "quantization_weight_error";
pub const QUANTIZATION_WEIGHT_ERROR_RATIO_MAX: &str = "quantization_weight_error_ratio_max";
/// The export against the float reference: mean and 99th percentile of the per-position KL
/// divergence (nats), the share of positions whose top-1 agrees, and the per-position KL.
pub const QUANTIZATION_KL_MEAN: &str = "quantization_kl_mean";
pub const QUANTIZATION_KL_P99: &str = "quantization_kl_p99";
pub const QUANTIZATION_TOP1_AGREEMENT: &str = "quantization_top1_agreement";
pub const QUANTIZATION_KL: &str = "quantization_kl";
/// Per prompt position: the largest logit difference over the vocabulary (L3, the report's plot).
pub const LOGITS_POSITION_MAX_ABS_DIFF: &str = "logits_position_max_abs_diff";
/// `[[first, last], …]` prompt positions of each image block (the plot shades them).
pub const IMAGE_BLOCKS: &str = "image_blocks";
/// L4: the top-10 ids of the export, the golden and the live reference (the report's table).
pub const TOP10: &str = "top10";
pub const GOLDEN_TOP10: &str = "golden_top10";
pub const REFERENCE_TOP10: &str = "reference_top10";
/// L5: the export's, the golden's and the live reference's greedy tokens.
pub const TOKENS: &str = "tokens";
pub const GOLDEN_TOKENS: &str = "golden_tokens";
pub const REFERENCE_TOKENS: &str = "reference_tokens";
/// L5, where the case has a tokenizer: the export's and the golden's tokens decoded.
pub const TEXT: &str = "text";
pub const GOLDEN_TEXT: &str = "golden_text";
/// An xfail's signature, as the case states it (beside the measured values in reports).
pub const XFAIL_SIGNATURE: &str = "xfail_signature";
/// L1: the export's producer (`producer_name producer_version` of its graphs) and the
/// `transformers_version` of the checkpoint's config.
pub const EXPORTER: &str = "exporter";
pub const TRANSFORMERS_VERSION: &str = "transformers_version";

// L3's calibrated rule (src/tiers/l3/calibrated.rs).
/// Which rule decided L3: `calibrated` or `fixed`.
pub const L3_RULE: &str = "l3_rule";
/// mobius's fixed row on the gate (prefill logits and every decode step): `pass` or `fail`,
/// whichever rule decided.
pub const FIXED_ROW_STATUS: &str = "fixed_row_status";
/// The prefill logits' worst-row ratio `e_cand / (e_floor + δ·scale/k)`: the rule passes iff ≤ k.
pub const CALIBRATED_RATIO: &str = "calibrated_ratio";
pub const CALIBRATED_K: &str = "calibrated_k";
/// The prefill logits against the f64 arbiter: the candidate's error and the reference's own
/// (at the candidate's precision), rms and max over the tensor.
pub const E_CAND_RMS: &str = "e_cand_rms";
pub const E_CAND_MAX: &str = "e_cand_max";
pub const E_FLOOR_RMS: &str = "e_floor_rms";
pub const E_FLOOR_MAX: &str = "e_floor_max";
/// The worst cached decode step's calibrated ratio.
pub const DECODE_CALIBRATED_RATIO: &str = "decode_calibrated_ratio";
/// Per compared tensor (`logits`, `decode`, components, `<sub-model>_isolated`): both errors,
/// the ratio, and both rules' verdicts.
pub const CALIBRATION: &str = "calibration";
/// Per layer (propagated): the calibrated ratio, and `max|cand − f64|` beside `max|ref_p − f64|`.
pub const LAYER_CALIBRATED_RATIO: &str = "layer_calibrated_ratio";
pub const LAYER_E_CAND: &str = "layer_e_cand";
pub const LAYER_E_FLOOR: &str = "layer_e_floor";
/// Per layer fed the arbiter's stream: the same three (what blames a layer).
pub const LAYER_LOCAL_CALIBRATED_RATIO: &str = "layer_local_calibrated_ratio";
pub const LAYER_LOCAL_E_CAND: &str = "layer_local_e_cand";
pub const LAYER_LOCAL_E_FLOOR: &str = "layer_local_e_floor";
/// The decoder alone on the oracle's inputs: its worst calibrated ratio.
pub const DECODER_ISOLATED_CALIBRATED_RATIO: &str = "decoder_isolated_calibrated_ratio";

/// `<component>_calibrated_ratio` (`image_features_calibrated_ratio`, …).
pub fn stage_calibrated_ratio(stage: &str) -> String {
    format!("{stage}_calibrated_ratio")
}

/// `<component>_max_abs_diff` (L3: `image_features_max_abs_diff`, …; also `logits_max_abs_diff`).
pub fn stage_max_abs_diff(stage: &str) -> String {
    format!("{stage}_max_abs_diff")
}

// L4.
pub const TOP1: &str = "top1";
pub const GOLDEN_TOP1: &str = "golden_top1";
pub const TOP1_GAP: &str = "top1_gap";
pub const REFERENCE_TOP1: &str = "reference_top1";
pub const REFERENCE_TOP10_JACCARD: &str = "reference_top10_jaccard";

// L5.
pub const POSITIONAL_RATIO: &str = "positional_ratio";
pub const GENERATED: &str = "generated";
pub const REFERENCE_TOKEN_MATCH_RATIO: &str = "reference_token_match_ratio";

// L1.
pub const KV_PAIRS: &str = "kv_pairs";
/// The export's protocol (`portable`, `gqa`, `static`).
/// L1: the element type of the export's activations (`float32`, `float16`, `bfloat16`).
pub const ACTIVATIONS: &str = "activations";
pub const EXPORT_VARIANT: &str = "export_variant";
/// Where a candidate's numbers come from when its EP left compute nodes to the CPU EP
/// (`partitioned: 6 compute nodes on the CPU instead of CUDAExecutionProvider (…)`).
pub const PARTITIONED: &str = "partitioned";
pub const INITIALIZERS: &str = "initializers";
pub const OP_INVENTORY: &str = "op_inventory";

// L2.
pub const REFERENCE_PARAMETERS: &str = "reference_parameters";
pub const REFERENCE_TENSORS: &str = "reference_tensors";
pub const AUDIO_PARAMETERS: &str = "audio_parameters";
pub const AUDIO_TENSORS: &str = "audio_tensors";
pub const CHECKPOINT_PARAMETERS: &str = "checkpoint_parameters";
pub const CHECKED: &str = "checked";
pub const EXPORT_VIOLATIONS: &str = "export_violations";
/// L2: weights over the pinned EP's buffer limit at full size.
pub const EP_OVERSIZE_TENSORS: &str = "ep_oversize_tensors";
pub const REFERENCE_RESIDENT_BYTES: &str = "reference_resident_bytes";
pub const REFERENCE_MEMORY_F32_CHECKPOINT_BYTES: &str = "reference_memory_f32_checkpoint_bytes";
pub const REFERENCE_MEMORY_BF16_CHECKPOINT_BYTES: &str = "reference_memory_bf16_checkpoint_bytes";
