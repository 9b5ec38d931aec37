//! The text decoder's config, shared by both families: `Gemma4UnifiedTextConfig`
//! (`gemma4_unified_text`, the unified composite's `text_config`) and `Gemma4TextConfig`
//! (`gemma4_text`, the gemma4 composite's `text_config`). HF field names and dataclass defaults,
//! `__post_init__`, validation, and the values HF derives inside the modules (per-layer head dim,
//! KV heads, KV-sharing source, MLP width, RoPE spec) as methods.
//!
//! The two HF classes have the same fields and `__post_init__`; `Gemma4TextConfig` adds
//! per-layer embeddings (PLE) and the MoE block and changes four defaults (see
//! [`Family::text_defaults`]). One struct holds both: the family's defaults are filled into the
//! JSON before it is deserialised, and validation rejects PLE/MoE for the unified family, whose
//! HF modules would silently ignore them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kinds::{log_unknown_keys, require_positive, BidirectionalAttention, Family, LayerType, TokenIds};
use crate::error::{Error, Result};

/// Largest `num_hidden_layers` accepted (published Gemma 4 models have at most 60).
pub const MAX_LAYERS: usize = 1 << 16;

/// One entry of `rope_parameters` (keyed by layer type).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    /// `"default"` or `"proportional"` (others are rejected). BC alias `type`.
    #[serde(alias = "type", default = "default_rope_type")]
    pub rope_type: String,
    /// Base wavelength; HF has no fallback for Gemma4Unified, so it is required.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Proportional RoPE: fraction of the head's angle pairs that rotate (HF default 1.0).
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// Proportional RoPE: inverse frequencies are divided by it (HF default 1.0).
    #[serde(default)]
    pub factor: Option<f64>,
    /// Keys no implemented RoPE type reads.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

fn default_rope_type() -> String {
    "default".to_string()
}

/// RoPE kinds this reference implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeKind {
    /// `compute_default_rope_parameters`: `1 / theta^(2i/dim)` over `head_dim`.
    Default,
    /// `_compute_proportional_rope_parameters`: only `partial_rotary_factor` of the angle pairs
    /// rotate, the rest get frequency 0; exponents are over the full head dim.
    Proportional,
}

/// Fully resolved RoPE of one layer type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    pub kind: RopeKind,
    pub theta: f64,
    /// Dimension HF computes the frequencies over (see [`TextConfig::rope`]).
    pub dim: usize,
    /// Proportional only (1.0 for default).
    pub partial_rotary_factor: f64,
    /// Proportional only (1.0 for default).
    pub factor: f64,
}

/// Activations accepted for `hidden_activation` (HF `ACT2FN` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `gelu_pytorch_tanh` (Gemma's): `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    GeluPytorchTanh,
    /// `gelu`: exact erf GELU.
    Gelu,
    /// `silu` / `swish`.
    Silu,
    /// `relu`.
    Relu,
}

impl Activation {
    pub(crate) fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "gelu_pytorch_tanh" => Activation::GeluPytorchTanh,
            "gelu" => Activation::Gelu,
            "silu" | "swish" => Activation::Silu,
            "relu" => Activation::Relu,
            other => {
                return Err(Error::config("hidden_activation", other, "not implemented (gelu_pytorch_tanh, gelu, silu, swish, relu are)"))
            }
        })
    }
}

fn d_vision() -> Option<BidirectionalAttention> {
    Some(BidirectionalAttention::Vision)
}

