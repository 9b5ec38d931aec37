//! candle-transformers' own Gemma 4 (`candle_transformers::models::gemma4`, 0.11.1, the candle
//! version the reference uses), loaded from an HF checkpoint and run a position at a time: what
//! Rust users run Gemma 4 with, judged against the reference like an export is
//! ([`crate::backend::candle_transformers`] is its `Backend`). It is not the reference and cannot be: its RMSNorm scales by
//! `1 + w` where HF scales by `w`, its attention scale is 1/√head_dim where HF's is 1, it has no
//! `layer_scalar`, PLE, KV sharing, MoE or `attention_k_eq_v`, and its prefill sliding mask lets a
//! query see W+1 keys (docs/candle-transformers-gemma4-vs-hf.md, with file:line on both sides).
//!
//! What it cannot run is said before loading ([`unsupported`]): a feature the config uses that
//! the crate ignores would otherwise give a silently different model, not an error.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::gemma4 as ct;

use onnx_parity_reference::Dense;

/// The crate version judged (Cargo.toml pins it exactly).
pub const VERSION: &str = "0.11.1";

/// Why candle-transformers' gemma4 could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum CandleTransformersError {
    #[error("reading {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// config.json does not deserialize into the crate's config type.
    #[error("{}: not a candle-transformers {VERSION} {kind}: {message}", path.display())]
    Config { path: PathBuf, kind: &'static str, message: String },
    /// The model uses what the crate does not implement (each item names it).
    #[error("candle-transformers {VERSION}'s gemma4 does not implement what this model uses: {}", .0.join("; "))]
    Unsupported(Vec<String>),
    #[error("checkpoint {}: {source}", dir.display())]
    Weights {
        dir: PathBuf,
        #[source]
        source: onnx_parity_reference::Error,
    },
    /// The crate's constructor failed; candle's message names the tensor it looked for.
    #[error("loading {} with candle-transformers {VERSION} (`{entry}`): {source}", dir.display())]
    Load {
        dir: PathBuf,
        entry: &'static str,
        #[source]
        source: candle_core::Error,
    },
    #[error("candle-transformers {VERSION} forward: {0}")]
    Run(#[from] candle_core::Error),
}

/// What the config (and the prompt) use that candle-transformers 0.11.1's gemma4 does not
/// implement, each named with the config field; empty when it can run the model. Fields the
/// crate's config type does not have would be ignored by it, so each one that changes the
/// function is checked here.
pub fn unsupported(config: &serde_json::Value, has_images: bool) -> Vec<String> {
    let mut missing = Vec::new();
    let model_type = config.get("model_type").and_then(|v| v.as_str()).unwrap_or("");
    if !matches!(model_type, "gemma4" | "gemma4_text") {
        missing.push(format!("model_type {model_type:?} (it has gemma4 and gemma4_text only)"));
        return missing;
    }
    let text = config.get("text_config").unwrap_or(config);
    let int = |k: &str| text.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let flag = |k: &str| text.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    if int("hidden_size_per_layer_input") > 0 {
        missing.push(format!("per-layer embeddings (hidden_size_per_layer_input {})", int("hidden_size_per_layer_input")));
    }
    if int("num_kv_shared_layers") > 0 {
        missing.push(format!("KV sharing (num_kv_shared_layers {})", int("num_kv_shared_layers")));
    }
    if flag("use_double_wide_mlp") && int("num_kv_shared_layers") > 0 {
        missing.push("the KV-shared layers' double-wide MLP (use_double_wide_mlp)".into());
    }
    if flag("enable_moe_block") {
        missing.push("the MoE block (enable_moe_block)".into());
    }
    if flag("attention_k_eq_v") {
        missing.push("keys as values on full layers (attention_k_eq_v)".into());
    } else if int("num_global_key_value_heads") > 0 {
        // HF reads it only with k_eq_v (modeling_gemma4.py:1195-1197); the crate sizes every
        // full layer's K/V by it (text.rs:257-260), so the checkpoint's k_proj does not fit.
        missing.push(format!(
            "num_global_key_value_heads {} without attention_k_eq_v (HF ignores it there; the crate sizes full layers' K/V by it)",
            int("num_global_key_value_heads")
        ));
    }
    match text.get("use_bidirectional_attention").and_then(|v| v.as_str()) {
        Some("all") => missing.push("bidirectional attention on every layer (use_bidirectional_attention \"all\")".into()),
        Some("vision") if has_images && model_type == "gemma4" => {
            missing.push("bidirectional image blocks (use_bidirectional_attention \"vision\")".into())
        }
        _ => {}
    }
    if has_images {
        missing.push(
            "image prompts on HF checkpoints (Model::new reads the vision tower's `…self_attn.q_proj.weight` and the decoder under \
             `model.language_model.model.`; HF writes `…q_proj.linear.weight` and `model.language_model.`)"
                .into(),
        );
    }
    missing
}

/// Reads `dir/config.json`.
pub fn read_config(dir: &Path) -> Result<serde_json::Value, CandleTransformersError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| CandleTransformersError::Io { path: path.clone(), source })?;
    serde_json::from_str(&text).map_err(|e| CandleTransformersError::Config { path, kind: "config.json", message: e.to_string() })
}

