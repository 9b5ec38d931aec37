//! onnx-parity: proves an ONNX export of a Gemma 4 model computes the same function as the model.
//!
//! Data flow (DESIGN §3): a [`case::Case`] names artifacts; both back ends (the candle reference
//! and the ONNX Runtime pipeline) see the same inputs; [`compare`] turns their difference into a
//! verdict per tier.

pub mod atomic;
pub mod case;
pub mod compare;
pub mod dump;
pub mod evaluation;
pub mod golden;
pub mod hexfloat;
pub mod inputs;
pub mod onnx;
pub mod plan;
pub mod regenerate;
pub mod report;
pub mod tiers;
pub mod tolerance;
