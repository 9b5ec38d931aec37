//! A tensor fed to a session, owned and typed as the graph declares it, so the same value can be
//! given to ONNX Runtime and written as an ONNX `TensorProto` (a reproducer's
//! `test_data_set_0/input_N.pb`, in ONNX's backend-test layout).

use half::{bf16, f16};
use ort::value::{DynValue, Tensor};
use prost::Message;

/// The element data of a [`FeedTensor`].
#[derive(Debug, Clone, PartialEq)]
pub enum FeedData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
}

/// The float type an export computes its activations in (what its float inputs are fed as).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FloatType {
    #[default]
    F32,
    F16,
    BF16,
}

impl FloatType {
    /// From an ONNX element type name (`float32`, `float16`, `bfloat16`); `None` for another.
    pub fn from_name(name: &str) -> Option<FloatType> {
        match name {
            "float32" => Some(FloatType::F32),
            "float16" => Some(FloatType::F16),
            "bfloat16" => Some(FloatType::BF16),
            _ => None,
        }
    }

    /// The ONNX element type name.
    pub fn name(self) -> &'static str {
        match self {
            FloatType::F32 => "float32",
            FloatType::F16 => "float16",
            FloatType::BF16 => "bfloat16",
        }
    }
}

/// An owned tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedTensor {
    pub shape: Vec<usize>,
    pub data: FeedData,
}

/// Why a `TensorProto` cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum TensorProtoError {
    #[error("not a TensorProto: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("tensor `{name}`: element type {data_type} is not float32, float16, bfloat16, int64 or int32")]
    Type { name: String, data_type: i32 },
    #[error("tensor `{name}`: {bytes} bytes of raw_data for shape {shape:?}")]
    Size { name: String, bytes: usize, shape: Vec<usize> },
}

/// The subset of `TensorProto` written here: dims, type, name and the little-endian payload.
#[derive(Clone, PartialEq, prost::Message)]
struct RawTensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
}

impl FeedTensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Self {
        FeedTensor { shape, data: FeedData::F32(data) }
    }

    /// f32 values in the export's activation type (f16, bf16: rounded to nearest).
    pub fn float(shape: Vec<usize>, data: &[f32], ty: FloatType) -> Self {
        match ty {
            FloatType::F32 => FeedTensor::f32(shape, data.to_vec()),
            FloatType::F16 => FeedTensor { shape, data: FeedData::F16(data.iter().map(|&x| f16::from_f32(x)).collect()) },
            FloatType::BF16 => FeedTensor { shape, data: FeedData::BF16(data.iter().map(|&x| bf16::from_f32(x)).collect()) },
        }
    }

    /// An ORT value holding a copy.
    pub fn to_value(&self) -> Result<DynValue, ort::Error> {
        let shape = self.shape.clone();
        Ok(match &self.data {
            FeedData::F32(d) => Tensor::from_array((shape, d.clone()))?.into_dyn(),
            FeedData::F16(d) => Tensor::from_array((shape, d.clone()))?.into_dyn(),
            FeedData::BF16(d) => Tensor::from_array((shape, d.clone()))?.into_dyn(),
            FeedData::I64(d) => Tensor::from_array((shape, d.clone()))?.into_dyn(),
            FeedData::I32(d) => Tensor::from_array((shape, d.clone()))?.into_dyn(),
        })
    }

    /// The values as f32 (exact for f16; ints converted).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            FeedData::F32(d) => d.clone(),
            FeedData::F16(d) => d.iter().map(|x| x.to_f32()).collect(),
            FeedData::BF16(d) => d.iter().map(|x| x.to_f32()).collect(),
            FeedData::I64(d) => d.iter().map(|&x| x as f32).collect(),
            FeedData::I32(d) => d.iter().map(|&x| x as f32).collect(),
        }
    }

    /// A serialised ONNX `TensorProto` named `name` (payload in `raw_data`).
    pub fn tensor_proto(&self, name: &str) -> Vec<u8> {
        let (data_type, raw_data): (i32, Vec<u8>) = match &self.data {
            FeedData::F32(d) => (1, d.iter().flat_map(|x| x.to_le_bytes()).collect()),
            FeedData::F16(d) => (10, d.iter().flat_map(|x| x.to_le_bytes()).collect()),
            FeedData::BF16(d) => (16, d.iter().flat_map(|x| x.to_le_bytes()).collect()),
            FeedData::I64(d) => (7, d.iter().flat_map(|x| x.to_le_bytes()).collect()),
            FeedData::I32(d) => (6, d.iter().flat_map(|x| x.to_le_bytes()).collect()),
        };
        RawTensorProto { dims: self.shape.iter().map(|&d| d as i64).collect(), data_type, name: name.into(), raw_data }.encode_to_vec()
    }

    /// Reads what [`FeedTensor::tensor_proto`] wrote: the name and the tensor.
    pub fn from_tensor_proto(bytes: &[u8]) -> Result<(String, FeedTensor), TensorProtoError> {
        let t = RawTensorProto::decode(bytes)?;
        let shape: Vec<usize> = t.dims.iter().map(|&d| d.max(0) as usize).collect();
        let n: usize = shape.iter().product();
        let width = match t.data_type {
            1 | 6 => 4,
            10 | 16 => 2,
            7 => 8,
            data_type => return Err(TensorProtoError::Type { name: t.name, data_type }),
        };
        if t.raw_data.len() != n * width {
            return Err(TensorProtoError::Size { name: t.name, bytes: t.raw_data.len(), shape });
        }
        let chunks = t.raw_data.chunks_exact(width);
        let data = match t.data_type {
            1 => FeedData::F32(chunks.map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
            10 => FeedData::F16(chunks.map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
            16 => FeedData::BF16(chunks.map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
            7 => FeedData::I64(chunks.map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()),
            _ => FeedData::I32(chunks.map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        };
        Ok((t.name, FeedTensor { shape, data }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the TensorProto round trip for every element type, and a payload that does not
    /// fit its shape being refused.
    #[test]
    fn tensor_proto_round_trip() {
        for t in [
            FeedTensor::f32(vec![2, 1], vec![1.5, -2.0]),
            FeedTensor::float(vec![1, 2], &[0.25, 3.0], FloatType::F16),
            FeedTensor::float(vec![2], &[0.1, -3.0], FloatType::BF16),
            FeedTensor { shape: vec![3], data: FeedData::I64(vec![1, -2, 3]) },
            FeedTensor { shape: vec![1, 0, 4], data: FeedData::I32(vec![]) },
        ] {
            let (name, back) = FeedTensor::from_tensor_proto(&t.tensor_proto("x")).unwrap();
            assert_eq!((name.as_str(), &back), ("x", &t));
        }
        let bad = RawTensorProto { dims: vec![2], data_type: 1, name: "y".into(), raw_data: vec![0; 4] }.encode_to_vec();
        assert!(FeedTensor::from_tensor_proto(&bad).unwrap_err().to_string().contains("tensor `y`: 4 bytes"));
    }
}