/// The model the crate builds for a model type.
enum Model {
    /// `gemma4_text`: `text::TextModel` on `model.*` (HF's Gemma4ForCausalLM layout).
    Text(ct::text::TextModel),
    /// `gemma4`: the composite `Model` (its `language_model` runs text prompts).
    Composite(Box<ct::Model>),
}

impl Model {
    fn text(&mut self) -> &mut ct::text::TextModel {
        match self {
            Model::Text(m) => m,
            Model::Composite(m) => &mut m.language_model,
        }
    }
}

/// A loaded candle-transformers gemma4.
pub struct CandleTransformersGemma4 {
    model: Model,
    model_type: String,
    dir: PathBuf,
    device: Device,
}

impl std::fmt::Debug for CandleTransformersGemma4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleTransformersGemma4").field("model_type", &self.model_type).field("dir", &self.dir).finish()
    }
}

impl CandleTransformersGemma4 {
    /// Loads the checkpoint (mmapped, f32, CPU) after checking that the crate implements what
    /// its config uses (text prompts; [`unsupported`] with images says more).
    pub fn load(dir: &Path) -> Result<Self, CandleTransformersError> {
        let config = read_config(dir)?;
        let missing = unsupported(&config, false);
        if !missing.is_empty() {
            return Err(CandleTransformersError::Unsupported(missing));
        }
        Self::from_config(dir, config)
    }

    /// Loads without the feature check: what a user calling the crate gets (features it lacks
    /// are ignored, tensors it expects and the checkpoint lacks are load errors).
    pub fn load_unchecked(dir: &Path) -> Result<Self, CandleTransformersError> {
        Self::from_config(dir, read_config(dir)?)
    }

    fn from_config(dir: &Path, config: serde_json::Value) -> Result<Self, CandleTransformersError> {
        let path = dir.join("config.json");
        let model_type = config.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_string();
        let files = onnx_parity_reference::weights::checkpoint_files(dir)
            .map_err(|source| CandleTransformersError::Weights { dir: dir.into(), source })?;
        let device = Device::Cpu;
        // SAFETY: the checkpoint files are mapped read-only and not modified while mapped (the
        // same contract as the reference's loader).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::F32, &device) }
            .map_err(|source| CandleTransformersError::Load { dir: dir.into(), entry: "VarBuilder::from_mmaped_safetensors", source })?;
        let bad =
            |kind: &'static str, e: serde_json::Error| CandleTransformersError::Config { path: path.clone(), kind, message: e.to_string() };
        let model = match model_type.as_str() {
            "gemma4_text" => {
                let cfg: ct::Gemma4TextConfig = serde_json::from_value(config).map_err(|e| bad("Gemma4TextConfig", e))?;
                let m = ct::text::TextModel::new(&cfg, vb).map_err(|source| CandleTransformersError::Load {
                    dir: dir.into(),
                    entry: "text::TextModel::new",
                    source,
                })?;
                Model::Text(m)
            }
            "gemma4" => {
                let cfg: ct::config::Gemma4Config = serde_json::from_value(config).map_err(|e| bad("Gemma4Config", e))?;
                let m = ct::Model::new(&cfg, vb).map_err(|source| CandleTransformersError::Load {
                    dir: dir.into(),
                    entry: "Model::new",
                    source,
                })?;
                Model::Composite(Box::new(m))
            }
            other => return Err(CandleTransformersError::Unsupported(vec![format!("model_type {other:?}")])),
        };
        Ok(Self { model, model_type, dir: dir.into(), device })
    }

