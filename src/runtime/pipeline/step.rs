//! What one decoder run returns, read out of the session's outputs once it ran: the layers'
//! outputs, the stream entering layer 0 and the quantized matmuls' inputs when captured, and the
//! presents — each checked against what the next step feeds back (a shared buffer must come back
//! as the very buffer bound as its past).

use std::collections::BTreeMap;

use ort::session::SessionOutputs;
use ort::value::DynValue;

use super::kv::{CacheLayout, KvSlot};
use super::values::{check_value, data_address, to_dense_f32};
use super::PipelineError;
use crate::inputs::Dense;
use crate::onnx::layers::LayerBoundary;
use crate::onnx::shapes::Axis;

/// What one decoder call returned.
pub(super) struct DecoderStep {
    pub logits: Dense<f32>,
    pub present: Vec<DynValue>,
    /// Each layer's output, when captured.
    pub layers: Option<Vec<Dense<f32>>>,
    /// The stream entering layer 0, when captured with the layers and the decoder makes it.
    pub embeddings: Option<Dense<f32>>,
    /// The int8-quantized matmuls' inputs, captured with the layers (`super::activations`).
    pub activations: BTreeMap<String, Dense<f32>>,
}

/// The tensors a run captured beside its logits.
pub(super) struct Captures {
    pub layers: Option<Vec<Dense<f32>>>,
    pub embeddings: Option<Dense<f32>>,
    pub activations: BTreeMap<String, Dense<f32>>,
}

/// The captures of `out` when the run captured its layers (`boundaries`: the instrumented
/// decoder's layer outputs; `None` when not captured): each layer's output, the stream entering
/// layer 0 (`embeddings_output`) and the `activations` named.
pub(super) fn captures(
    out: &mut SessionOutputs<'_>,
    boundaries: Option<&[LayerBoundary]>,
    embeddings_output: Option<&str>,
    activations: &[(String, i32)],
    role: &'static str,
) -> Result<Captures, PipelineError> {
    let contract = |message: String| PipelineError::Contract { role, message };
    let Some(boundaries) = boundaries else { return Ok(Captures { layers: None, embeddings: None, activations: BTreeMap::new() }) };
    let mut layers = Vec::with_capacity(boundaries.len());
    for b in boundaries {
        let v = out.get(b.tensor.as_str()).ok_or_else(|| contract(format!("the instrumented decoder has no output `{}`", b.tensor)))?;
        layers.push(to_dense_f32(v, role, &b.tensor)?);
    }
    let embeddings = match embeddings_output {
        Some(name) => {
            // Read, not moved: it may also be a quantized matmul's input, taken below.
            let v = out.get(name).ok_or_else(|| contract(format!("the instrumented decoder has no output `{name}`")))?;
            Some(to_dense_f32(v, role, name)?)
        }
        None => None,
    };
    let activations = super::activations::take(out, activations, role)?;
    Ok(Captures { layers: Some(layers), embeddings, activations })
}

/// The presents of `out` for `kv`'s slots, in the order their pasts are fed, each checked: the
/// declared `[1, heads, *, head_dim]`, the same `[1, capacity, heads·head_dim]` buffer, or the
/// shared buffer written in place (the very one in `cache`).
pub(super) fn presents(
    out: &mut SessionOutputs<'_>,
    kv: &[KvSlot],
    cache: &[DynValue],
    role: &'static str,
) -> Result<Vec<DynValue>, PipelineError> {
    let contract = |message: String| PipelineError::Contract { role, message };
    let mut present = Vec::with_capacity(kv.len() * 2);
    for slot in kv {
        for (name, [a, b]) in [(&slot.present_key, slot.key_dims), (&slot.present_value, slot.value_dims)] {
            let value = out.remove(name.as_str()).ok_or_else(|| contract(format!("no output `{name}`")))?;
            match slot.layout {
                CacheLayout::Dynamic => {
                    let axes =
                        [Axis::Is("batch", 1), Axis::Is("kv_heads", a as usize), Axis::Any("sequence"), Axis::Is("head_dim", b as usize)];
                    check_value(role, name, &axes, &value)?;
                }
                CacheLayout::Static { .. } => {
                    let axes = [Axis::Is("batch", 1), Axis::Is("capacity", a as usize), Axis::Is("kv_heads · head_dim", b as usize)];
                    check_value(role, name, &axes, &value)?;
                }
                CacheLayout::Shared { capacity } => {
                    let axes = [
                        Axis::Is("batch", 1),
                        Axis::Is("kv_heads", a as usize),
                        Axis::Is("capacity", capacity),
                        Axis::Is("head_dim", b as usize),
                    ];
                    check_value(role, name, &axes, &value)?;
                    // Written in place: the very buffer bound as the past.
                    let bound = cache.get(present.len()).and_then(data_address);
                    if bound.is_none() || bound != data_address(&value) {
                        return Err(contract(format!("`{name}` was not written into the buffer bound as its past")));
                    }
                }
            }
            present.push(value);
        }
    }
    Ok(present)
}
