//! `config.json` of `gemma4_unified` / `gemma4_unified_text`, with HF field names and defaults.
//!
//! Mirrors `configuration_gemma4_unified.py` (transformers 5.14.1), including `__post_init__`:
//! default `layer_types` (5 sliding : 1 full), the last layer forced to `full_attention`, default
//! per-layer-type `rope_parameters`. Values HF derives inside the modules (per-layer head_dim,
//! KV heads, KV-sharing source, MLP width, RoPE spec) are methods here so the model files and the
//! harness (L1/L2 contracts) share one definition.
//!
//! Fields that change numbers are either used by the model or rejected by
//! [`Gemma4UnifiedTextConfig::validate`] with a named error; fields that do not change numbers at
//! inference (`initializer_range`, `attention_dropout`, `use_cache`, `max_position_embeddings` for
//! the non-dynamic RoPE types implemented here, token ids other than pad/image/video/audio) are
//! parsed and documented as unused. Unknown keys are kept in `other` (HF stores them as plain
//! attributes that no Gemma4Unified module reads) and logged.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

mod text;
pub use text::{Activation, Gemma4UnifiedTextConfig, RopeKind, RopeParameters, RopeSpec};

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
        tracing::debug!(section, key, "config key not read by Gemma4Unified (HF ignores it too)");
    }
}

/// `Gemma4UnifiedVisionConfig` (encoder-free embedder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gemma4UnifiedVisionConfig {
    pub patch_size: usize,
    pub pooling_kernel_size: usize,
    /// Width of the patch Dense projection and the position table.
    pub mm_embed_dim: usize,
    /// Rows of the factorised position table `[mm_posemb_size, 2, mm_embed_dim]`.
    pub mm_posemb_size: usize,
    /// eps of the scale-free RMSNorm before the final projection (the LayerNorms use 1e-5).
    pub rms_norm_eps: f64,
    /// Input width of `embedding_projection`; must equal `mm_embed_dim` for HF to run.
    pub output_proj_dims: usize,
    /// Unused at inference.
    pub initializer_range: f64,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Default for Gemma4UnifiedVisionConfig {
    fn default() -> Self {
        Self {
            patch_size: 16,
            pooling_kernel_size: 3,
            mm_embed_dim: 3840,
            mm_posemb_size: 1120,
            rms_norm_eps: 1e-6,
            output_proj_dims: 3840,
            initializer_range: 0.02,
            other: BTreeMap::new(),
        }
    }
}

impl Gemma4UnifiedVisionConfig {
    /// `patch_size * pooling_kernel_size`: side of a merged model patch in pixels.
    pub fn model_patch_size(&self) -> usize {
        self.patch_size * self.pooling_kernel_size
    }

    /// Raw pixel values per merged patch: `model_patch_size² · 3`.
    pub fn patch_dim(&self) -> usize {
        self.model_patch_size() * self.model_patch_size() * 3
    }

    /// Checks the fields HF's embedder needs to be shape-consistent.
    pub fn validate(&self) -> Result<()> {
        log_unknown_keys("vision_config", &self.other);
        for (field, v) in [
            ("patch_size", self.patch_size),
            ("pooling_kernel_size", self.pooling_kernel_size),
            ("mm_embed_dim", self.mm_embed_dim),
            ("mm_posemb_size", self.mm_posemb_size),
        ] {
            if v == 0 {
                return Err(Error::config(field, v, "must be positive"));
            }
        }
        if self.output_proj_dims != self.mm_embed_dim {
            return Err(Error::config(
                "output_proj_dims",
                self.output_proj_dims,
                format!(
                    "must equal mm_embed_dim = {}: the projection consumes the embedder's \
                     mm_embed_dim-wide output (HF fails at the matmul otherwise)",
                    self.mm_embed_dim
                ),
            ));
        }
        Ok(())
    }
}

fn d_true() -> bool {
    true
}
fn d_image() -> Option<i64> {
    Some(258_880)
}
fn d_video() -> Option<i64> {
    Some(258_884)
}
fn d_audio() -> Option<i64> {
    Some(258_881)
}

/// `Gemma4UnifiedConfig` (`model_type: gemma4_unified`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gemma4UnifiedConfig {
    /// Null means HF's default text config.
    #[serde(default)]
    pub text_config: Option<Gemma4UnifiedTextConfig>,
    /// Null means no vision embedder (image inputs are then an error).
    #[serde(default)]
    pub vision_config: Option<Gemma4UnifiedVisionConfig>,
    /// Kept as raw JSON and ignored: the reference takes no audio inputs. Audio placeholder
    /// tokens still become the pad embedding, exactly as in HF without `input_features`.
    #[serde(default)]
    pub audio_config: Option<Value>,
    #[serde(default = "d_image")]
    pub image_token_id: Option<i64>,
    #[serde(default = "d_video")]
    pub video_token_id: Option<i64>,
    #[serde(default = "d_audio")]
    pub audio_token_id: Option<i64>,
    /// Informational (the processor inserts them).
    #[serde(default)]
    pub boi_token_id: Option<i64>,
    #[serde(default)]
    pub eoi_token_id: Option<i64>,
    /// Tying rule of `Gemma4UnifiedForConditionalGeneration` (the top-level flag, not the text
    /// config's, decides `lm_head.weight ← embed_tokens.weight`).
    #[serde(default = "d_true")]
    pub tie_word_embeddings: bool,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A parsed `config.json` of either supported model type.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per model, never moved in bulk
