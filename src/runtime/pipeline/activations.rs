//! The inputs (`A`) of a quantized build's matmuls that are rounded — by the graph (a dynamic or
//! static build's quantization of them: the float tensor before it) or by the kernel on the
//! session's EP (MLAS at `accuracy_level` 4: [`MatMulNBitsModel`]) — exposed as extra outputs of a
//! decoder graph so a run returns them: the reference's floors then take the candidate's int8 step where
//! the two lie within rounding of a step's boundary (`onnx_parity_reference::weights::rounding`).
//! A float build, or an EP whose kernel keeps the activations in float, exposes none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ort::session::SessionOutputs;

use super::values::to_dense_f32;
use super::PipelineError;
use crate::eps::RunEp;
use crate::inputs::Dense;
use crate::onnx::quantized::QuantizedBuild;
use crate::runtime::kernels::MatMulNBitsModel;

/// The activation tensors of the `role` sub-model's quantized matmuls in the package at `root`
/// that `model` (that sub-model's graph, read from `path`) computes and `ep`'s kernel quantizes to
/// int8, each with its ONNX element type (MatMulNBits' `A` is of its scales' type); sorted, none
/// for a float build.
pub(super) fn quantized(root: &Path, role: &str, ep: RunEp, path: &Path, model: &[u8]) -> Vec<(String, i32)> {
    let Ok(Some(build)) = QuantizedBuild::read(root) else { return Vec::new() };
    let kernel = MatMulNBitsModel::of(ep);
    let mut out: Vec<(String, i32)> = build
        .weights
        .iter()
        .filter(|w| w.submodel == role && (w.rounding.any() || (!w.op.is_table() && kernel.quantizes_activations(w.accuracy_level))))
        .filter_map(|w| Some((w.activation.clone()?, if w.scale_type == "float16" { 10 } else { 1 })))
        .collect();
    out.sort();
    out.dedup();
    computed_by(out, path, model)
}

/// Those of `names` that `model` (read from `path`: a decoder, or a cut of it) computes.
pub(super) fn computed_by(names: Vec<(String, i32)>, path: &Path, model: &[u8]) -> Vec<(String, i32)> {
    let Ok(graph) = crate::onnx::graph::GraphSummary::from_bytes(model, path) else { return Vec::new() };
    let computed: BTreeSet<&str> = graph.nodes.iter().flat_map(|n| n.outputs.iter().map(String::as_str)).collect();
    names.into_iter().filter(|(a, _)| computed.contains(a.as_str())).collect()
}

/// `model` with `names` (and their element types) as extra graph outputs.
pub(super) fn expose(model: &[u8], names: &[(String, i32)]) -> Result<Vec<u8>, crate::onnx::wire::WireError> {
    crate::onnx::layers::with_extra_outputs(model, names)
}

/// Moves the values of `names` out of a run's outputs, as f32.
pub(super) fn take(
    out: &mut SessionOutputs<'_>,
    names: &[(String, i32)],
    role: &'static str,
) -> Result<BTreeMap<String, Dense<f32>>, PipelineError> {
    let mut taken = BTreeMap::new();
    for (name, _) in names {
        let v = out.remove(name.as_str()).ok_or_else(|| PipelineError::Contract {
            role,
            message: format!("the decoder has no output `{name}` (a quantized matmul's input)"),
        })?;
        taken.insert(name.clone(), to_dense_f32(&v, role, name)?);
    }
    Ok(taken)
}
