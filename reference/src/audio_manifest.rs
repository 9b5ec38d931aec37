//! Every tensor HF transformers 5.14.1 `save_pretrained` writes for a composite checkpoint's audio
//! path, from its `audio_config` alone — the audio tower and `model.embed_audio`, in checkpoint
//! (post-rename) names, in `state_dict` order.
//!
//! The reference runs no audio, but the L2 tier lists every tensor of a real full-size checkpoint
//! so that its parameter count reproduces the hub figures, audio included (gemma-4-E2B-it's audio
//! part alone is 307,184,384 elements). This module is that list for the audio part; it reads no
//! weights and builds nothing.
//!
//! Mirrors, for the two families ([`AudioFamily`]):
//!
//! - **gemma4** (`audio_config` of `Gemma4AudioConfig`, `gemma4_audio`): `Gemma4AudioModel` of
//!   `models/gemma4/modeling_gemma4.py` under `model.audio_tower.` — the two-layer Conv2d
//!   subsampler (`Gemma4AudioSubSampleConvProjection`), `num_hidden_layers` conformer layers
//!   (`Gemma4AudioLayer`: two `Gemma4AudioFeedForward`, `Gemma4AudioAttention`,
//!   `Gemma4AudioLightConv1d`, three RMSNorms) and the biased `output_proj` — plus
//!   `Gemma4MultimodalEmbedder` under `model.embed_audio.` (its pre-projection RMSNorm has no
//!   scale, so only `embedding_projection.weight [text_hidden, output_proj_dims]` is saved).
//!   `Gemma4ClippableLinear` stores `input_min`, `input_max`, `output_min`, `output_max` (0-d
//!   persistent buffers, saved before the wrapped `linear.weight`) when `use_clipped_linears`.
//!   Non-persistent buffers (`rel_pos_enc.inv_timescales`, `self_attn.softcap`) are not saved.
//!   The activation named by `hidden_act` is a registered submodule (`act_fn`) of every feed
//!   forward and light conv: `prelu` saves `act_fn.weight [1]`, `xielu` saves `act_fn.alpha_p`,
//!   `act_fn.alpha_n` `[1]` and the persistent 0-d buffers `act_fn.beta`, `act_fn.eps`.
//! - **gemma4_unified** (`Gemma4UnifiedAudioConfig`, `gemma4_unified_audio`,
//!   `models/gemma4_unified/`): no audio tower; `Gemma4UnifiedMultimodalEmbedder` projects raw
//!   waveform frames, saving `model.embed_audio.embedding_projection.weight [text_hidden,
//!   audio_embed_dim]`. The unified checkpoint-conversion renames of `conversion_mapping.py` touch
//!   only `embed_vision`, so the module name is the checkpoint name.
//!
//! Config handling follows HF's `@strict` dataclass validation: absent keys take the config
//! class's defaults; an `int` field rejects floats and booleans, a `float` field rejects integer
//! literals (`50` where HF wants `50.0`), `bool` and `str` fields reject anything else, and
//! `Gemma4AudioConfig.initializer_range` must lie in [0, 1] (above 1 the config
//! rejects it, below 0 the tower's weight init). `model_type` is not consulted (HF's
//! composite configs build their own audio class from the dict whatever it says; a mismatch is
//! logged). In `Gemma4UnifiedAudioConfig`, `hidden_size`, `output_proj_dims` and
//! `audio_samples_per_token` are setter aliases of `audio_embed_dim` and win over it; when they
//! disagree among themselves HF keeps whichever comes last in the file, an order this parser does
//! not see, so that is rejected.
//!
//! Rejected with [`Error::UnsupportedConfig`] are values HF cannot build (negative sizes;
//! fewer than two `subsampling_conv_channels`, HF indexes `[0]` and `[1]`; a negative
//! `initializer_range`) and shape inconsistencies HF builds but can never run:
//! `subsampling_conv_channels[0]` below 4 (`input_proj_linear` then reads `(c0//4)·c1 = 0`
//! features) or a zero channel count (empty convolutions); and a negative `num_hidden_layers`
//! (HF silently builds no layers). Where there are layers, also: `num_attention_heads` 0 or
//! above `hidden_size` (`head_dim` 0: `Gemma4AudioAttention.__init__` divides by zero), a
//! `hidden_act` that is no `ACT2FN` key (`KeyError`), `hidden_size` not a multiple of
//! `num_attention_heads` (`post` receives `heads·head_dim` features), an odd `hidden_size` (the
//! relative position table is `2·(hidden_size//2)` wide but `relative_k_proj` expects
//! `hidden_size`), and `conv_kernel_size` below 1. A layer-free tower builds and runs whatever
//! those per-layer fields say, so it is accepted. Fields that change no saved shape (chunking,
//! context, caps, eps, clipping) are type-checked only; extra `subsampling_conv_channels`
//! entries are type-checked and, as in HF, unused.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::config::{log_unknown_keys, Family};
use crate::error::{Error, Result};

