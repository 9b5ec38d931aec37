//! Candle (CPU, f32) reference of Gemma4Unified that matches HF transformers 5.14.1 to float32
//! rounding.
//!
//! The math of record is `models/gemma4_unified/modeling_gemma4_unified.py`,
//! `modeling_rope_utils.py` and `masking_utils.py`; each file here says which HF code it follows.
//! Entry point: [`Gemma4Unified`].
//!
//! ```no_run
//! use onnx_parity_reference::{BidirectionalScope, Gemma4Unified, ModelInputs};
//! # fn main() -> onnx_parity_reference::Result<()> {
//! let model = Gemma4Unified::load(std::path::Path::new("fixtures/unified-vision/checkpoint"))?;
//! let inputs = ModelInputs { input_ids: vec![2, 10, 11], ..Default::default() };
//! let logits = model.prefill(&inputs, model.hf_forward_scope())?; // [1, 3, vocab]
//! let gen = model.greedy(&inputs, 8, &[1], BidirectionalScope::AllLayers)?;
//! # let _ = (logits, gen); Ok(()) }
//! ```

pub mod config;
pub mod error;
pub mod kv_cache;
pub mod mask;
pub mod model;
pub mod norm;
mod ops;
mod reduce;
pub mod rope;
pub mod text;
pub mod vision;
pub mod weights;

pub use config::{Gemma4UnifiedConfig, Gemma4UnifiedTextConfig, Gemma4UnifiedVisionConfig, LayerType, ModelConfig};
pub use error::{Error, Result};
pub use mask::BidirectionalScope;
pub use model::{Gemma4Unified, Generation, ModelInputs};
