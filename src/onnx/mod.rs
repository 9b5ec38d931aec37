//! The ONNX side: runtime provisioning, export package layout, graph inspection and the
//! inference pipeline.

pub mod contract;
pub mod cut;
pub mod feed;
pub mod genai_config;
pub mod graph;
pub mod layers;
pub mod package;
pub mod pipeline;
pub mod placement;
pub mod proto;
pub mod protocol;
pub mod provider;
pub mod quantized;
pub mod runtime;
pub mod session;
pub mod shapes;
pub mod wheel;
pub mod wire;
