//! Named f32 / i64 tensors written as one safetensors file: what `onnx-parity inputs` and
//! `onnx-parity logits` write, so both lay tensors out the same way (little-endian, row-major,
//! the names sorted by the safetensors writer).

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensorError;

/// Why the tensors could not be serialised.
#[derive(Debug, thiserror::Error)]
pub enum TensorFileError {
    /// A tensor whose shape does not fit its data.
    #[error("{name}: {source}")]
    Tensor {
        name: String,
        #[source]
        source: SafeTensorError,
    },
    #[error(transparent)]
    Serialize(SafeTensorError),
}

/// Tensors to serialise, in the order added.
#[derive(Debug, Default)]
pub struct TensorFile {
    tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
}

impl TensorFile {
    pub fn new() -> Self {
        TensorFile::default()
    }

    pub fn f32(mut self, name: &str, shape: Vec<usize>, data: &[f32]) -> Self {
        self.tensors.push((name.into(), Dtype::F32, shape, data.iter().flat_map(|x| x.to_le_bytes()).collect()));
        self
    }

    pub fn i64(mut self, name: &str, shape: Vec<usize>, data: &[i64]) -> Self {
        self.tensors.push((name.into(), Dtype::I64, shape, data.iter().flat_map(|x| x.to_le_bytes()).collect()));
        self
    }

    /// The safetensors bytes; an error names the tensor whose shape does not fit its data.
    pub fn to_bytes(&self) -> Result<Vec<u8>, TensorFileError> {
        let views = self
            .tensors
            .iter()
            .map(|(name, dt, shape, bytes)| {
                TensorView::new(*dt, shape.clone(), bytes)
                    .map(|v| (name.clone(), v))
                    .map_err(|source| TensorFileError::Tensor { name: name.clone(), source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::serialize(views, None).map_err(TensorFileError::Serialize)
    }
}
