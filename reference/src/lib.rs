//! Candle (CPU, f32) reference of Gemma 4 — both families: **Gemma4** (`gemma4`, `gemma4_text`:
//! per-layer embeddings, KV sharing, MoE, the ViT vision tower) and **Gemma4Unified**
//! (`gemma4_unified`, `gemma4_unified_text`: the encoder-free vision embedder) — that matches HF
//! transformers 5.14.1 to float32 rounding.
//!
//! The math of record is `models/gemma4/modeling_gemma4.py`,
//! `models/gemma4_unified/modeling_gemma4_unified.py`, `modeling_rope_utils.py` and
//! `masking_utils.py`; each file here says which HF code it follows. Entry point: [`Gemma4`].
//!
//! candle-transformers' own `gemma4` module (0.11.1) cannot serve as the reference, as measured by
//! the harness (`tests/candle_transformers.rs`): its RMSNorm scales by `1 + w`, its attention by
//! 1/√d (Gemma 4 uses 1.0 with normed q/k), it has no `layer_scalar`, its prefill sliding mask
//! admits W+1 keys, and it has no per-layer embeddings, KV sharing, MoE or `attention_k_eq_v`.
//!
//! ```no_run
//! use onnx_parity_reference::{BidirectionalScope, Gemma4, ModelInputs};
//! # fn main() -> onnx_parity_reference::Result<()> {
//! let model = Gemma4::load(std::path::Path::new("fixtures/unified-vision/checkpoint"))?;
//! let inputs = ModelInputs::from_ids(vec![2, 10, 11]);
//! let logits = model.prefill(&inputs, model.hf_forward_scope())?; // [1, 3, vocab]
//! let gen = model.greedy(&inputs, 8, &[1], BidirectionalScope::AllLayers)?;
//! # let _ = (logits, gen); Ok(()) }
//! ```

pub mod audio_manifest;
pub mod config;
pub mod device;
pub mod error;
pub mod io;
pub mod kv_cache;
pub mod mask;
pub mod model;
pub mod nn;
pub mod text;
pub mod vision;
pub mod weights;

pub use config::{Family, LayerType, ModelConfig, ModelType, TextConfig, VisionConfig};
pub use device::DeviceSpec;
pub use error::{Error, Result};
pub use io::{Dense, GeneratedTokens, ModelInputs};
pub use mask::BidirectionalScope;
pub use model::{Gemma4, GenerateOptions, Prepared, Run};
