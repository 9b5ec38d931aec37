//! The slice of ONNX's protobuf messages a quantized build's payloads are read from: nodes with
//! their attributes (an `INT`, or a `Constant`'s tensor) and initializers with their bytes or
//! external-data location. The L1 reader ([`crate::onnx::proto`]) skips payloads; this one keeps
//! them.

use crate::onnx::proto::StringStringEntryProto;

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadModel {
    #[prost(message, optional, tag = "7")]
    pub(super) graph: Option<PayloadGraphProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadGraphProto {
    #[prost(message, repeated, tag = "1")]
    pub(super) node: Vec<PayloadNode>,
    #[prost(message, repeated, tag = "5")]
    pub(super) initializer: Vec<PayloadTensor>,
    #[prost(message, repeated, tag = "12")]
    pub(super) output: Vec<PayloadValueInfo>,
}

/// A graph output: its name only.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadValueInfo {
    #[prost(string, tag = "1")]
    pub(super) name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadNode {
    #[prost(string, repeated, tag = "1")]
    pub(super) input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub(super) output: Vec<String>,
    #[prost(string, tag = "3")]
    pub(super) name: String,
    #[prost(string, tag = "4")]
    pub(super) op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub(super) attribute: Vec<PayloadAttribute>,
    #[prost(string, tag = "7")]
    pub(super) domain: String,
}

/// An attribute: an `INT`'s value, or a `Constant` node's tensor.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadAttribute {
    #[prost(string, tag = "1")]
    pub(super) name: String,
    #[prost(int64, tag = "3")]
    pub(super) i: i64,
    #[prost(message, optional, tag = "5")]
    pub(super) t: Option<PayloadTensor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PayloadTensor {
    #[prost(int64, repeated, tag = "1")]
    pub(super) dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub(super) data_type: i32,
    #[prost(float, repeated, tag = "4")]
    pub(super) float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    pub(super) int32_data: Vec<i32>,
    #[prost(int64, repeated, tag = "7")]
    pub(super) int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub(super) name: String,
    #[prost(bytes = "vec", tag = "9")]
    pub(super) raw_data: Vec<u8>,
    #[prost(message, repeated, tag = "13")]
    pub(super) external_data: Vec<StringStringEntryProto>,
    #[prost(int32, tag = "14")]
    pub(super) data_location: i32,
}
