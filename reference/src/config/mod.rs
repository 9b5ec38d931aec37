//! `config.json` of the four Gemma 4 model types, with HF field names and defaults.
//!
//! | model_type | HF class | text | image path |
//! |---|---|---|---|
//! | `gemma4_unified` | `Gemma4UnifiedForConditionalGeneration` | `text_config` | encoder-free embedder |
//! | `gemma4_unified_text` | `Gemma4UnifiedForCausalLM` | the file itself | – |
//! | `gemma4` | `Gemma4ForConditionalGeneration` | `text_config` | ViT tower + `embed_vision` |
//! | `gemma4_text` | `Gemma4ForCausalLM` | the file itself | – |
//!
//! Mirrors `configuration_gemma4_unified.py` and `configuration_gemma4.py` (transformers 5.14.1),
//! including `__post_init__`: default `layer_types` (5 sliding : 1 full), the last layer forced to
//! `full_attention`, default per-layer-type `rope_parameters`. Values HF derives inside the modules
//! (per-layer head_dim, KV heads, KV-sharing source, MLP width, RoPE spec) are methods here so the
//! model files and the harness (L1/L2 contracts) share one definition.
//!
//! Fields that change numbers are either used by the model or rejected by `validate` with a
//! named error; fields that do not change numbers at inference (`initializer_range`,
//! `attention_dropout`, `use_cache`, `max_position_embeddings` for the non-dynamic RoPE types
//! implemented here, token ids other than pad/image/video/audio) are parsed and documented as
//! unused. `audio_config` is kept as raw JSON and ignored (audio is out of scope; audio inputs are
//! a named error). Unknown keys are kept in `other` (HF stores them as plain attributes that no
//! module reads) and logged.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

mod kinds;
mod text;
mod vision;
pub(crate) use kinds::log_unknown_keys;
pub use kinds::{BidirectionalAttention, Family, LayerType, ModelType, TokenIds};
pub use text::{Activation, MoeSpec, PleSpec, RopeKind, RopeParameters, RopeSpec, TextConfig};
pub use vision::{UnifiedVisionConfig, VisionConfig, VisionTowerConfig};

/// `serde_json::from_value`, naming the key path (`prefix` then the path inside `value`) of a value
/// of the wrong type, which serde_json alone leaves out (`invalid type: string "x", expected usize`).
fn from_value_named<T: serde::de::DeserializeOwned>(value: Value, prefix: &str) -> std::result::Result<T, serde_json::Error> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner_path = e.path().to_string();
        let inner = e.into_inner();
        let key = match (prefix, inner_path.as_str()) {
            ("", ".") => return inner,
            (p, ".") => p.to_string(),
            ("", q) => q.to_string(),
            (p, q) => format!("{p}.{q}"),
        };
        serde::de::Error::custom(format!("`{key}`: {inner}"))
    })
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

/// The composite configs' own fields (`Gemma4UnifiedConfig` and `Gemma4Config` have the same
/// ones with the same defaults); the sub-configs are parsed per family afterwards.
#[derive(Debug, Clone, Deserialize)]
struct RawComposite {
    #[serde(default)]
    text_config: Option<Value>,
    #[serde(default)]
    vision_config: Option<Value>,
    #[serde(default)]
    audio_config: Option<Value>,
    #[serde(default = "d_image")]
    image_token_id: Option<i64>,
    #[serde(default = "d_video")]
    video_token_id: Option<i64>,
    #[serde(default = "d_audio")]
    audio_token_id: Option<i64>,
    #[serde(default)]
    boi_token_id: Option<i64>,
    #[serde(default)]
    eoi_token_id: Option<i64>,
    #[serde(default = "d_true")]
    tie_word_embeddings: bool,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// Multimodal placeholder ids of a composite checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlaceholderTokens {
    pub image: Option<i64>,
    pub video: Option<i64>,
    pub audio: Option<i64>,
    /// Informational (the processor inserts them).
    pub boi: Option<i64>,
    pub eoi: Option<i64>,
}

/// A parsed, post-initialised and validated `config.json` of any supported model type.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    model_type: ModelType,
    text: TextConfig,
    vision: Option<VisionConfig>,
    /// Kept as raw JSON and ignored: the reference takes no audio inputs. Audio placeholder tokens
    /// still become the pad embedding, exactly as in HF without `input_features`.
    audio: Option<Value>,
    /// Empty for the text-only types (`*ForCausalLM` has no placeholder handling).
    tokens: PlaceholderTokens,
    /// For composites the top-level flag decides `lm_head.weight ← embed_tokens.weight`.
    tie_word_embeddings: bool,
}

