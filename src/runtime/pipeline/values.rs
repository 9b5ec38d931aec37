//! Values crossing the ORT boundary: floats in the export's activation type and back to f32,
//! shape checks of returned values, and where a value's buffer lives.

use half::{bf16, f16};
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};

use super::PipelineError;
use crate::inputs::Dense;
use crate::onnx::shapes::{self, Axis, ShapeError, Source};

/// Where a tensor's data lives (`None` for a non-tensor): two values share a buffer when equal.
pub(super) fn data_address(v: &DynValue) -> Option<usize> {
    v.view().downcast::<ort::value::DynTensorValueType>().ok().map(|t| t.data_ptr() as usize)
}

/// [`shapes::check_returned`] of a value a session returned.
pub(super) fn check_value(role: &'static str, name: &str, axes: &[Axis], value: &DynValue) -> Result<(), ShapeError> {
    let shape = declared_shape(Some(value.dtype())).unwrap_or_default();
    shapes::check(role, "output", name, axes, &shape, Source::Returned)
}

/// A float tensor in the export's activation type.
pub(super) fn float_value(float: TensorElementType, shape: &[usize], data: &[f32]) -> Result<DynValue, ort::Error> {
    let shape = shape.to_vec();
    Ok(match float {
        TensorElementType::Float16 => Tensor::from_array((shape, data.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()))?.into_dyn(),
        TensorElementType::Bfloat16 => Tensor::from_array((shape, data.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>()))?.into_dyn(),
        _ => Tensor::from_array((shape, data.to_vec()))?.into_dyn(),
    })
}

/// Reads a float32, float16 or bfloat16 output `name` as f32 (the halves widen exactly).
pub(super) fn to_dense_f32(v: &DynValue, role: &'static str, name: &str) -> Result<Dense<f32>, PipelineError> {
    let dims = |shape: &[i64]| shape.iter().map(|&d| d as usize).collect::<Vec<_>>();
    if let Ok((shape, data)) = v.try_extract_tensor::<f32>() {
        return Ok(Dense::new(dims(shape), data.to_vec()));
    }
    if let Ok((shape, data)) = v.try_extract_tensor::<f16>() {
        return Ok(Dense::new(dims(shape), data.iter().map(|x| x.to_f32()).collect()));
    }
    let (shape, data) = v.try_extract_tensor::<bf16>().map_err(|e| PipelineError::Contract {
        role,
        message: format!("output `{name}`: expected a float32, float16 or bfloat16 tensor ({e})"),
    })?;
    Ok(Dense::new(dims(shape), data.iter().map(|x| x.to_f32()).collect()))
}

/// The shape a graph declares for a tensor (-1 for a dynamic axis; empty when it states none);
/// `None` for a non-tensor.
pub(super) fn declared_shape(ty: Option<&ValueType>) -> Option<Vec<i64>> {
    match ty? {
        ValueType::Tensor { shape, .. } => Some(shape.to_vec()),
        _ => None,
    }
}
