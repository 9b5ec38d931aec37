//! The pinned releases: what is judged and what it runs on.

/// The onnxruntime-genai release judged.
pub const GENAI_VERSION: &str = "0.18.0";
/// The ONNX Runtime release that onnxruntime-genai 0.18.0's wheel requires.
pub const GENAI_ORT_VERSION: &str = "1.32.0";