/// The text decoder's config (`Gemma4UnifiedTextConfig` / `Gemma4TextConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TextConfig {
    /// Which HF config class this is (decides validation); not a JSON field.
    #[serde(skip)]
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// MLP width (doubled on KV-shared layers when `use_double_wide_mlp`).
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// KV heads of sliding layers, and of full layers unless `attention_k_eq_v`.
    pub num_key_value_heads: usize,
    /// Head dim of sliding layers (and of full layers when `global_head_dim` is null/0).
    pub head_dim: usize,
    pub hidden_activation: String,
    /// Unused: only dynamic RoPE types read it, and those are rejected.
    pub max_position_embeddings: usize,
    /// Unused at inference (initialisation only).
    pub initializer_range: f64,
    pub rms_norm_eps: f64,
    /// Unused (the reference always caches during greedy decoding).
    pub use_cache: bool,
    /// Embedding row that replaces image/video/audio placeholders before the features are
    /// scattered in (HF `Gemma4UnifiedModel.forward`).
    pub pad_token_id: Option<i64>,
    /// Informational: the caller passes EOS ids to `greedy` explicitly.
    pub eos_token_id: Option<TokenIds>,
    /// Informational.
    pub bos_token_id: Option<i64>,
    /// Tying rule of `gemma4_unified_text` checkpoints (the composite uses its top-level flag).
    pub tie_word_embeddings: bool,
    /// Per-layer-type RoPE; filled by `post_init` when null.
    pub rope_parameters: Option<BTreeMap<String, Option<RopeParameters>>>,
    /// q/k/v/o projections carry biases.
    pub attention_bias: bool,
    /// Unused at inference.
    pub attention_dropout: f64,
    /// Exclusive window: key j visible from query i iff `i - j < sliding_window`.
    pub sliding_window: usize,
    /// Filled by `post_init` when null; last entry forced to full attention.
    pub layer_types: Option<Vec<LayerType>>,
    /// `tanh(x / c) · c` on the logits when set.
    pub final_logit_softcapping: Option<f64>,
    #[serde(default = "d_vision")]
    pub use_bidirectional_attention: Option<BidirectionalAttention>,
    /// KV heads of full layers when `attention_k_eq_v` (HF ignores it otherwise).
    pub num_global_key_value_heads: Option<usize>,
    /// Head dim of full layers (0 falls back to `head_dim`, as HF's `and … or` does; HF's
    /// strict dataclass rejects null).
    pub global_head_dim: usize,
    /// Full layers have no `v_proj`: values are the raw `k_proj` output.
    pub attention_k_eq_v: bool,
    /// The last `num_kv_shared_layers` layers reuse K/V of the last non-shared layer of their type.
    pub num_kv_shared_layers: usize,
    /// KV-shared layers have a 2× wide MLP.
    pub use_double_wide_mlp: bool,
    /// Width P of the per-layer embeddings (gemma4 only; 0 = no PLE). HF's strict dataclass
    /// rejects null, so `None` (an explicit null) is an error.
    pub hidden_size_per_layer_input: Option<usize>,
    /// Rows of the PLE table `embed_tokens_per_layer` (gemma4 only).
    pub vocab_size_per_layer_input: usize,
    /// Every layer gets a routed-experts block beside its dense MLP (gemma4 only).
    pub enable_moe_block: bool,
    /// Experts per MoE block (required with `enable_moe_block`).
    pub num_experts: Option<usize>,
    /// Experts each token is routed to (required with `enable_moe_block`).
    pub top_k_experts: Option<usize>,
    /// Intermediate width of one expert (required with `enable_moe_block`).
    pub moe_intermediate_size: Option<usize>,
    /// Keys that are not fields of the HF config class (HF keeps them as inert attributes).
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Default for TextConfig {
    /// The dataclass defaults of `Gemma4UnifiedTextConfig` (before `__post_init__`);
    /// [`TextConfig::family_default`] gives the gemma4 ones.
    fn default() -> Self {
        Self {
            family: Family::Unified,
            vocab_size: 262_144,
            hidden_size: 2304,
            intermediate_size: 9216,
            num_hidden_layers: 30,
            num_attention_heads: 8,
            num_key_value_heads: 4,
            head_dim: 256,
            hidden_activation: "gelu_pytorch_tanh".to_string(),
            max_position_embeddings: 262_144,
            initializer_range: 0.02,
            rms_norm_eps: 1e-6,
            use_cache: true,
            pad_token_id: Some(0),
            eos_token_id: Some(TokenIds::One(1)),
            bos_token_id: Some(2),
            tie_word_embeddings: true,
            rope_parameters: None,
            attention_bias: false,
            attention_dropout: 0.0,
            sliding_window: 1024,
            layer_types: None,
            final_logit_softcapping: None,
            use_bidirectional_attention: Some(BidirectionalAttention::Vision),
            num_global_key_value_heads: None,
            global_head_dim: 512,
            attention_k_eq_v: false,
            num_kv_shared_layers: 0,
            use_double_wide_mlp: false,
            hidden_size_per_layer_input: Some(0),
            vocab_size_per_layer_input: 262_144,
            enable_moe_block: false,
            num_experts: None,
            top_k_experts: None,
            moe_intermediate_size: None,
            other: BTreeMap::new(),
        }
    }
}

