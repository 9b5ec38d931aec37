//! The candle reference as a [`Backend`]: a loaded checkpoint and the bidirectional scope it is
//! judged in (the case's `bidirectional:`, else what HF's own forward does for the model type).

use std::path::Path;

use candle_core::Tensor;
use onnx_parity_reference::model::LocalPle;
use onnx_parity_reference::text::ModuleOutputs as ReferenceModules;
use onnx_parity_reference::weights::SharedMatrices;
use onnx_parity_reference::{BidirectionalScope, Gemma4, GenerateOptions};

use super::{Backend, BackendError, GenerationRequest};
use crate::inputs::{Dense, ModelInputs};
use crate::outputs::{Component, LayerOutputs, LocalLayers, ModuleOutputs, Prefill, Run, StreamedLogits};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The matrices reference models of one checkpoint share while a [`MatrixScope`] lives.
static SHARED: std::sync::Mutex<Option<SharedMatrices>> = std::sync::Mutex::new(None);

/// While alive, reference models loaded from `checkpoint` on the checkpoint's own weights (or on
/// one quantized build's overrides) share their f32 matrices ([`SharedMatrices`]): the f64
/// arbiter and the f32 floor loaded after the reference read and transpose none again (E2B
/// width: 2.3 s a load; 12B width: 5 s), a build's models dequantize none again. Dropped, the
/// matrices go with the last model holding them — before ONNX Runtime runs, so they never sit
/// beside its sessions. Scopes of several cases at once only lose sharing, never mix matrices: a
/// model takes them only from its own checkpoint's and build's handle.
#[must_use = "the matrices are shared only while the scope is alive"]
#[derive(Debug)]
pub struct MatrixScope(SharedMatrices);

/// Opens a [`MatrixScope`] for `checkpoint` on its own weights, or on the overrides of the
/// quantized build at `build` (the process's one: a later scope takes its place).
pub fn share_matrices(checkpoint: &Path, build: Option<&Path>) -> MatrixScope {
    let shared = match build {
        None => SharedMatrices::new(checkpoint),
        Some(b) => SharedMatrices::for_build(checkpoint, b),
    };
    *SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(shared.clone());
    MatrixScope(shared)
}

impl Drop for MatrixScope {
    fn drop(&mut self) {
        let mut current = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.as_ref().is_some_and(|s| s.same(&self.0)) {
            *current = None;
        }
    }
}

/// A loaded reference model.
#[derive(Debug)]
pub struct ReferenceBackend {
    model: Gemma4,
    scope: BidirectionalScope,
    /// How many of its weights are a quantized build's, dequantized (0: the checkpoint's).
    dequantized: usize,
    /// All-position logits kept as the final hidden state and streamed when read
    /// ([`ReferenceBackend::stream_logits`]).
    stream_logits: bool,
}

impl ReferenceBackend {
    /// Loads the checkpoint onto the reference's device (`ONNX_PARITY_DEVICE`, default the CPU;
    /// f32 compute, TF32 off); `scope` `None` = HF's forward scope for it.
    pub fn load(checkpoint: &Path, scope: Option<BidirectionalScope>) -> Result<Self, BackendError> {
        Self::load_with_dtype(checkpoint, scope, candle_core::DType::F32)
    }

    /// Like [`ReferenceBackend::load`] computing in `dtype`: F64 (the calibrated rule's arbiter),
    /// F16 / BF16 (the reference at a half-precision candidate's precision), F32.
    pub fn load_with_dtype(checkpoint: &Path, scope: Option<BidirectionalScope>, dtype: candle_core::DType) -> Result<Self, BackendError> {
        Self::load_with_overrides(checkpoint, scope, dtype, None)
    }