pub enum ModelConfig {
    /// `gemma4_unified`: `Gemma4UnifiedForConditionalGeneration`.
    Unified(Gemma4UnifiedConfig),
    /// `gemma4_unified_text`: `Gemma4UnifiedForCausalLM` (text only).
    Text(Gemma4UnifiedTextConfig),
}

impl ModelConfig {
    /// Reads, post-inits and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Self::from_json_str(&text).map_err(|e| match e {
            Error::Json { source, .. } => Error::Json { path: path.to_path_buf(), source },
            other => other,
        })
    }

    /// Parses, post-inits and validates a config JSON string.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let json_err = |source| Error::Json { path: "config.json".into(), source };
        let value: Value = serde_json::from_str(text).map_err(json_err)?;
        let model_type = value.get("model_type").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut cfg = match model_type.as_str() {
            "gemma4_unified" => ModelConfig::Unified(serde_json::from_value(value).map_err(json_err)?),
            "gemma4_unified_text" => ModelConfig::Text(serde_json::from_value(value).map_err(json_err)?),
            _ => return Err(Error::UnsupportedModelType(model_type)),
        };
        cfg.post_init()?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn post_init(&mut self) -> Result<()> {
        match self {
            ModelConfig::Unified(c) => c.text_config.get_or_insert_with(Gemma4UnifiedTextConfig::default).post_init(),
            ModelConfig::Text(t) => t.post_init(),
        }
    }

    fn validate(&self) -> Result<()> {
        self.text().validate()?;
        if let ModelConfig::Unified(c) = self {
            log_unknown_keys("config", &c.other);
            if self.text().pad_token_id.is_none() {
                return Err(Error::config(
                    "pad_token_id",
                    "null",
                    "Gemma4UnifiedModel.forward embeds placeholders as pad_token_id                      (torch.where with None fails on every call)",
                ));
            }
            if let Some(v) = &c.vision_config {
                v.validate()?;
            }
        }
        Ok(())
    }

    /// HF `model_type` string.
    pub fn model_type(&self) -> &'static str {
        match self {
            ModelConfig::Unified(_) => "gemma4_unified",
            ModelConfig::Text(_) => "gemma4_unified_text",
        }
    }

    /// The text decoder's config (`get_text_config()`).
    pub fn text(&self) -> &Gemma4UnifiedTextConfig {
        static DEFAULT: std::sync::OnceLock<Gemma4UnifiedTextConfig> = std::sync::OnceLock::new();
        match self {
            ModelConfig::Unified(c) => c.text_config.as_ref().unwrap_or_else(|| {
                // post_init always fills text_config; this only guards a hand-built value.
                DEFAULT.get_or_init(|| {
                    let mut t = Gemma4UnifiedTextConfig::default();
                    // The default config post-inits without error.
                    let _ = t.post_init();
                    t
                })
            }),
            ModelConfig::Text(t) => t,
        }
    }

    /// The vision embedder's config, if the model has one.
    pub fn vision(&self) -> Option<&Gemma4UnifiedVisionConfig> {
        match self {
            ModelConfig::Unified(c) => c.vision_config.as_ref(),
            ModelConfig::Text(_) => None,
        }
    }

    /// Whether `lm_head.weight` falls back to the token embedding when absent.
    pub fn tie_word_embeddings(&self) -> bool {
        match self {
            ModelConfig::Unified(c) => c.tie_word_embeddings,
            ModelConfig::Text(t) => t.tie_word_embeddings,
        }
    }

    /// Placeholder ids HF replaces by `pad_token_id` before embedding (image, video, audio).
    pub fn placeholder_ids(&self) -> Vec<i64> {
        match self {
            ModelConfig::Unified(c) => [c.image_token_id, c.video_token_id, c.audio_token_id].into_iter().flatten().collect(),
            ModelConfig::Text(_) => Vec::new(),
        }
    }

    /// The image placeholder id (`image_token_id`).
    pub fn image_token_id(&self) -> Option<i64> {
        match self {
            ModelConfig::Unified(c) => c.image_token_id,
            ModelConfig::Text(_) => None,
        }
    }

    /// Weight-name prefix of the text decoder in the checkpoint.
    pub fn text_prefix(&self) -> &'static str {
        match self {
            ModelConfig::Unified(_) => "model.language_model",
            ModelConfig::Text(_) => "model",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(json: &str) -> Result<ModelConfig> {
        ModelConfig::from_json_str(json)
    }

    /// Guards HF's `__post_init__`: 5:1 pattern, last layer forced full, default RoPE.
    #[test]
    fn post_init_defaults() -> Result<()> {
        let cfg = text(r#"{"model_type":"gemma4_unified_text","num_hidden_layers":8,"head_dim":16,"global_head_dim":32}"#)?;
        let t = cfg.text();
        use LayerType::*;
        assert_eq!(t.layer_types()?, &[Sliding, Sliding, Sliding, Sliding, Sliding, Full, Sliding, Full]);
        assert_eq!(t.rope(Sliding)?.kind, RopeKind::Default);
        assert_eq!(t.rope(Full)?.kind, RopeKind::Proportional);
        assert_eq!(t.rope(Full)?.dim, 32);
        assert_eq!(t.use_bidirectional_attention, Some(BidirectionalAttention::Vision));
        Ok(())
    }

    /// Guards that an explicit null differs from an absent key (null = no block overlay).
    #[test]
    fn explicit_null_bidirectional() -> Result<()> {
        let cfg =
            text(r#"{"model_type":"gemma4_unified_text","num_hidden_layers":2,"use_bidirectional_attention":null,"global_head_dim":256}"#)?;
        assert_eq!(cfg.text().use_bidirectional_attention, None);
        Ok(())
    }

    /// Guards the named rejections of configs HF cannot run.
    #[test]
    fn rejections() {
        let all = text(r#"{"model_type":"gemma4_unified_text","use_bidirectional_attention":"all"}"#);
        assert!(matches!(all, Err(Error::BidirectionalAll)));
        // Two layers, both shared: no source layer.
        let no_src = text(r#"{"model_type":"gemma4_unified_text","num_hidden_layers":2,"num_kv_shared_layers":2,"global_head_dim":256}"#);
        assert!(matches!(no_src, Err(Error::KvSharedLayerWithoutSource { layer: 0, .. })));
        // Shared full layer 3 with only sliding layers before the shared block.
        let no_full_src = text(
            r#"{"model_type":"gemma4_unified_text","num_hidden_layers":4,"num_kv_shared_layers":2,"global_head_dim":256,
            "layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"]}"#,
        );
        assert!(matches!(no_full_src, Err(Error::KvSharedLayerWithoutSource { layer: 3, .. })));
        let keqv = text(r#"{"model_type":"gemma4_unified_text","num_hidden_layers":2,"attention_k_eq_v":true,"global_head_dim":256}"#);
        assert!(matches!(keqv, Err(Error::UnsupportedConfig { field: "num_global_key_value_heads", .. })));
        let yarn = text(
            r#"{"model_type":"gemma4_unified_text","num_hidden_layers":1,"global_head_dim":256,
            "rope_parameters":{"full_attention":{"rope_type":"yarn","rope_theta":1e6}}}"#,
        );
        assert!(matches!(yarn, Err(Error::UnsupportedConfig { field: "rope_parameters", .. })));
        let act = text(r#"{"model_type":"gemma4_unified_text","hidden_activation":"gelu_new"}"#);
        assert!(matches!(act, Err(Error::UnsupportedConfig { field: "hidden_activation", .. })));
        // Default RoPE on full layers runs over head_dim, which mismatches global_head_dim.
        let rope_dim = text(
            r#"{"model_type":"gemma4_unified_text","num_hidden_layers":1,"head_dim":16,"global_head_dim":32,
            "rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":1e6}}}"#,
        );
        assert!(matches!(rope_dim, Err(Error::UnsupportedConfig { field: "rope_parameters", .. })));
        let unknown = text(r#"{"model_type":"gemma4"}"#);
        assert!(matches!(unknown, Err(Error::UnsupportedModelType(_))));
    }

    /// Guards the KV-sharing source rule and the MLP's `> 0` test.
    #[test]
    fn kv_sharing_sources() -> Result<()> {
        let cfg = text(
            r#"{"model_type":"gemma4_unified_text","num_hidden_layers":6,"num_kv_shared_layers":3,
            "use_double_wide_mlp":true,"intermediate_size":10,"global_head_dim":256,
            "layer_types":["sliding_attention","full_attention","sliding_attention","sliding_attention","full_attention","full_attention"]}"#,
        )?;
        let t = cfg.text();
        assert_eq!(t.kv_source_layer(2)?, None);
        assert_eq!(t.kv_source_layer(3)?, Some(2));
        assert_eq!(t.kv_source_layer(4)?, Some(1));
        assert_eq!(t.kv_source_layer(5)?, Some(1));
        assert_eq!(t.intermediate_size_for(2), 10);
        assert_eq!(t.intermediate_size_for(3), 20);
        Ok(())
    }
}
