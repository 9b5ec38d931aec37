//! What L1 (the export's contract) and L2 (the full-size checkpoint's and export's headers)
//! record.

use std::collections::BTreeMap;

use super::json::{metrics, strict};
use crate::onnx::quantized::RoundedActivation;

strict!(BTreeMap<String, usize>, BTreeMap<String, RoundedActivation>);

metrics! {
    /// L1: the export's interface against the checkpoint's config, and ORT's load of it.
    pub struct L1Metrics {
        /// How many contract violations.
        pub violations: usize,
        pub kv_pairs: usize,
        pub initializers: usize,
        /// Op type → how many nodes run it, over every sub-model.
        pub op_inventory: BTreeMap<String, usize>,
        /// The export's protocol (`portable`, `gqa`, `static`).
        pub export_variant: String,
        /// The element type of the export's activations (`float32`, `float16`, `bfloat16`).
        pub activations: String,
        /// The export's producer (`producer_name producer_version` of its graphs).
        pub exporter: String,
        /// The `transformers_version` of the checkpoint's config (`not recorded` without one).
        pub transformers_version: String,
        /// A build that quantizes activations: each quantized activation, by tensor.
        pub quantized_activations: BTreeMap<String, RoundedActivation>,
    }
}

metrics! {
    /// L2: the full-size checkpoint's headers (and a full-size export's interface) against what
    /// the reference reads.
    pub struct L2Metrics {
        pub checkpoint_parameters: u64,
        pub reference_parameters: u64,
        pub audio_parameters: u64,
        pub reference_tensors: usize,
        pub audio_tensors: usize,
        pub reference_resident_bytes: u64,
        pub reference_memory_f32_checkpoint_bytes: u64,
        pub reference_memory_bf16_checkpoint_bytes: u64,
        /// `config` or `config + checkpoint headers`.
        pub checked: String,
        /// The full-size export's contract violations (L1's count).
        pub export_violations: usize,
        /// Weights over the pinned EP's buffer limit at full size.
        pub ep_oversize_tensors: usize,
    }
}