/// `(json key, error field name)` of an `audio_config` key.
macro_rules! f {
    ($key:literal) => {
        ($key, concat!("audio_config.", $key))
    };
}

/// Which family's audio classes the composite builds from its `audio_config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioFamily {
    /// `gemma4` composites: `Gemma4AudioConfig` → `Gemma4AudioModel` + `Gemma4MultimodalEmbedder`.
    Gemma4,
    /// `gemma4_unified` composites: `Gemma4UnifiedAudioConfig` → the embedder alone.
    Unified,
}

impl From<Family> for AudioFamily {
    fn from(family: Family) -> Self {
        match family {
            Family::Gemma4 => AudioFamily::Gemma4,
            Family::Unified => AudioFamily::Unified,
        }
    }
}

impl AudioFamily {
    /// The `model_type` of the family's audio config class.
    pub fn model_type(self) -> &'static str {
        match self {
            AudioFamily::Gemma4 => "gemma4_audio",
            AudioFamily::Unified => "gemma4_unified_audio",
        }
    }
}

/// `(checkpoint tensor name, shape)` in `state_dict` order; a 0-d buffer has shape `[]`.
pub type Manifest = Vec<(String, Vec<usize>)>;

/// Every tensor `save_pretrained` writes for the audio path of a composite whose `audio_config`
/// is `audio_config` and whose text decoder is `text_hidden_size` wide: the audio tower (gemma4
/// family) and `model.embed_audio`. A null `audio_config` (HF builds neither) gives an empty list.
pub fn audio_manifest(family: AudioFamily, audio_config: &Value, text_hidden_size: usize) -> Result<Manifest> {
    let map = match audio_config {
        Value::Null => return Ok(Vec::new()),
        Value::Object(map) => map,
        other => return Err(Error::config("audio_config", other.to_string(), "must be an object or null")),
    };
    if let Some(mt) = map.get("model_type").and_then(Value::as_str).filter(|mt| *mt != family.model_type()) {
        tracing::warn!(
            model_type = mt,
            expected = family.model_type(),
            "audio_config model_type is not the family's; HF builds the family's audio class from it anyway"
        );
    }
    match family {
        AudioFamily::Gemma4 => {
            let cfg = TowerConfig::parse(map)?;
            log_unknown(map, TowerConfig::KEYS);
            Ok(cfg.manifest(text_hidden_size))
        }
        AudioFamily::Unified => {
            let dim = unified_embed_dim(map)?;
            log_unknown(map, UNIFIED_KEYS);
            Ok(vec![("model.embed_audio.embedding_projection.weight".to_string(), vec![text_hidden_size, dim])])
        }
    }
}

/// Total element count of a manifest (a 0-d tensor counts 1).
pub fn element_count(manifest: &[(String, Vec<usize>)]) -> u64 {
    manifest.iter().map(|(_, shape)| shape.iter().map(|&d| d as u64).product::<u64>()).sum()
}

/// `transformers.activations.ACT2FN` keys (5.14.1): `ACT2FN[hidden_act]` raises `KeyError` at
/// build time for any other name.
const ACT2FN_KEYS: &[&str] = &[
    "gelu",
    "gelu_10",
    "gelu_accurate",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_python_tanh",
    "gelu_pytorch_tanh",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "prelu",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
    "xielu",
];