    /// Like [`ReferenceBackend::load_with_dtype`], on a quantized build's dequantized weights
    /// where `overrides` has them (the checkpoint's elsewhere).
    pub fn load_with_overrides(
        checkpoint: &Path,
        scope: Option<BidirectionalScope>,
        dtype: candle_core::DType,
        overrides: Option<&onnx_parity_reference::weights::Overrides>,
    ) -> Result<Self, BackendError> {
        let device = crate::gpu::reference_device()?;
        // The weights take matrices from the handle only when it is for their checkpoint and
        // build (`SharedMatrices::is_for`); another case's is ignored.
        let shared = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let mut model = match (overrides, shared) {
            (Some(o), shared) => Gemma4::load_with_overrides_shared(checkpoint, dtype, &device, o.clone(), shared.as_ref())?,
            (None, Some(s)) => Gemma4::load_shared(checkpoint, dtype, &device, &s)?,
            (None, None) => Gemma4::load_on(checkpoint, dtype, &device)?,
        };
        // What the harness keeps of a run is f32 (`Dense<f32>`): an f64 model's layer and module
        // outputs and logits are made f32 as they are made, not held in f64 beside their copies.
        if dtype == candle_core::DType::F64 {
            model.keep_outputs_in(candle_core::DType::F32);
        }
        let scope = scope.unwrap_or_else(|| model.hf_forward_scope());
        Ok(Self { model, scope, dequantized: overrides.map_or(0, |o| o.len()), stream_logits: false })
    }

    /// From now on, a run asked for every position's logits keeps the final normed hidden state
    /// and the head instead (`Prefill::streamed`; `Prefill::logits` is the last position's): the
    /// f64 arbiter's logits are made slice by slice when they are compared.
    pub fn stream_logits(&mut self) {
        self.stream_logits = true;
    }

    /// Each decoder layer at this model's precision fed `oracle`'s residual stream entering it
    /// (its `inputs_embeds` for layer 0, its layer i−1 output for layer i, its per-layer inputs),
    /// with the mask of `inputs`: the local floor of the calibrated rule when `oracle` is the
    /// f64 arbiter's run.
    pub fn local_layers(&self, inputs: &ModelInputs, oracle: &Run, ple: LocalPle) -> Result<LocalLayers, BackendError> {
        let r = |e: candle_core::Error| BackendError::Reference(e.into());
        let LayerOutputs::Tensors(states) = &oracle.prefill.layers else {
            return Err(BackendError::Reference(onnx_parity_reference::Error::Input("the oracle run kept no layer outputs".into())));
        };
        let device = self.model.device();
        let tensor = |d: &Dense<f32>| Tensor::from_slice(&d.data, d.shape.as_slice(), device).map_err(r);
        let Some(embeds) = oracle.prefill.components.get(&Component::InputsEmbeds) else {
            return Err(BackendError::Reference(onnx_parity_reference::Error::Input("the oracle run has no inputs_embeds".into())));
        };
        let mut prepared = self.model.embed(inputs)?;
        prepared.inputs_embeds = tensor(embeds)?;
        if let (Some(ple), Some(own)) = (oracle.prefill.components.get(&Component::PerLayerInputs), &prepared.per_layer_inputs) {
            // [1, S, L·P] → [1, S, L, P], the reference's layout.
            prepared.per_layer_inputs = Some(tensor(ple)?.reshape(own.dims()).map_err(r)?);
        }
        let mut streams = vec![prepared.inputs_embeds.clone()];
        for s in &states[..states.len().saturating_sub(1)] {
            streams.push(tensor(s)?);
        }
        let (layers, modules) = self.model.local_layers(&prepared, self.scope, &streams, ple)?;
        let (layers, modules) = layer_outputs(layers, modules).map_err(r)?;
        Ok(LocalLayers { layers, modules })
    }
}

impl ReferenceBackend {
    /// [`ReferenceBackend::local_layers`] with `hints` active: at a near-tie of an int8
    /// activation step the candidate's step is taken (`onnx_parity_reference::weights::rounding`);
    /// returns the near-ties adopted.
    pub fn local_layers_hinted(
        &self,
        inputs: &ModelInputs,
        oracle: &Run,
        ple: LocalPle,
        hints: onnx_parity_reference::weights::rounding::RoundingHints,
    ) -> Result<(LocalLayers, Vec<onnx_parity_reference::weights::rounding::Adopted>), BackendError> {
        let (local, adopted) =
            onnx_parity_reference::weights::rounding::with_rounding_hints(hints, || self.local_layers(inputs, oracle, ple));
        Ok((local?, adopted))
    }

    /// [`Backend::run`] with `hints` active (a teacher-forced run: they apply where a matmul's
    /// input has the hint's size, the prefill; the decode steps quantize as MLAS does); returns
    /// the near-ties adopted.
    pub fn run_hinted(
        &mut self,
        inputs: &ModelInputs,
        request: &GenerationRequest<'_>,
        hints: onnx_parity_reference::weights::rounding::RoundingHints,
    ) -> Result<(Run, Vec<onnx_parity_reference::weights::rounding::Adopted>), BackendError> {
        let (run, adopted) = onnx_parity_reference::weights::rounding::with_rounding_hints(hints, || self.run(inputs, request));
        Ok((run?, adopted))
    }
}