impl ModelConfig {
    /// Reads, post-inits and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Self::from_json_str_at(&text, path)
    }

    /// [`ModelConfig::from_json_str`] of text read from `path`: every error names the file
    /// (syntax and type errors as [`Error::Json`], rejected values as [`Error::InConfig`]).
    pub fn from_json_str_at(text: &str, path: &Path) -> Result<Self> {
        Self::from_json_str(text).map_err(|e| match e {
            Error::Json { source, .. } => Error::Json { path: path.to_path_buf(), source },
            other => Error::InConfig { path: path.to_path_buf(), source: Box::new(other) },
        })
    }

    /// Parses, post-inits and validates a config JSON string.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let json_err = |source| Error::Json { path: "config.json".into(), source };
        let value: Value = serde_json::from_str(text).map_err(json_err)?;
        let model_type = ModelType::parse(value.get("model_type").and_then(Value::as_str).unwrap_or_default())?;
        let family = model_type.family();
        // Where the text fields sit, for messages.
        let text_key = if model_type.is_composite() { "text_config" } else { "" };
        let parse_text = |v: Option<Value>| -> Result<TextConfig> {
            let mut map = match v {
                Some(Value::Object(m)) => m,
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(other) => {
                    return Err(Error::config("text_config", other.to_string(), "must be an object"));
                }
            };
            family.fill_text_defaults(&mut map);
            let mut t: TextConfig = from_value_named(Value::Object(map), text_key).map_err(json_err)?;
            t.family = family;
            t.post_init()?;
            Ok(t)
        };
        let cfg = if model_type.is_composite() {
            let raw: RawComposite = from_value_named(value, "").map_err(json_err)?;
            log_unknown_keys("config", &raw.other);
            let text = parse_text(raw.text_config)?;
            let vision = match raw.vision_config {
                None | Some(Value::Null) => None,
                Some(v) => Some(match family {
                    Family::Unified => VisionConfig::Unified(from_value_named(v, "vision_config").map_err(json_err)?),
                    Family::Gemma4 => VisionConfig::Tower(from_value_named(v, "vision_config").map_err(json_err)?),
                }),
            };
            let tokens = PlaceholderTokens {
                image: raw.image_token_id,
                video: raw.video_token_id,
                audio: raw.audio_token_id,
                boi: raw.boi_token_id,
                eoi: raw.eoi_token_id,
            };
            let audio = raw.audio_config.filter(|v| !v.is_null());
            ModelConfig { model_type, text, vision, audio, tokens, tie_word_embeddings: raw.tie_word_embeddings }
        } else {
            let text = parse_text(Some(value))?;
            let tie = text.tie_word_embeddings;
            ModelConfig { model_type, text, vision: None, audio: None, tokens: PlaceholderTokens::default(), tie_word_embeddings: tie }
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        self.text.validate()?;
        if self.model_type.is_composite() && self.text.pad_token_id.is_none() {
            return Err(Error::config(
                "pad_token_id",
                "null",
                "the composite model embeds placeholders as pad_token_id (torch.where with None fails on every call)",
            ));
        }
        if let Some(v) = &self.vision {
            v.validate()?;
        }
        Ok(())
    }

    /// The checkpoint's model type.
    pub fn model_type(&self) -> ModelType {
        self.model_type
    }

    /// The model family.
    pub fn family(&self) -> Family {
        self.model_type.family()
    }

    /// The text decoder's config (`get_text_config()`).
    pub fn text(&self) -> &TextConfig {
        &self.text
    }

    /// The image path's config, if the model has one.
    pub fn vision(&self) -> Option<&VisionConfig> {
        self.vision.as_ref()
    }

    /// Whether the config carries an `audio_config` (parsed and ignored: audio is out of scope).
    pub fn has_audio(&self) -> bool {
        self.audio.is_some()
    }

    /// The raw `audio_config` (for the audio part of a full-size manifest, never run).
    pub fn audio_config(&self) -> Option<&Value> {
        self.audio.as_ref()
    }

    /// Whether `lm_head.weight` falls back to the token embedding when absent.
    pub fn tie_word_embeddings(&self) -> bool {
        self.tie_word_embeddings
    }

    /// Multimodal placeholder ids (all `None` for the text-only types).
    pub fn tokens(&self) -> PlaceholderTokens {
        self.tokens
    }

    /// Placeholder ids HF replaces by `pad_token_id` before embedding (image, video, audio).
    pub fn placeholder_ids(&self) -> Vec<i64> {
        [self.tokens.image, self.tokens.video, self.tokens.audio].into_iter().flatten().collect()
    }

    /// The image placeholder id (`image_token_id`).
    pub fn image_token_id(&self) -> Option<i64> {
        self.tokens.image
    }

    /// Weight-name prefix of the text decoder in the checkpoint.
    pub fn text_prefix(&self) -> &'static str {
        if self.model_type.is_composite() {
            "model.language_model"
        } else {
            "model"
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
        let unknown = text(r#"{"model_type":"gemma3"}"#);
        assert!(matches!(unknown, Err(Error::UnsupportedModelType(_))));
    }

    /// Guards the gemma4 family's own defaults (configuration_gemma4.py): PLE on (256), window
    /// 512, no bidirectional overlay; and that an explicit value still wins.
    #[test]
    fn gemma4_defaults_differ_from_unified() -> Result<()> {
        let g = text(r#"{"model_type":"gemma4_text","num_hidden_layers":2,"global_head_dim":256}"#)?;
        let t = g.text();
        assert_eq!(t.ple(), Some(PleSpec { dim: 256, vocab: 262_144 }));
        assert_eq!(t.sliding_window, 512);
        assert_eq!(t.use_bidirectional_attention, None);
        assert_eq!(g.family(), Family::Gemma4);
        assert_eq!(g.text_prefix(), "model");
        let u = text(r#"{"model_type":"gemma4_unified_text","num_hidden_layers":2,"global_head_dim":256}"#)?;
        assert_eq!(u.text().ple(), None);
        assert_eq!(u.text().sliding_window, 1024);
        let off = text(
            r#"{"model_type":"gemma4_text","num_hidden_layers":2,"global_head_dim":256,"hidden_size_per_layer_input":0,"sliding_window":9}"#,
        )?;
        assert_eq!(off.text().ple(), None);
        assert_eq!(off.text().sliding_window, 9);
        let composite = text(r#"{"model_type":"gemma4","text_config":{"num_hidden_layers":2,"global_head_dim":256},"vision_config":{}}"#)?;
        assert_eq!(composite.text().ple().map(|p| p.dim), Some(256));
        assert!(matches!(composite.vision(), Some(VisionConfig::Tower(v)) if v.patch_dim() == 768));
        assert_eq!(composite.text_prefix(), "model.language_model");
        assert_eq!(composite.image_token_id(), Some(258_880));
        Ok(())
    }

    /// Guards the named rejections of gemma4 configs HF cannot run (or would run wrongly).
    #[test]
    fn gemma4_rejections() {
        let field = |json: &str| match text(json) {
            Err(Error::UnsupportedConfig { field, .. }) => field,
            other => panic!("expected a config error for {json}, got {other:?}"),
        };
        let base = r#""model_type":"gemma4_text","num_hidden_layers":2,"global_head_dim":256"#;
        assert_eq!(field(&format!(r#"{{{base},"hidden_size_per_layer_input":null}}"#)), "hidden_size_per_layer_input");
        assert_eq!(field(&format!(r#"{{{base},"enable_moe_block":true,"num_experts":8,"moe_intermediate_size":4}}"#)), "top_k_experts");
        assert_eq!(
            field(&format!(r#"{{{base},"enable_moe_block":true,"num_experts":2,"top_k_experts":3,"moe_intermediate_size":4}}"#)),
            "top_k_experts"
        );
        // Unified has no PLE / MoE: a value that would matter under gemma4 is refused.
        let unified = r#""model_type":"gemma4_unified_text","num_hidden_layers":2,"global_head_dim":256"#;
        assert_eq!(field(&format!(r#"{{{unified},"hidden_size_per_layer_input":16}}"#)), "hidden_size_per_layer_input");
        assert_eq!(field(&format!(r#"{{{unified},"enable_moe_block":true}}"#)), "enable_moe_block");
        assert!(text(&format!(r#"{{{unified},"hidden_size_per_layer_input":0,"enable_moe_block":false}}"#)).is_ok());
        let tower = |v: &str| {
            format!(r#"{{"model_type":"gemma4","text_config":{{"num_hidden_layers":2,"global_head_dim":256}},"vision_config":{v}}}"#)
        };
        assert_eq!(field(&tower(r#"{"pooling_kernel_size":1}"#)), "vision_config.pooling_kernel_size");
        assert_eq!(field(&tower(r#"{"head_dim":18}"#)), "vision_config.head_dim");
        assert_eq!(field(&tower(r#"{"num_key_value_heads":5}"#)), "vision_config.num_key_value_heads");
        assert_eq!(field(&tower(r#"{"rope_parameters":{"rope_type":"yarn","rope_theta":100}}"#)), "vision_config.rope_parameters");
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