/// The tensors an `ACT2FN[name]` module saves (`nn.PReLU`'s weight; `XIELUActivation`'s two
/// parameters and two persistent 0-d buffers); the other activations have none.
fn activation_tensors(name: &str) -> &'static [(&'static str, &'static [usize])] {
    match name {
        "prelu" => &[("weight", &[1])],
        "xielu" => &[("alpha_p", &[1]), ("alpha_n", &[1]), ("beta", &[]), ("eps", &[])],
        _ => &[],
    }
}

/// `Gemma4AudioConfig` fields that determine the saved shapes (the rest are type-checked only).
#[derive(Debug, Clone, PartialEq)]
struct TowerConfig {
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    hidden_act: String,
    subsampling_conv_channels: [usize; 2],
    conv_kernel_size: usize,
    use_clipped_linears: bool,
    output_proj_dims: usize,
}

impl TowerConfig {
    /// Every key `Gemma4AudioConfig` declares.
    const KEYS: &'static [&'static str] = &[
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "hidden_act",
        "subsampling_conv_channels",
        "conv_kernel_size",
        "residual_weight",
        "attention_chunk_size",
        "attention_context_left",
        "attention_context_right",
        "attention_logit_cap",
        "attention_invalid_logits_value",
        "use_clipped_linears",
        "rms_norm_eps",
        "gradient_clipping",
        "output_proj_dims",
        "initializer_range",
    ];

    /// Applies `Gemma4AudioConfig`'s defaults and HF's strict type checks, then rejects what HF
    /// cannot build or run (module doc).
    fn parse(map: &Map<String, Value>) -> Result<Self> {
        let hidden_size = int(map, f!("hidden_size"), 1024)?;
        let num_hidden_layers = int(map, f!("num_hidden_layers"), 12)?;
        let num_attention_heads = int(map, f!("num_attention_heads"), 8)?;
        let hidden_act = string(map, f!("hidden_act"), "silu")?;
        let channels = int_list(map, f!("subsampling_conv_channels"), &[128, 32])?;
        let conv_kernel_size = int(map, f!("conv_kernel_size"), 5)?;
        float(map, f!("residual_weight"))?;
        int(map, f!("attention_chunk_size"), 12)?;
        int(map, f!("attention_context_left"), 13)?;
        int(map, f!("attention_context_right"), 0)?;
        float(map, f!("attention_logit_cap"))?;
        float(map, f!("attention_invalid_logits_value"))?;
        let use_clipped_linears = boolean(map, f!("use_clipped_linears"), true)?;
        float(map, f!("rms_norm_eps"))?;
        float(map, f!("gradient_clipping"))?;
        let output_proj_dims = int(map, f!("output_proj_dims"), 1536)?;
        if let Some(r) = float(map, f!("initializer_range"))? {
            if r > 1.0 {
                return Err(Error::config("audio_config.initializer_range", r, "HF's config requires a value <= 1.0"));
            }
            if r < 0.0 {
                // HF's `interval(min=0.0)` reads 0.0 as "no minimum"; the tower's weight init then fails.
                return Err(Error::config(
                    "audio_config.initializer_range",
                    r,
                    "must be >= 0.0: HF initialises the tower with normal_(std=initializer_range) and fails on a negative std",
                ));
            }
        }

        // Always built: the subsampler, `output_proj` and the embedder.
        let hidden_size = non_negative("audio_config.hidden_size", hidden_size)?;
        let output_proj_dims = non_negative("audio_config.output_proj_dims", output_proj_dims)?;
        let (c0, c1) = match channels.as_slice() {
            [c0, c1, ..] => {
                let name = "audio_config.subsampling_conv_channels";
                (non_negative(name, *c0)?, non_negative(name, *c1)?)
            }
            _ => {
                return Err(Error::config(
                    "audio_config.subsampling_conv_channels",
                    &channels,
                    "needs two channel counts (HF indexes [0] and [1]: IndexError)",
                ))
            }
        };
        if c0 < 4 || c1 == 0 {
            return Err(Error::config(
                "audio_config.subsampling_conv_channels",
                &channels,
                "needs [0] >= 4 and [1] >= 1: input_proj_linear reads (channels[0]//4)·channels[1] features and a \
                 convolution with no output channels cannot run",
            ));
        }
        let num_hidden_layers = usize::try_from(num_hidden_layers).map_err(|_| {
            Error::config(
                "audio_config.num_hidden_layers",
                num_hidden_layers,
                "must be non-negative (HF silently builds no layers from range() of a negative count)",
            )
        })?;
        // Built per layer: a layer-free tower builds and runs whatever these say.
        if num_hidden_layers > 0 {
            if !ACT2FN_KEYS.contains(&hidden_act.as_str()) {
                return Err(Error::config(
                    "audio_config.hidden_act",
                    &hidden_act,
                    format!("not an ACT2FN activation (HF raises KeyError building the layers); expected one of {ACT2FN_KEYS:?}"),
                ));
            }
            let heads_ok = usize::try_from(num_attention_heads).is_ok_and(|n| (1..=hidden_size).contains(&n));
            if !heads_ok {
                return Err(Error::config(
                    "audio_config.num_attention_heads",
                    num_attention_heads,
                    format!(
                        "must be in 1..=hidden_size ({hidden_size}): head_dim = hidden_size // heads must be positive \
                         (HF divides by zero building Gemma4AudioAttention otherwise)"
                    ),
                ));
            }
            if hidden_size % num_attention_heads as usize != 0 {
                return Err(Error::config(
                    "audio_config.num_attention_heads",
                    num_attention_heads,
                    format!(
                        "must divide hidden_size = {hidden_size}: `post` expects hidden_size features but the attention \
                         output is heads·head_dim wide (HF fails at that matmul)"
                    ),
                ));
            }
            if hidden_size % 2 != 0 {
                return Err(Error::config(
                    "audio_config.hidden_size",
                    hidden_size,
                    "must be even: the sin/cos relative position table is 2·(hidden_size//2) wide and \
                     relative_k_proj expects hidden_size (HF fails at that matmul)",
                ));
            }
            if conv_kernel_size <= 0 {
                return Err(Error::config(
                    "audio_config.conv_kernel_size",
                    conv_kernel_size,
                    "must be positive (HF cannot build a negative-size depthwise convolution nor run an empty one)",
                ));
            }
        }

        Ok(Self {
            hidden_size,
            num_hidden_layers,
            // Read only when there are layers, where both were checked positive above.
            num_attention_heads: usize::try_from(num_attention_heads).unwrap_or(0),
            hidden_act,
            subsampling_conv_channels: [c0, c1],
            conv_kernel_size: usize::try_from(conv_kernel_size).unwrap_or(0),
            use_clipped_linears,
            output_proj_dims,
        })
    }

    /// The tensors of `model.audio_tower` then `model.embed_audio`, in `state_dict` order.
    fn manifest(&self, text_hidden_size: usize) -> Manifest {
        let h = self.hidden_size;
        let [c0, c1] = self.subsampling_conv_channels;
        let mut m = Out { entries: Vec::new(), clipped: self.use_clipped_linears, act: activation_tensors(&self.hidden_act) };

        let sub = "model.audio_tower.subsample_conv_projection";
        m.push(format!("{sub}.layer0.conv.weight"), vec![c0, 1, 3, 3]);
        m.push(format!("{sub}.layer0.norm.weight"), vec![c0]);
        m.push(format!("{sub}.layer1.conv.weight"), vec![c1, c0, 3, 3]);
        m.push(format!("{sub}.layer1.norm.weight"), vec![c1]);
        m.push(format!("{sub}.input_proj_linear.weight"), vec![h, (c0 / 4) * c1]);

        for i in 0..self.num_hidden_layers {
            let layer = format!("model.audio_tower.layers.{i}");
            for ff in ["feed_forward1", "feed_forward2"] {
                let ff = format!("{layer}.{ff}");
                m.clippable(&format!("{ff}.ffw_layer_1"), 4 * h, h);
                m.clippable(&format!("{ff}.ffw_layer_2"), h, 4 * h);
                m.push(format!("{ff}.pre_layer_norm.weight"), vec![h]);
                m.push(format!("{ff}.post_layer_norm.weight"), vec![h]);
                m.activation(&ff);
            }
            let attn = format!("{layer}.self_attn");
            let head_dim = h / self.num_attention_heads; // parse: 1 <= heads <= h when there are layers
            m.push(format!("{attn}.per_dim_scale"), vec![head_dim]);
            for proj in ["q_proj", "k_proj", "v_proj"] {
                m.clippable(&format!("{attn}.{proj}"), self.num_attention_heads * head_dim, h);
            }
            m.clippable(&format!("{attn}.post"), h, h);
            m.push(format!("{attn}.relative_k_proj.weight"), vec![self.num_attention_heads * head_dim, h]);
            let conv = format!("{layer}.lconv1d");
            m.clippable(&format!("{conv}.linear_start"), 2 * h, h);
            m.clippable(&format!("{conv}.linear_end"), h, h);
            m.push(format!("{conv}.depthwise_conv1d.weight"), vec![h, 1, self.conv_kernel_size]);
            m.push(format!("{conv}.pre_layer_norm.weight"), vec![h]);
            m.push(format!("{conv}.conv_norm.weight"), vec![h]);
            m.activation(&conv);
            for norm in ["norm_pre_attn", "norm_post_attn", "norm_out"] {
                m.push(format!("{layer}.{norm}.weight"), vec![h]);
            }
        }
        m.push("model.audio_tower.output_proj.weight".to_string(), vec![self.output_proj_dims, h]);
        m.push("model.audio_tower.output_proj.bias".to_string(), vec![self.output_proj_dims]);
        m.push("model.embed_audio.embedding_projection.weight".to_string(), vec![text_hidden_size, self.output_proj_dims]);
        m.entries
    }
}

