//! The two image paths' configs: the unified family's encoder-free embedder
//! (`Gemma4UnifiedVisionConfig`) and the gemma4 family's ViT tower (`Gemma4VisionConfig`,
//! `configuration_gemma4.py`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kinds::{log_unknown_keys, require_positive};
use super::text::{Activation, RopeParameters};
use crate::error::{Error, Result};

/// `Gemma4UnifiedVisionConfig` (encoder-free embedder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnifiedVisionConfig {
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

impl Default for UnifiedVisionConfig {
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

impl UnifiedVisionConfig {
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
        require_positive(&[
            ("patch_size", self.patch_size),
            ("pooling_kernel_size", self.pooling_kernel_size),
            ("mm_embed_dim", self.mm_embed_dim),
            ("mm_posemb_size", self.mm_posemb_size),
        ])?;
        // patch_dim() = (patch_size · pooling_kernel_size)² · 3 must not overflow.
        let side = self.patch_size.checked_mul(self.pooling_kernel_size);
        if side.and_then(|s| s.checked_mul(s)).and_then(|s| s.checked_mul(3)).is_none() {
            return Err(Error::config(
                "vision_config.patch_size",
                self.patch_size,
                format!(
                    "(patch_size · pooling_kernel_size)² · 3 pixel values per merged patch overflow (pooling_kernel_size = {})",
                    self.pooling_kernel_size
                ),
            ));
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

/// `Gemma4VisionConfig` (`gemma4_vision`): the ViT tower of the gemma4 family.
///
/// Not read by HF at inference (documented, parsed): `max_position_embeddings`,
/// `attention_dropout`, `initializer_range`, and `attention_bias` — every tower linear is a
/// bias-free `Gemma4ClippableLinear` whatever it says (HF bug 5 of the family spec). Real configs
/// also carry `default_output_length` and `global_head_dim`, which no gemma4 vision module reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VisionTowerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Must be a multiple of 4: each spatial axis rotates `head_dim / 2` channels.
    pub head_dim: usize,
    pub hidden_activation: String,
    /// eps of every tower RMSNorm and of `embed_vision`'s pre-projection norm.
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub attention_bias: bool,
    pub attention_dropout: f64,
    /// 2-D RoPE; null means `{default, θ = 100}`.
    pub rope_parameters: Option<RopeParameters>,
    /// Side k of the k×k average pooling of patches into soft tokens.
    pub pooling_kernel_size: usize,
    /// Side of one patch in pixels; patches carry `3·patch_size²` values.
    pub patch_size: usize,
    /// Rows of each axis' position table `position_embedding_table [2, size, hidden]`.
    pub position_embedding_size: usize,
    /// Every linear clamps its input and output with stored bounds.
    pub use_clipped_linears: bool,
    /// Pooled features become `(h − std_bias) · std_scale` (stored buffers).
    pub standardize: bool,
    pub initializer_range: f64,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Default for VisionTowerConfig {
    /// The dataclass defaults of `Gemma4VisionConfig`.
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 16,
            num_attention_heads: 12,
            num_key_value_heads: 12,
            head_dim: 64,
            hidden_activation: "gelu_pytorch_tanh".to_string(),
            rms_norm_eps: 1e-6,
            max_position_embeddings: 131_072,
            attention_bias: false,
            attention_dropout: 0.0,
            rope_parameters: None,
            pooling_kernel_size: 3,
            patch_size: 16,
            position_embedding_size: 10 * 1024,
            use_clipped_linears: false,
            standardize: false,
            initializer_range: 0.02,
            other: BTreeMap::new(),
        }
    }
}

/// Keys real gemma4 vision configs carry that no gemma4 vision module reads.
const TOWER_INERT_KEYS: &[&str] = &["default_output_length", "global_head_dim", "model_type"];

impl VisionTowerConfig {
    /// Raw pixel values per patch: `3 · patch_size²`.
    pub fn patch_dim(&self) -> usize {
        3 * self.patch_size * self.patch_size
    }

    /// The RoPE base (`rope_parameters.rope_theta`, 100 by default).
    pub fn rope_theta(&self) -> Result<f64> {
        match &self.rope_parameters {
            None => Ok(100.0),
            Some(p) => {
                p.rope_theta.ok_or_else(|| Error::config("vision_config.rope_parameters", "rope_theta: null", "rope_theta is required"))
            }
        }
    }

