//! The small vocabularies of a config — layer types, the bidirectional-attention setting, token
//! id lists, the two families and the four model types — and the checks every config section
//! shares (unknown keys, positive sizes). Apart from the config structs so both sections
//! (`text`, `vision`) and the composite read them without importing their parent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// Attention type of a decoder layer (`layer_types` entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LayerType {
    /// `"sliding_attention"`: local attention over the last `sliding_window` positions, default RoPE.
    #[serde(rename = "sliding_attention")]
    Sliding,
    /// `"full_attention"`: global attention, `global_head_dim`, proportional RoPE by default.
    #[serde(rename = "full_attention")]
    Full,
}

impl LayerType {
    /// The HF string (also the key in `rope_parameters` and in HF's mask mapping).
    pub fn as_str(self) -> &'static str {
        match self {
            LayerType::Sliding => "sliding_attention",
            LayerType::Full => "full_attention",
        }
    }

    /// Both layer types, in a fixed order (for per-type tables).
    pub const ALL: [LayerType; 2] = [LayerType::Sliding, LayerType::Full];
}

/// `use_bidirectional_attention` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BidirectionalAttention {
    /// Vision tokens attend bidirectionally within their block; text stays causal.
    Vision,
    /// Every token attends bidirectionally (rejected: see [`Error::BidirectionalAll`]).
    All,
}

/// `eos_token_id` may be one id or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    One(i64),
    Many(Vec<i64>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<i64> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// Keys every `PreTrainedConfig` may carry that never change the computed function.
const INERT_KEYS: &[&str] = &[
    "model_type",
    "architectures",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "_name_or_path",
    "output_hidden_states",
    "output_attentions",
    "return_dict",
    "is_encoder_decoder",
    "chunk_size_feed_forward",
    "id2label",
    "label2id",
    "problem_type",
    "tokenizer_class",
    "_attn_implementation_autoset",
];

pub(crate) fn log_unknown_keys(section: &str, other: &BTreeMap<String, Value>) {
    for key in other.keys().filter(|k| !INERT_KEYS.contains(&k.as_str())) {
        tracing::debug!(section, key, "config key no module reads (HF ignores it too)");
    }
}

/// Fails naming the first field whose value is 0 (sizes HF would build empty modules from).
pub(crate) fn require_positive(fields: &[(&'static str, usize)]) -> Result<()> {
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((field, v)) => Err(Error::config(field, v, "must be positive")),
        None => Ok(()),
    }
}

/// The two model families. Unified and gemma4 share the text decoder (the gemma4 one adds
/// per-layer embeddings and MoE) and differ in their image path and mask scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Family {
    /// `gemma4_unified` / `gemma4_unified_text` (gemma-4-12B).
    #[default]
    Unified,
    /// `gemma4` / `gemma4_text` (E2B, E4B, 26B-A4B, 31B).
    Gemma4,
}

impl Family {
    /// Fills the defaults in which `Gemma4TextConfig` differs from `Gemma4UnifiedTextConfig`
    /// (configuration_gemma4.py vs configuration_gemma4_unified.py) into a text config's JSON, for
    /// keys it does not set. The unified defaults are [`TextConfig`]'s own `Default`.
    pub(crate) fn fill_text_defaults(self, json: &mut serde_json::Map<String, Value>) {
        if self != Family::Gemma4 {
            return;
        }
        let defaults = [
            ("sliding_window", Value::from(512)),
            ("max_position_embeddings", Value::from(131_072)),
            // No image-block overlay unless the config asks for it (unified defaults to "vision").
            ("use_bidirectional_attention", Value::Null),
            // PLE is on by default in gemma4: a PLE-less checkpoint says 0.
            ("hidden_size_per_layer_input", Value::from(256)),
            ("vocab_size_per_layer_input", Value::from(262_144)),
        ];
        for (key, value) in defaults {
            json.entry(key).or_insert(value);
        }
    }
}

/// `model_type` of a supported checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelType {
    Gemma4Unified,
    Gemma4UnifiedText,
    Gemma4,
    Gemma4Text,
}

impl ModelType {
    /// Every supported type (for error messages).
    pub const ALL: [ModelType; 4] = [ModelType::Gemma4Unified, ModelType::Gemma4UnifiedText, ModelType::Gemma4, ModelType::Gemma4Text];

    /// The HF string.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelType::Gemma4Unified => "gemma4_unified",
            ModelType::Gemma4UnifiedText => "gemma4_unified_text",
            ModelType::Gemma4 => "gemma4",
            ModelType::Gemma4Text => "gemma4_text",
        }
    }

    /// Parses the HF string.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| Error::UnsupportedModelType(s.to_string()))
    }

    /// The family whose modules this type builds.
    pub fn family(self) -> Family {
        match self {
            ModelType::Gemma4Unified | ModelType::Gemma4UnifiedText => Family::Unified,
            ModelType::Gemma4 | ModelType::Gemma4Text => Family::Gemma4,
        }
    }

    /// `*ForConditionalGeneration` (text in `text_config`, optional vision/audio) rather than a
    /// text-only `*ForCausalLM`.
    pub fn is_composite(self) -> bool {
        matches!(self, ModelType::Gemma4Unified | ModelType::Gemma4)
    }
}

impl std::fmt::Display for ModelType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