/// Accumulates manifest entries with the per-config module shapes.
struct Out {
    entries: Manifest,
    clipped: bool,
    act: &'static [(&'static str, &'static [usize])],
}

impl Out {
    fn push(&mut self, name: String, shape: Vec<usize>) {
        self.entries.push((name, shape));
    }

    /// `Gemma4ClippableLinear(in, out)`: its own buffers first, then the child `linear`.
    fn clippable(&mut self, module: &str, out_features: usize, in_features: usize) {
        if self.clipped {
            for bound in ["input_min", "input_max", "output_min", "output_max"] {
                self.push(format!("{module}.{bound}"), Vec::new());
            }
        }
        self.push(format!("{module}.linear.weight"), vec![out_features, in_features]);
    }

    /// The `act_fn` submodule's saved tensors (registered last in its parent).
    fn activation(&mut self, module: &str) {
        for (name, shape) in self.act {
            self.push(format!("{module}.act_fn.{name}"), shape.to_vec());
        }
    }
}

/// Keys `Gemma4UnifiedAudioConfig` declares or aliases.
const UNIFIED_KEYS: &[&str] =
    &["audio_embed_dim", "hidden_size", "output_proj_dims", "audio_samples_per_token", "rms_norm_eps", "initializer_range"];

/// `Gemma4UnifiedAudioConfig.audio_embed_dim` after its setter aliases (module doc).
fn unified_embed_dim(map: &Map<String, Value>) -> Result<usize> {
    let own = int(map, f!("audio_embed_dim"), 640)?;
    float(map, f!("rms_norm_eps"))?;
    float(map, f!("initializer_range"))?;
    let mut alias: Option<(Key, i64)> = None;
    for key in [f!("hidden_size"), f!("output_proj_dims"), f!("audio_samples_per_token")] {
        if !map.contains_key(key.0) {
            continue;
        }
        let v = int(map, key, 0)?;
        match alias {
            Some(((first, _), w)) if w != v => {
                return Err(Error::config(
                    key.1,
                    v,
                    format!(
                        "disagrees with `{first}` = {w}: both set audio_embed_dim and HF keeps the one later in the \
                         file's key order, which is not known here"
                    ),
                ))
            }
            Some(_) => {}
            None => alias = Some((key, v)),
        }
    }
    match alias {
        Some(((_, name), v)) => non_negative(name, v),
        None => non_negative("audio_config.audio_embed_dim", own),
    }
}