/// Per-layer embedding geometry of a PLE decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PleSpec {
    /// Width P per layer (`hidden_size_per_layer_input`).
    pub dim: usize,
    /// Rows of the table (`vocab_size_per_layer_input`).
    pub vocab: usize,
}

/// Routed-experts geometry of a MoE decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    pub num_experts: usize,
    pub top_k: usize,
    pub intermediate_size: usize,
}

impl TextConfig {
    /// The dataclass defaults of `family`'s HF text config class (before `__post_init__`).
    pub fn family_default(family: Family) -> Self {
        let mut json = serde_json::Map::new();
        family.fill_text_defaults(&mut json);
        let mut cfg: TextConfig = serde_json::from_value(Value::Object(json)).unwrap_or_default();
        cfg.family = family;
        cfg
    }

    /// Per-layer embeddings, when the config has them (`hidden_size_per_layer_input` > 0).
    pub fn ple(&self) -> Option<PleSpec> {
        match self.hidden_size_per_layer_input {
            Some(dim) if dim > 0 => Some(PleSpec { dim, vocab: self.vocab_size_per_layer_input }),
            _ => None,
        }
    }

    /// The MoE block, when enabled (validated: all three sizes are set).
    pub fn moe(&self) -> Option<MoeSpec> {
        if !self.enable_moe_block {
            return None;
        }
        Some(MoeSpec { num_experts: self.num_experts?, top_k: self.top_k_experts?, intermediate_size: self.moe_intermediate_size? })
    }

    /// HF `__post_init__`: default `layer_types` (every 6th layer full), last layer forced to
    /// `full_attention`, default `rope_parameters`. Rejects `use_bidirectional_attention: "all"`
    /// (see [`Error::BidirectionalAll`]). Idempotent.
    pub fn post_init(&mut self) -> Result<()> {
        if self.use_bidirectional_attention == Some(BidirectionalAttention::All) {
            return Err(Error::BidirectionalAll);
        }
        if self.num_hidden_layers > MAX_LAYERS {
            // Checked before the default layer_types list is built from it (a huge count would
            // abort the process allocating it).
            return Err(Error::config("num_hidden_layers", self.num_hidden_layers, format!("more than {MAX_LAYERS} layers")));
        }
        let layer_types = self.layer_types.get_or_insert_with(|| {
            (0..self.num_hidden_layers).map(|i| if (i + 1) % 6 != 0 { LayerType::Sliding } else { LayerType::Full }).collect()
        });
        if let Some(last) = layer_types.last_mut() {
            if *last != LayerType::Full {
                tracing::warn!("last layer must use full_attention; forcing it (as HF does)");
                *last = LayerType::Full;
            }
        }
        if self.rope_parameters.is_none() {
            let mut map = BTreeMap::new();
            map.insert(
                "sliding_attention".to_string(),
                Some(RopeParameters {
                    rope_type: "default".to_string(),
                    rope_theta: Some(10_000.0),
                    partial_rotary_factor: None,
                    factor: None,
                    other: BTreeMap::new(),
                }),
            );
            map.insert(
                "full_attention".to_string(),
                Some(RopeParameters {
                    rope_type: "proportional".to_string(),
                    rope_theta: Some(1_000_000.0),
                    partial_rotary_factor: Some(0.25),
                    factor: None,
                    other: BTreeMap::new(),
                }),
            );
            self.rope_parameters = Some(map);
        }
        Ok(())
    }

