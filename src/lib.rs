//! onnx-parity: proves an ONNX export of a Gemma 4 model computes the same function as the model.
//!
//! Data flow (docs/design.md §3): a [`case::Case`] names artifacts ([`artifacts::Artifacts`]);
//! every implementation of the model (the candle reference, then the candidates such as the
//! export in ONNX Runtime, each behind [`backend::Backend`], listed in
//! [`evaluation::implementations`]) sees the same [`inputs::ModelInputs`]; each tier ([`tiers`])
//! turns the candidates' difference from the reference into a verdict with numbers.

pub mod artifacts;
pub mod atomic;
pub mod backend;
pub mod candle_gemma4;
pub mod case;
pub mod compare;
pub mod context;
pub mod driver;
pub mod eps;
pub mod metrics;
pub mod tier_metrics;

pub mod evaluation;
pub mod expectation;
pub mod files;
pub mod golden;
pub mod gpu;
pub mod hexfloat;
pub mod html;
pub mod hub;
pub mod inputs;
pub mod level;
pub mod logging;
pub mod logits;
pub mod memory;
pub mod names;
pub mod onnx;
pub mod ort_genai;
pub mod outputs;
pub mod plan;
pub mod python_json;
pub mod reference_cache;
pub mod regenerate;
pub mod report;
pub mod repro;
pub mod runtime;
pub mod tensor_file;
pub mod tf32;
pub mod tiers;
pub mod tolerance;
pub mod variant_matrix;
pub mod verdict_diff;