type Key = (&'static str, &'static str);

/// The JSON kind of a value, in HF's (Python's) terms, for type errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "None",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn type_error(name: &'static str, v: &Value, expected: &str) -> Error {
    Error::config(name, v.to_string(), format!("expected {expected}, got {} (HF's strict config rejects it)", kind(v)))
}

/// An `int` field: a JSON integer literal (not a float, bool or null).
fn int(map: &Map<String, Value>, (key, name): Key, default: i64) -> Result<i64> {
    map.get(key).map_or(Ok(default), |v| int_value(v, name))
}

fn int_value(v: &Value, name: &'static str) -> Result<i64> {
    match v {
        Value::Number(n) if !n.is_f64() => {
            n.as_i64().ok_or_else(|| Error::config(name, v.to_string(), "is too large for any tensor dimension"))
        }
        _ => Err(type_error(name, v, "int")),
    }
}

/// A `float` field (checked, value returned when present): a JSON number with a fraction or
/// exponent; HF rejects an integer literal such as `50` where it wants `50.0`.
fn float(map: &Map<String, Value>, (key, name): Key) -> Result<Option<f64>> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) if n.is_f64() => Ok(n.as_f64()),
        Some(v) => Err(type_error(name, v, "float")),
    }
}

fn boolean(map: &Map<String, Value>, (key, name): Key, default: bool) -> Result<bool> {
    match map.get(key) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(type_error(name, v, "bool")),
    }
}

