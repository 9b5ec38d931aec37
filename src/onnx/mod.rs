//! The ONNX format as exports use it: package layout, graph inspection, the protocol a graph
//! declares, the contract a config implies, quantized weights, `genai_config.json`, and the
//! graph edits (instrumented layers, cuts). Running graphs is `crate::runtime`'s.

pub mod contract;
pub mod cut;
pub mod feed;
pub mod genai_config;
pub mod graph;
pub mod layers;
pub mod package;
pub mod proto;
pub mod protocol;
pub mod quantized;
pub mod shapes;
pub mod wire;
