//! onnx-parity: proves an ONNX export of a Gemma 4 model computes the same function as the model.
//!
//! Data flow: a [`case::Case`] names artifacts; both back ends (the candle reference and the ONNX
//! Runtime pipeline, behind one [`backend::Backend`] interface) see the same inputs; [`compare`]
//! turns their difference into a verdict per tier.

pub mod artifacts;
pub mod atomic;
pub mod backend;
pub mod case;
pub mod compare;
pub mod metric_keys;
pub mod metrics;

pub mod evaluation;
pub mod expectation;
pub mod files;
pub mod golden;
pub mod gpu;
pub mod hexfloat;
pub mod hub;
pub mod inputs;
pub mod logits;
pub mod memory;
pub mod names;
pub mod onnx;
pub mod outputs;
pub mod plan;
pub mod python_json;
pub mod regenerate;
pub mod report;
pub mod tensor_file;
pub mod tf32;
pub mod tiers;
pub mod tolerance;