    /// Checks every numerically relevant field; call after [`Self::post_init`].
    pub fn validate(&self) -> Result<()> {
        log_unknown_keys("text_config", &self.other);
        self.validate_family_blocks()?;
        Activation::parse(&self.hidden_activation)?;
        let layer_types = self.layer_types()?;
        if layer_types.len() != self.num_hidden_layers {
            return Err(Error::config(
                "layer_types",
                layer_types.len(),
                format!("must have num_hidden_layers = {} entries", self.num_hidden_layers),
            ));
        }
        require_positive(&[
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("sliding_window", self.sliding_window),
        ])?;
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(Error::config("rms_norm_eps", self.rms_norm_eps, "must be finite, ≥ 0"));
        }
        if let Some(c) = self.final_logit_softcapping {
            if !(c.is_finite() && c > 0.0) {
                return Err(Error::config("final_logit_softcapping", c, "must be positive (HF divides by it: 0 gives NaN logits)"));
            }
        }
        if self.num_kv_shared_layers > self.num_hidden_layers {
            return Err(Error::config(
                "num_kv_shared_layers",
                self.num_kv_shared_layers,
                format!("exceeds num_hidden_layers = {}; HF's shared-layer index arithmetic breaks", self.num_hidden_layers),
            ));
        }
        let used: Vec<LayerType> = {
            let mut v = layer_types.to_vec();
            v.sort();
            v.dedup();
            v
        };
        for &lt in &used {
            let kv = self.num_kv_heads(lt)?;
            if kv == 0 || !self.num_attention_heads.is_multiple_of(kv) {
                return Err(Error::config(
                    if self.uses_k_eq_v(lt) { "num_global_key_value_heads" } else { "num_key_value_heads" },
                    kv,
                    format!("must divide num_attention_heads = {} ({} layers)", self.num_attention_heads, lt.as_str()),
                ));
            }
            if !self.head_dim(lt).is_multiple_of(2) {
                // Full layers take global_head_dim when it is set: name the key that holds the value.
                let field = if lt == LayerType::Full && self.global_head_dim > 0 { "global_head_dim" } else { "head_dim" };
                return Err(Error::config(
                    field,
                    self.head_dim(lt),
                    format!("rotate_half needs an even head dim ({} layers)", lt.as_str()),
                ));
            }
            let rope = self.rope(lt)?;
            if rope.dim != self.head_dim(lt) {
                return Err(Error::config(
                    "rope_parameters",
                    lt.as_str(),
                    format!(
                        "RoPE for {} is computed over {} dims but the layer's head dim is {}; \
                         HF fails to broadcast cos/sin (default RoPE always uses head_dim, only \
                         proportional RoPE on full layers uses global_head_dim)",
                        lt.as_str(),
                        rope.dim,
                        self.head_dim(lt)
                    ),
                ));
            }
        }
        if let Some(map) = &self.rope_parameters {
            for key in map.keys() {
                if !used.iter().any(|lt| lt.as_str() == key) {
                    return Err(Error::config(
                        "rope_parameters",
                        key,
                        "keys must be layer types present in layer_types (HF otherwise treats \
                         the dict as one global RoPE and cannot find the per-type entries)",
                    ));
                }
            }
        }
        for layer in self.first_kv_shared_layer()..self.num_hidden_layers {
            self.kv_source_layer(layer)?;
        }
        Ok(())
    }

    /// PLE and MoE: only `gemma4` text configs have them, and HF cannot run them half-configured.
    fn validate_family_blocks(&self) -> Result<()> {
        let ple = self.hidden_size_per_layer_input.ok_or_else(|| {
            Error::config(
                "hidden_size_per_layer_input",
                "null",
                "HF's strict config rejects null (StrictDataclassFieldValidationError); 0 means no per-layer embeddings",
            )
        })?;
        if self.family == Family::Unified {
            // Gemma4Unified's modules never read these keys: a value that would change the
            // function under gemma4 means the config is not what its model_type says.
            if ple > 0 {
                return Err(Error::config(
                    "hidden_size_per_layer_input",
                    ple,
                    "gemma4_unified has no per-layer embeddings (HF's Gemma4Unified ignores the key); is model_type right?",
                ));
            }
            if self.enable_moe_block {
                return Err(Error::config(
                    "enable_moe_block",
                    true,
                    "gemma4_unified has no MoE block (HF's Gemma4Unified ignores the key); is model_type right?",
                ));
            }
            return Ok(());
        }
        if ple > 0 && self.vocab_size_per_layer_input == 0 {
            return Err(Error::config("vocab_size_per_layer_input", 0, "must be positive when hidden_size_per_layer_input > 0"));
        }
        if self.enable_moe_block {
            for (field, v) in [
                ("num_experts", self.num_experts),
                ("top_k_experts", self.top_k_experts),
                ("moe_intermediate_size", self.moe_intermediate_size),
            ] {
                match v {
                    None => {
                        return Err(Error::config(field, "null", "required when enable_moe_block is true (HF fails building the experts)"))
                    }
                    Some(0) => return Err(Error::config(field, 0, "must be positive")),
                    Some(_) => {}
                }
            }
            if let (Some(k), Some(e)) = (self.top_k_experts, self.num_experts) {
                if k > e {
                    return Err(Error::config("top_k_experts", k, format!("exceeds num_experts = {e} (torch.topk fails)")));
                }
            }
        }
        Ok(())
    }

    /// `layer_types` after `post_init`.
    pub fn layer_types(&self) -> Result<&[LayerType]> {
        self.layer_types.as_deref().ok_or_else(|| Error::config("layer_types", "null", "post_init was not run"))
    }

    /// Attention type of layer `i`.
    pub fn layer_type(&self, i: usize) -> LayerType {
        self.layer_types.as_ref().and_then(|t| t.get(i).copied()).unwrap_or(LayerType::Sliding)
    }

    /// Parsed `hidden_activation`.
    pub fn activation(&self) -> Result<Activation> {
        Activation::parse(&self.hidden_activation)
    }

    /// Head dim of a layer type: `global_head_dim if not sliding and global_head_dim else head_dim`.
    pub fn head_dim(&self, lt: LayerType) -> usize {
        match lt {
            LayerType::Full if self.global_head_dim > 0 => self.global_head_dim,
            _ => self.head_dim,
        }
    }

    /// Whether full layers run "alternative attention" (`attention_k_eq_v`: no `v_proj`).
    pub fn uses_k_eq_v(&self, lt: LayerType) -> bool {
        self.attention_k_eq_v && lt == LayerType::Full
    }

    /// KV heads of a layer type. HF only reads `num_global_key_value_heads` together with
    /// `attention_k_eq_v`; without it full layers use `num_key_value_heads`. With it and a
    /// null value HF fails (`num_attention_heads // None`), hence the error.
    pub fn num_kv_heads(&self, lt: LayerType) -> Result<usize> {
        if self.uses_k_eq_v(lt) {
            self.num_global_key_value_heads.ok_or_else(|| {
                Error::config(
                    "num_global_key_value_heads",
                    "null",
                    "required when attention_k_eq_v is true (HF computes \
                     num_attention_heads // num_global_key_value_heads)",
                )
            })
        } else {
            Ok(self.num_key_value_heads)
        }
    }

    /// Index of the first KV-shared layer (`num_hidden_layers` when there is no sharing).
    pub fn first_kv_shared_layer(&self) -> usize {
        self.num_hidden_layers.saturating_sub(self.num_kv_shared_layers)
    }

    /// Whether layer `i` reuses another layer's K/V (and so has no k/v projections).
    pub fn is_kv_shared(&self, i: usize) -> bool {
        i >= self.first_kv_shared_layer()
    }

    /// The layer whose K/V a shared layer reads: the last non-shared layer of the same type
    /// (HF's `store_full_length_kv`). `Ok(None)` for non-shared layers.
    pub fn kv_source_layer(&self, i: usize) -> Result<Option<usize>> {
        if !self.is_kv_shared(i) {
            return Ok(None);
        }
        let lt = self.layer_type(i);
        (0..self.first_kv_shared_layer()).rev().find(|&j| self.layer_type(j) == lt).map(Some).ok_or(Error::KvSharedLayerWithoutSource {
            layer: i,
            layer_type: lt.as_str(),
            num_kv_shared_layers: self.num_kv_shared_layers,
        })
    }

    /// MLP width of layer `i`. HF's MLP tests `layer_idx >= first_kv_shared_layer_idx > 0`
    /// (note `> 0`, unlike the attention's `>= 0`).
    pub fn intermediate_size_for(&self, i: usize) -> usize {
        let first = self.first_kv_shared_layer();
        let shared = i >= first && first > 0;
        if self.use_double_wide_mlp && shared {
            self.intermediate_size * 2
        } else {
            self.intermediate_size
        }
    }

    /// Embedding scale: HF stores `hidden_size**0.5` in a float32 buffer and multiplies in the
    /// weight dtype, so the f64 square root rounded once to f32 (55.4256… for 3072, not the
    /// bf16 55.5 the HF comment mentions, since the reference runs in f32).
    pub fn embed_scale(&self) -> f32 {
        (self.hidden_size as f64).sqrt() as f32
    }

    /// Resolved RoPE of a layer type, following `Gemma4UnifiedTextRotaryEmbedding.__init__`:
    /// default RoPE uses `head_dim` (even on full layers); proportional RoPE uses
    /// `global_head_dim` on full layers (`head_dim_key`), `head_dim` elsewhere, with
    /// `or hidden_size // num_attention_heads` as HF's fallback for a 0 value.
    pub fn rope(&self, lt: LayerType) -> Result<RopeSpec> {
        let map = self.rope_parameters.as_ref().ok_or_else(|| Error::config("rope_parameters", "null", "post_init was not run"))?;
        let params = map.get(lt.as_str()).and_then(|p| p.as_ref()).ok_or_else(|| {
            Error::config("rope_parameters", lt.as_str(), "no entry for this layer type (HF raises KeyError / has no rotary buffers)")
        })?;
        let theta = params.rope_theta.ok_or_else(|| Error::config("rope_parameters", lt.as_str(), "rope_theta is required"))?;
        let fallback = self.hidden_size / self.num_attention_heads.max(1);
        match params.rope_type.as_str() {
            "default" => Ok(RopeSpec {
                kind: RopeKind::Default,
                theta,
                dim: if self.head_dim > 0 { self.head_dim } else { fallback },
                partial_rotary_factor: 1.0,
                factor: 1.0,
            }),
            "proportional" => {
                let dim = match lt {
                    LayerType::Full if self.global_head_dim > 0 => self.global_head_dim,
                    LayerType::Full => fallback,
                    LayerType::Sliding => self.head_dim,
                };
                let prf = params.partial_rotary_factor.unwrap_or(1.0);
                if !(0.0..=1.0).contains(&prf) {
                    return Err(Error::config("rope_parameters", prf, "partial_rotary_factor must lie in [0, 1]"));
                }
                let factor = params.factor.unwrap_or(1.0);
                if !(factor.is_finite() && factor > 0.0) {
                    return Err(Error::config("rope_parameters", factor, "factor must be > 0"));
                }
                Ok(RopeSpec { kind: RopeKind::Proportional, theta, dim, partial_rotary_factor: prf, factor })
            }
            other => Err(Error::config(
                "rope_parameters",
                format!("{}.rope_type = {other}", lt.as_str()),
                "only default and proportional RoPE are implemented",
            )),
        }
    }
}
