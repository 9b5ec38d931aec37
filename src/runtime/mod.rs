//! ONNX Runtime, as the harness runs exports on it: provisioning (the library from its wheel,
//! plugin EPs, `fetch --runtimes`), the execution providers (how each is provided), sessions (one
//! builder, a trial's EP passed in), node placement, what kernels refuse per EP, and the
//! inference pipeline. `crate::onnx` holds the ONNX format alone.

pub mod ep;
pub mod kernels;
pub mod pipeline;
pub mod placement;
pub mod provision;
pub mod session;
pub mod wheel;