    /// Parsed `hidden_activation`.
    pub fn activation(&self) -> Result<Activation> {
        Activation::parse(&self.hidden_activation)
    }

    /// Checks what HF's tower needs to run the function this reference implements.
    pub fn validate(&self) -> Result<()> {
        let unread: BTreeMap<String, Value> =
            self.other.iter().filter(|(k, _)| !TOWER_INERT_KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        log_unknown_keys("vision_config", &unread);
        require_positive(&[
            ("vision_config.hidden_size", self.hidden_size),
            ("vision_config.intermediate_size", self.intermediate_size),
            ("vision_config.num_attention_heads", self.num_attention_heads),
            ("vision_config.num_key_value_heads", self.num_key_value_heads),
            ("vision_config.patch_size", self.patch_size),
            ("vision_config.position_embedding_size", self.position_embedding_size),
        ])?;
        // patch_dim() = 3 · patch_size² must not overflow.
        if self.patch_size.checked_mul(self.patch_size).and_then(|p| p.checked_mul(3)).is_none() {
            return Err(Error::config("vision_config.patch_size", self.patch_size, "a patch of 3 · patch_size² pixel values overflows"));
        }
        self.activation()?;
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(Error::config(
                "vision_config.num_key_value_heads",
                self.num_key_value_heads,
                format!("must divide num_attention_heads = {}", self.num_attention_heads),
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(4) {
            return Err(Error::config(
                "vision_config.head_dim",
                self.head_dim,
                "must be a positive multiple of 4: 2-D RoPE rotates head_dim/2 channels per axis in pairs \
                 (HF fails in split_with_sizes otherwise)",
            ));
        }
        if self.pooling_kernel_size < 2 {
            return Err(Error::config(
                "vision_config.pooling_kernel_size",
                self.pooling_kernel_size,
                "must be ≥ 2: with 1 HF's pooler returns the padding mask as the valid mask and keeps only \
                 the padding rows (modeling_gemma4.py Gemma4VisionPooler.forward), a function no export should match",
            ));
        }
        if let Some(p) = &self.rope_parameters {
            if p.rope_type != "default" {
                return Err(Error::config(
                    "vision_config.rope_parameters",
                    &p.rope_type,
                    "only default 2-D RoPE is implemented (HF would apply 1-D semantics from ROPE_INIT_FUNCTIONS)",
                ));
            }
        }
        let theta = self.rope_theta()?;
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::config("vision_config.rope_parameters", theta, "rope_theta must be positive"));
        }
        if let Some(v) = self.other.get("output_proj_dims") {
            // `Gemma4MultimodalEmbedder` reads it with getattr; another width cannot run.
            if v.as_u64() != Some(self.hidden_size as u64) {
                return Err(Error::config(
                    "vision_config.output_proj_dims",
                    v,
                    format!("embed_vision projects the tower's hidden_size = {} features", self.hidden_size),
                ));
            }
        }
        Ok(())
    }
}

/// The image path a checkpoint has.
#[derive(Debug, Clone, PartialEq)]
pub enum VisionConfig {
    /// `gemma4_unified`: encoder-free embedder of merged patches.
    Unified(UnifiedVisionConfig),
    /// `gemma4`: ViT tower over unmerged patches, pooled, then `embed_vision`.
    Tower(VisionTowerConfig),
}

impl VisionConfig {
    /// Raw pixel values per `pixel_values` row.
    pub fn patch_dim(&self) -> usize {
        match self {
            VisionConfig::Unified(v) => v.patch_dim(),
            VisionConfig::Tower(v) => v.patch_dim(),
        }
    }

    /// `(patch_size, pooling_kernel_size)`, which the image processor must agree with.
    pub fn patch_and_kernel(&self) -> (usize, usize) {
        match self {
            VisionConfig::Unified(v) => (v.patch_size, v.pooling_kernel_size),
            VisionConfig::Tower(v) => (v.patch_size, v.pooling_kernel_size),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            VisionConfig::Unified(v) => v.validate(),
            VisionConfig::Tower(v) => v.validate(),
        }
    }
}