fn string(map: &Map<String, Value>, (key, name): Key, default: &str) -> Result<String> {
    match map.get(key) {
        None => Ok(default.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(type_error(name, v, "str")),
    }
}

/// A `list[int]` field (every item an int literal).
fn int_list(map: &Map<String, Value>, (key, name): Key, default: &[i64]) -> Result<Vec<i64>> {
    match map.get(key) {
        None => Ok(default.to_vec()),
        Some(Value::Array(items)) => items.iter().map(|item| int_value(item, name)).collect(),
        Some(v) => Err(type_error(name, v, "list[int]")),
    }
}

/// A size HF passes to a module constructor: negative ones fail there.
fn non_negative(name: &'static str, v: i64) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::config(name, v, "must be non-negative (HF cannot create a tensor with a negative dimension)"))
}

fn log_unknown(map: &Map<String, Value>, known: &[&str]) {
    let other: BTreeMap<String, Value> =
        map.iter().filter(|(k, _)| !known.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    log_unknown_keys("audio_config", &other);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected values from HF transformers 5.14.1 (torch 2.15.0): `Gemma4ForConditionalGeneration`
    // / `Gemma4UnifiedForConditionalGeneration` built on the meta device from the full hub configs
    // (`anchors/hf-configs`), `state_dict()` entries under `model.audio_tower.` / `model.embed_audio.`.
    // The whole models count 5,104,298,467 (E2B), 7,941,101,802 (E4B) and 11,959,730,224 (12B),
    // as the anchors' README says.

    /// The `audio_config` of gemma-4-E2B-it and gemma-4-E4B-it (identical).
    fn e2b_audio() -> Value {
        json!({
            "model_type": "gemma4_audio",
            "hidden_size": 1024,
            "num_hidden_layers": 12,
            "num_attention_heads": 8,
            "hidden_act": "silu",
            "subsampling_conv_channels": [128, 32],
            "conv_kernel_size": 5,
            "residual_weight": 0.5,
            "attention_chunk_size": 12,
            "attention_context_left": 13,
            "attention_context_right": 0,
            "attention_logit_cap": 50.0,
            "attention_invalid_logits_value": -1000000000.0,
            "use_clipped_linears": true,
            "rms_norm_eps": 1e-06,
            "gradient_clipping": 10000000000.0,
            "output_proj_dims": 1536
        })
    }

    /// The `audio_config` of gemma-4-12B (hub revision 56820d7d), verbatim.
    fn unified_12b_audio() -> Value {
        json!({
            "_name_or_path": "",
            "architectures": null,
            "audio_embed_dim": 640,
            "audio_samples_per_token": 640,
            "chunk_size_feed_forward": 0,
            "dtype": null,
            "hidden_size": 640,
            "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
            "initializer_range": 0.02,
            "is_encoder_decoder": false,
            "label2id": {"LABEL_0": 0, "LABEL_1": 1},
            "model_type": "gemma4_unified_audio",
            "output_attentions": false,
            "output_hidden_states": false,
            "output_proj_dims": 640,
            "problem_type": null,
            "return_dict": true,
            "rms_norm_eps": 1e-06
        })
    }

    fn shape_of<'a>(m: &'a Manifest, name: &str) -> Option<&'a [usize]> {
        m.iter().find(|(n, _)| n == name).map(|(_, s)| s.as_slice())
    }

    fn field_of(r: Result<Manifest>) -> &'static str {
        match r {
            Err(Error::UnsupportedConfig { field, .. }) => field,
            other => panic!("expected an UnsupportedConfig error, got {other:?}"),
        }
    }

    #[test]
    fn e2b_matches_hf() -> Result<()> {
        let m = audio_manifest(AudioFamily::Gemma4, &e2b_audio(), 1536)?;
        assert_eq!(m.len(), 752);
        assert_eq!(element_count(&m), 307_184_384);
        assert_eq!(m[0], ("model.audio_tower.subsample_conv_projection.layer0.conv.weight".into(), vec![128, 1, 3, 3]));
        assert_eq!(m[4], ("model.audio_tower.subsample_conv_projection.input_proj_linear.weight".into(), vec![1024, 1024]));
        assert_eq!(m[5], ("model.audio_tower.layers.0.feed_forward1.ffw_layer_1.input_min".into(), vec![]));
        assert_eq!(m[9], ("model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight".into(), vec![4096, 1024]));
        assert_eq!(m[29], ("model.audio_tower.layers.0.self_attn.per_dim_scale".into(), vec![128]));
        assert_eq!(shape_of(&m, "model.audio_tower.layers.11.self_attn.relative_k_proj.weight"), Some(&[1024, 1024][..]));
        assert_eq!(shape_of(&m, "model.audio_tower.layers.11.lconv1d.depthwise_conv1d.weight"), Some(&[1024, 1, 5][..]));
        assert_eq!(shape_of(&m, "model.audio_tower.layers.3.lconv1d.linear_start.linear.weight"), Some(&[2048, 1024][..]));
        assert_eq!(m[m.len() - 3], ("model.audio_tower.output_proj.weight".into(), vec![1536, 1024]));
        assert_eq!(m[m.len() - 2], ("model.audio_tower.output_proj.bias".into(), vec![1536]));
        assert_eq!(m[m.len() - 1], ("model.embed_audio.embedding_projection.weight".into(), vec![1536, 1536]));
        // The E2B values are Gemma4AudioConfig's defaults.
        assert_eq!(audio_manifest(AudioFamily::Gemma4, &json!({}), 1536)?, m);
        Ok(())
    }

    #[test]
    fn e4b_matches_hf() -> Result<()> {
        let m = audio_manifest(AudioFamily::Gemma4, &e2b_audio(), 2560)?;
        assert_eq!(m.len(), 752);
        assert_eq!(element_count(&m), 308_757_248);
        assert_eq!(shape_of(&m, "model.embed_audio.embedding_projection.weight"), Some(&[2560, 1536][..]));
        Ok(())
    }

    #[test]
    fn unified_12b_matches_hf() -> Result<()> {
        let m = audio_manifest(AudioFamily::Unified, &unified_12b_audio(), 3840)?;
        assert_eq!(m, vec![("model.embed_audio.embedding_projection.weight".to_string(), vec![3840, 640])]);
        assert_eq!(element_count(&m), 2_457_600);
        assert_eq!(audio_manifest(AudioFamily::Unified, &json!({}), 3840)?, m);
        Ok(())
    }

    #[test]
    fn variants() -> Result<()> {
        assert!(audio_manifest(AudioFamily::Gemma4, &Value::Null, 1536)?.is_empty());
        assert!(audio_manifest(AudioFamily::Unified, &Value::Null, 3840)?.is_empty());
        // No clipping: 10 clippable linears per layer lose their 4 bounds.
        let plain = audio_manifest(AudioFamily::Gemma4, &json!({"use_clipped_linears": false}), 1536)?;
        assert_eq!(plain.len(), 752 - 12 * 40);
        assert_eq!(element_count(&plain), 307_184_384 - 12 * 40);
        // Activations with state: prelu's weight, xielu's two parameters and two buffers.
        let small = json!({"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_act": "prelu"});
        let m = audio_manifest(AudioFamily::Gemma4, &small, 8)?;
        assert_eq!(shape_of(&m, "model.audio_tower.layers.0.feed_forward2.act_fn.weight"), Some(&[1][..]));
        assert_eq!(shape_of(&m, "model.audio_tower.layers.0.lconv1d.act_fn.weight"), Some(&[1][..]));
        let small = json!({"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_act": "xielu"});
        let m = audio_manifest(AudioFamily::Gemma4, &small, 8)?;
        assert_eq!(shape_of(&m, "model.audio_tower.layers.0.feed_forward1.act_fn.eps"), Some(&[][..]));
        // A layer-free tower builds whatever the per-layer fields say (HF builds and runs it).
        let bare = json!({"num_hidden_layers": 0, "hidden_size": 9, "num_attention_heads": 0, "hidden_act": "foo", "conv_kernel_size": -3});
        let m = audio_manifest(AudioFamily::Gemma4, &bare, 8)?;
        assert_eq!(m.len(), 8);
        assert_eq!(shape_of(&m, "model.audio_tower.output_proj.weight"), Some(&[1536, 9][..]));
        // Unified aliases win over audio_embed_dim.
        let m = audio_manifest(AudioFamily::Unified, &json!({"audio_embed_dim": 100, "hidden_size": 320}), 64)?;
        assert_eq!(m[0].1, vec![64, 320]);
        Ok(())
    }

    #[test]
    fn rejections() {
        let g = |v: Value| field_of(audio_manifest(AudioFamily::Gemma4, &v, 64));
        let u = |v: Value| field_of(audio_manifest(AudioFamily::Unified, &v, 64));
        assert_eq!(g(json!([])), "audio_config");
        assert_eq!(g(json!({"hidden_size": 1024.0})), "audio_config.hidden_size");
        assert_eq!(g(json!({"num_hidden_layers": true})), "audio_config.num_hidden_layers");
        assert_eq!(g(json!({"attention_logit_cap": 50})), "audio_config.attention_logit_cap");
        assert_eq!(g(json!({"use_clipped_linears": 1})), "audio_config.use_clipped_linears");
        assert_eq!(g(json!({"hidden_act": null})), "audio_config.hidden_act");
        assert_eq!(g(json!({"hidden_act": "gelu_tanh"})), "audio_config.hidden_act");
        assert_eq!(g(json!({"subsampling_conv_channels": [128]})), "audio_config.subsampling_conv_channels");
        assert_eq!(g(json!({"subsampling_conv_channels": [128, 32.0]})), "audio_config.subsampling_conv_channels");
        assert_eq!(g(json!({"subsampling_conv_channels": [3, 32]})), "audio_config.subsampling_conv_channels");
        assert_eq!(g(json!({"initializer_range": 2.0})), "audio_config.initializer_range");
        assert_eq!(g(json!({"num_attention_heads": 0})), "audio_config.num_attention_heads");
        assert_eq!(g(json!({"num_attention_heads": 2048})), "audio_config.num_attention_heads");
        assert_eq!(g(json!({"num_attention_heads": 3})), "audio_config.num_attention_heads");
        assert_eq!(g(json!({"hidden_size": 1023, "num_attention_heads": 1})), "audio_config.hidden_size");
        assert_eq!(g(json!({"output_proj_dims": -1})), "audio_config.output_proj_dims");
        assert_eq!(g(json!({"conv_kernel_size": 0})), "audio_config.conv_kernel_size");
        assert_eq!(g(json!({"num_hidden_layers": -1})), "audio_config.num_hidden_layers");
        assert_eq!(u(json!({"audio_embed_dim": 640.0})), "audio_config.audio_embed_dim");
        assert_eq!(u(json!({"hidden_size": 320, "output_proj_dims": 640})), "audio_config.output_proj_dims");
        assert_eq!(u(json!({"rms_norm_eps": 0})), "audio_config.rms_norm_eps");
        assert_eq!(u(json!({"audio_embed_dim": -5})), "audio_config.audio_embed_dim");
    }
}