/// Each layer's output `[S, hidden]` and its modules' as the export's layout, `[1, S, hidden]`;
/// each tensor is dropped once copied, so the copies never sit beside all of them.
fn layer_outputs(layers: Vec<Tensor>, modules: Vec<ReferenceModules>) -> candle_core::Result<(Vec<Dense<f32>>, Vec<ModuleOutputs>)> {
    let d = |t: Tensor| t.unsqueeze(0).and_then(|t| dense(&t));
    let layers = layers.into_iter().map(d).collect::<candle_core::Result<Vec<_>>>()?;
    let modules = modules
        .into_iter()
        .map(|layer| layer.into_iter().map(|(name, t)| Ok((name.to_string(), d(t)?))).collect::<candle_core::Result<ModuleOutputs>>())
        .collect::<candle_core::Result<Vec<_>>>()?;
    Ok((layers, modules))
}

/// A candle tensor as a dense f32 array.
pub fn dense(t: &Tensor) -> candle_core::Result<Dense<f32>> {
    Ok(Dense::new(t.dims().to_vec(), t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1()?))
}

impl Backend for ReferenceBackend {
    fn describe(&self) -> String {
        let device = onnx_parity_reference::DeviceSpec::of(self.model.device());
        let (dtype, model_type) = (self.model.dtype(), self.model.config().model_type());
        let weights = match self.dequantized {
            0 => String::new(),
            n => format!(", {n} weights dequantized from the quantized build"),
        };
        format!("candle reference {dtype:?} on {device} ({model_type}, bidirectional scope {}{weights})", self.scope)
    }

    fn bidirectional_scope(&self) -> Option<BidirectionalScope> {
        Some(self.scope)
    }

    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError> {
        let opts = GenerateOptions {
            scope: self.scope,
            max_new_tokens: request.max_new_tokens,
            eos: request.eos,
            forced: request.forced,
            all_position_logits: request.all_position_logits,
            layer_outputs: request.layer_outputs,
            final_hidden: self.stream_logits,
        };
        let onnx_parity_reference::Run { prepared, logits, layers, modules, step_inputs, generation, final_hidden } =
            self.model.generate(inputs, &opts)?;
        let d = |t: &Tensor| dense(t).map_err(onnx_parity_reference::Error::from);
        let streamed = final_hidden.map(|hidden| Arc::new(StreamedLogits::from_head(hidden, self.model.logits_head())));
        // Each tensor copied, then dropped: never two copies of the all-position logits (or of
        // the layers).
        let logits = {
            let all = logits;
            d(&all)?
        };
        let mut prefill = Prefill { logits, streamed, ..Default::default() };
        let p = &prepared;
        if let Some(f) = &p.image_features {
            prefill.components.insert(Component::ImageFeatures, d(f)?);
        }
        prefill.components.insert(Component::InputsEmbeds, d(&p.inputs_embeds)?);
        if let Some(ple) = &p.per_layer_inputs {
            // [1, S, L, P] → [1, S, L·P], the layout the exports' embedding model emits.
            let (b, s, l, w) = ple.dims4().map_err(onnx_parity_reference::Error::from)?;
            prefill
                .components
                .insert(Component::PerLayerInputs, d(&ple.reshape((b, s, l * w)).map_err(onnx_parity_reference::Error::from)?)?);
        }
        if request.layer_outputs {
            let (layers, modules) = layer_outputs(layers, modules).map_err(onnx_parity_reference::Error::from)?;
            prefill.layers = LayerOutputs::Tensors(layers);
            prefill.modules = modules;
        }
        let mut step = BTreeMap::new();
        if let Some((e, p)) = &step_inputs {
            let e = e.unsqueeze(0).map_err(onnx_parity_reference::Error::from)?;
            step.insert(Component::InputsEmbeds, d(&e)?);
            if let Some(p) = p {
                // [1, L, P] → [1, 1, L·P].
                let (s, l, w) = p.dims3().map_err(onnx_parity_reference::Error::from)?;
                step.insert(Component::PerLayerInputs, d(&p.reshape((1, s, l * w)).map_err(onnx_parity_reference::Error::from)?)?);
            }
        }
        let run = Run { prefill, generation, step_inputs: step };
        run.require_finite("the candle reference")?;
        Ok(run)
    }
}