    /// Last-position logits `[V]` of `ids` fed at `offset` (the crate returns no other position).
    fn forward(&mut self, ids: &[i64], offset: usize) -> Result<Vec<f32>, CandleTransformersError> {
        let input = self.ids_tensor(ids)?;
        let logits = self.model.text().forward(&input, offset)?;
        Ok(logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?)
    }

    /// Prefill `ids` from an empty cache: logits `[1, S, V]` at every position (one prefill per
    /// prefix: the crate returns the last position only) or `[1, 1, V]` at the last, and the
    /// scaled input embeddings `[1, S, H]`. The full prompt runs last, so its cache serves
    /// [`Self::step`].
    pub fn prefill(&mut self, ids: &[i64], all_positions: bool) -> Result<(Dense<f32>, Dense<f32>), CandleTransformersError> {
        let s = ids.len();
        if s == 0 {
            return Err(CandleTransformersError::Run(candle_core::Error::Msg("input_ids is empty".into())));
        }
        let mut rows: Vec<Vec<f32>> = Vec::with_capacity(s);
        if all_positions {
            for k in 1..s {
                self.model.text().clear_kv_cache();
                rows.push(self.forward(&ids[..k], 0)?);
            }
        }
        self.model.text().clear_kv_cache();
        rows.push(self.forward(ids, 0)?);
        let vocab = rows[0].len();
        let logits = Dense::new(vec![1, rows.len(), vocab], rows.concat());
        let input = self.ids_tensor(ids)?;
        let embeds = self.model.text().embed_tokens(&input)?;
        let embeds = Dense::new(embeds.dims().to_vec(), embeds.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?);
        Ok((logits, embeds))
    }

    /// `ids` as the crate's `[1, S]` u32 input.
    fn ids_tensor(&self, ids: &[i64]) -> Result<Tensor, CandleTransformersError> {
        Ok(Tensor::from_vec(ids.iter().map(|&t| t as u32).collect::<Vec<u32>>(), (1, ids.len()), &self.device)?)
    }

    /// One cached decode step: `token` at position `offset`, its logits `[V]`.
    pub fn step(&mut self, token: i64, offset: usize) -> Result<Vec<f32>, CandleTransformersError> {
        self.forward(&[token], offset)
    }

    /// "candle-transformers 0.11.1 gemma4 F32 on cpu (gemma4_text, <dir>)".
    pub fn describe(&self) -> String {
        format!("candle-transformers {VERSION} gemma4 F32 on cpu ({}, {})", self.model_type, self.dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Guards: every feature the crate lacks is named; a plain gemma4_text config has none.
    #[test]
    fn unsupported_features_are_named() {
        let plain = json!({"model_type": "gemma4_text", "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0});
        assert!(unsupported(&plain, false).is_empty());
        let e2b = json!({"model_type": "gemma4", "text_config": {"hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20,
            "use_double_wide_mlp": true}});
        let m = unsupported(&e2b, false).join("\n");
        assert!(m.contains("hidden_size_per_layer_input 256") && m.contains("num_kv_shared_layers 20") && m.contains("double-wide"), "{m}");
        let moe = json!({"model_type": "gemma4_text", "enable_moe_block": true, "attention_k_eq_v": true});
        let m = unsupported(&moe, false).join("\n");
        assert!(m.contains("enable_moe_block") && m.contains("attention_k_eq_v"), "{m}");
        let global = json!({"model_type": "gemma4_text", "num_global_key_value_heads": 1});
        assert!(unsupported(&global, false)[0].contains("num_global_key_value_heads 1 without attention_k_eq_v"));
        assert!(unsupported(&json!({"model_type": "gemma4_unified"}), false)[0].contains("gemma4_unified"));
        assert!(unsupported(&json!({"model_type": "gemma4", "text_config": {}}), true).iter().any(|m| m.contains("image prompts")));
        assert!(unsupported(&json!({"model_type": "gemma4_text", "use_bidirectional_attention": "all"}), false)[0].contains("\"all\""));
    }
}
