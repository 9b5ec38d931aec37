//! Building blocks shared by every Gemma 4 variant: linear layers, norms, RoPE, fused in-place
//! kernels and torch-order reductions. Each exists once; the text decoder, the vision tower and
//! the unified embedder all use these.

pub mod linear;
pub mod norm;
pub(crate) mod ops;
pub(crate) mod reduce;
pub mod rope;
pub mod upcast;
