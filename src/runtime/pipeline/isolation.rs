//! The export's sub-models judged on the reference's own inputs, so a divergence is blamed on the
//! component that makes it rather than on everything downstream of it: the embedding model on
//! the reference's image features, the decoder on the reference's `inputs_embeds` (and
//! `per_layer_inputs`) at prefill and for one cached decode step, and every decoder layer fed the
//! reference's residual stream entering it ([`crate::onnx::cut`]).
//!
//! The local layer runs need the cut graph in a session of its own; the decoder session is
//! released before it opens, so one copy of the decoder's weights is in memory at a time (a
//! decoder small against the memory is cut and opened beside the runs instead:
//! [`OnnxPipeline::prepare_local_layers`]). That makes [`OnnxPipeline::isolate`] the pipeline's
//! last call.

use std::collections::BTreeMap;

use ort::value::DynValue;

use super::{activations, float_value, to_dense_f32, CacheLayout, Embedded, OnnxPipeline, PipelineError, EMBEDDING};
use crate::inputs::ModelInputs;
use crate::onnx::cut::{self, CutModel, CutUnavailable};
use crate::onnx::feed::{FeedData, FeedTensor, FloatType};
use crate::onnx::proto::elem_type_name;
use crate::outputs::{Component, Dense, Isolated, LayerOutputs, ModuleOutputs, Run};
use crate::runtime::pipeline::local_cut::{cut_dir, cut_source, decoder_cut, local_cut, CutFailure};
use crate::runtime::session::{self, SessionError};

impl OnnxPipeline {
    /// Runs each sub-model on the reference's inputs for it (see the module doc). `reference`
    /// is the reference's run of the same `inputs`, with its layer outputs and decode-step
    /// inputs; `own`, this pipeline's teacher-forced run of the same inputs, stands in for the
    /// isolated decoder run of a text-only package (the same ids, the same graph). Releases the
    /// decoder session: the pipeline decodes no more after this.
    pub fn isolate(&mut self, inputs: &ModelInputs, reference: &Run, own: Option<&Run>) -> Result<Isolated, PipelineError> {
        let role = self.decoder_role;
        let contract = |message: String| PipelineError::Contract { role, message };
        let ids = &inputs.input_ids;
        let s = ids.len();
        let mut iso = Isolated { text_only: self.embedding.is_none(), ..Default::default() };

        let features = match (&inputs.pixel_values, &inputs.image_position_ids) {
            (Some(px), Some(pos)) => {
                iso.image_features = Some(self.image_features(px, pos)?);
                let r = reference
                    .prefill
                    .components
                    .get(&Component::ImageFeatures)
                    .ok_or_else(|| contract("the reference returned no image_features for a prompt with images".into()))?;
                Some(float_value(self.float, &r.shape, &r.data).map_err(|source| PipelineError::Run { role: EMBEDDING, source })?)
            }
            _ => None,
        };
        if self.embedding.is_some() {
            for (name, v) in &self.embed(ids, features)? {
                if let Some(c) = Component::from_name(name) {
                    iso.embedding.insert(c, to_dense_f32(v, EMBEDDING, name)?);
                }
            }
        }

        match own.filter(|o| iso.text_only && matches!(o.prefill.layers, LayerOutputs::Tensors(_))) {
            // A text-only package's isolated decoder sees the ids, as its own forced run did:
            // that run (teacher-forced with the reference's tokens) is the isolated one, and its
            // logits are judged where they are (`logits: None`).
            Some(own) => {
                iso.layers = own.prefill.layers.clone();
                iso.step_logits =
                    (reference.generation.step_logits.len() > 1).then(|| own.generation.step_logits.get(1).cloned()).flatten();
            }
            None => {
                let embedded = self.reference_embedded(&reference.prefill.components)?;
                let cache = self.empty_cache()?;
                let prefill = self.run_decoder(ids, embedded, s, cache, true)?;
                iso.logits = Some(prefill.logits);
                iso.activations = prefill.activations;
                iso.layers = match prefill.layers {
                    Some(layers) => LayerOutputs::Tensors(layers),
                    None => LayerOutputs::Unavailable(
                        self.layer_outputs_unavailable().map_or_else(|| "not exposed".to_string(), |e| e.to_string()),
                    ),
                };
                if let (Some(&token), true) = (reference.generation.tokens.first(), reference.generation.step_logits.len() > 1) {
                    let embedded = self.reference_embedded(&reference.step_inputs)?;
                    let step = self.run_decoder(&[token], embedded, s + 1, prefill.present, false)?;
                    iso.step_logits = Some(step.logits.data);
                }
            }
        }
        self.local_layers(ids, reference, &mut iso)?;
        Ok(iso)
    }

    /// The decoder's embedding-model inputs (`inputs_embeds`, `per_layer_inputs`) from the
    /// reference's `components`.
    fn reference_embedded(&self, components: &BTreeMap<Component, Dense<f32>>) -> Result<Embedded, PipelineError> {
        let mut out = Embedded::new();
        for name in self.routed() {
            let t = Component::from_name(name).and_then(|c| components.get(&c)).ok_or_else(|| PipelineError::Contract {
                role: self.decoder_role,
                message: format!("input `{name}`: the reference has no such tensor to feed it in isolation"),
            })?;
            let v = float_value(self.float, &t.shape, &t.data).map_err(|source| PipelineError::Run { role: self.decoder_role, source })?;
            out.insert(name.clone(), v);
        }
        Ok(out)
    }

    /// Every layer fed the reference's stream: the decoder session is released, the cut opened
    /// in its place (or taken from [`OnnxPipeline::prepare_local_layers`]), run once at prefill
    /// and dropped. A decoder that cannot be cut, or whose cut ORT refuses, leaves the local
    /// outputs unavailable with the reason.
    fn local_layers(&mut self, ids: &[i64], reference: &Run, iso: &mut Isolated) -> Result<(), PipelineError> {
        if !matches!(reference.prefill.layers, LayerOutputs::Tensors(_)) {
            iso.local = LayerOutputs::Unavailable("the reference returned no layer outputs".into());
            return Ok(());
        }
        let role = self.decoder_role;
        let t = std::time::Instant::now();
        let ahead = match self.cut_ahead.take().map(std::thread::JoinHandle::join) {
            Some(Ok(ready)) => Some(ready),
            Some(Err(_)) => return Err(PipelineError::Contract { role, message: "the thread opening the decoder cut panicked".into() }),
            None => None,
        };
        let made = match ahead {
            Some(opened) => opened.map(|(cut, session)| (cut, Some(session))),
            None => local_cut(&self.decoder_path, &self.activations).map(|cut| (cut, None)),
        };
        let ((cut, activations), session) = match made {
            Ok(ready) => ready,
            Err(CutFailure::Unavailable(why)) => {
                iso.local = LayerOutputs::Unavailable(why);
                return Ok(());
            }
            Err(CutFailure::Expose(e)) => {
                return Err(PipelineError::Contract { role, message: format!("exposing the quantized matmuls' inputs: {e}") })
            }
        };
        let feed = self.local_feed(&cut.inputs, &cut.stream_types, ids, reference)?;
        self.decoder = None;
        let session = match session {
            Some(opened) => opened,
            None => session::open(cut_source(&self.decoder_path, &cut.bytes, &cut_dir(&self.decoder_path)), &self.opts),
        };
        let mut session = match session {
            Ok(s) => s,
            Err(e @ SessionError::Load { .. }) => {
                iso.local = LayerOutputs::Unavailable(format!("the decoder cut at its layers does not load: {e}"));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let run = |source| PipelineError::Run { role, source };
        let values: Vec<(String, DynValue)> =
            feed.iter().map(|(n, t)| t.to_value().map(|v| (n.clone(), v))).collect::<Result<_, _>>().map_err(run)?;
        let mut out = session.run(values).map_err(run)?;
        let mut take = |name: &str| -> Result<Dense<f32>, PipelineError> {
            let v = out
                .remove(name)
                .ok_or_else(|| PipelineError::Contract { role, message: format!("the decoder cut has no output `{name}`") })?;
            to_dense_f32(&v, role, name)
        };
        let layers = cut.layers.iter().map(|b| take(&b.tensor)).collect::<Result<Vec<_>, _>>()?;
        let mut modules = vec![ModuleOutputs::new(); layers.len()];
        for m in &cut.modules {
            modules[m.layer].insert(m.module.to_string(), take(&m.tensor)?);
        }
        iso.local_activations = activations::take(&mut out, &activations, role)?;
        drop(out);
        tracing::debug!("{} local layer runs in {:.2} s", layers.len(), t.elapsed().as_secs_f64());
        iso.local = LayerOutputs::Tensors(layers);
        iso.modules = modules;
        iso.unidentified = cut.unidentified.into_iter().map(|((l, m), why)| ((l, m.to_string()), why)).collect();
        Ok(())
    }

    /// Whether the decoder cut is being made beside the runs ([`OnnxPipeline::prepare_local_layers`]).
    pub fn cut_ahead(&self) -> bool {
        self.cut_ahead.is_some()
    }

    /// The local layer runs will follow this pipeline's runs ([`OnnxPipeline::isolate`]): where
    /// a second copy of the decoder's weights is small against the memory available (a small
    /// model: its graph and external data at most a quarter of it), the decoder is cut and the
    /// cut's session opened now on another thread, beside the runs, instead of after them (at
    /// fixture scale ONNX Runtime opening the cuts was 3.2 s of a warm `run cases`). A real
    /// checkpoint's decoder is cut after its session is released, one copy at a time.
    pub fn prepare_local_layers(&mut self) {
        let Some(available) = crate::memory::available_bytes() else { return };
        let dir = cut_dir(&self.decoder_path);
        let bytes: u64 = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
            .unwrap_or(u64::MAX);
        if self.cut_ahead.is_some() || bytes.saturating_mul(4) > available {
            return;
        }
        let (path, activations, opts) = (self.decoder_path.clone(), self.activations.clone(), self.opts.clone());
        self.cut_ahead = Some(std::thread::spawn(move || {
            let cut = local_cut(&path, &activations)?;
            let session = session::open(cut_source(&path, &cut.0.bytes, &dir), &opts);
            Ok((cut, session))
        }));
    }

    /// The decoder cut at its layers ([`cut::local_model`]: all of them, or `only`), or why not.
    pub fn cut(&self, only: Option<usize>) -> Result<CutModel, CutUnavailable> {
        decoder_cut(&self.decoder_path, only)
    }

    /// The decoder graph file.
    pub fn decoder_path(&self) -> &std::path::Path {
        &self.decoder_path
    }

    /// What a cut's inputs `names` receive for a prefill of `ids`: the reference's residual
    /// stream for each local input (its `inputs_embeds` for layer 0, layer k−1's output for
    /// layer k) in the type the cut declares it (`stream_types`: float16 or float32, else the
    /// export's activations'), the reference's embedding outputs, an empty cache, ids, mask and
    /// positions.
    pub fn local_feed(
        &self,
        names: &[String],
        stream_types: &BTreeMap<String, i32>,
        ids: &[i64],
        reference: &Run,
    ) -> Result<Vec<(String, FeedTensor)>, PipelineError> {
        let role = self.decoder_role;
        let contract = |message: String| PipelineError::Contract { role, message };
        let ty = self.float_type();
        let float = |t: &Dense<f32>| FeedTensor::float(t.shape.clone(), &t.data, ty);
        let stream = |name: &str, t: &Dense<f32>| match stream_types.get(name).and_then(|&code| FloatType::from_name(elem_type_name(code)))
        {
            Some(declared) => FeedTensor::float(t.shape.clone(), &t.data, declared),
            None => float(t),
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let value = if let Some(k) = cut::local_input_layer(name) {
                let t = if k == 0 {
                    reference.prefill.components.get(&Component::InputsEmbeds)
                } else {
                    match &reference.prefill.layers {
                        LayerOutputs::Tensors(l) => l.get(k - 1),
                        _ => None,
                    }
                };
                stream(name, t.ok_or_else(|| contract(format!("`{name}`: the reference has no residual stream entering layer {k}")))?)
            } else if let Some(slot) = self.kv.iter().find(|slot| name == &slot.past_key || name == &slot.past_value) {
                let dims = if name == &slot.past_key { slot.key_dims } else { slot.value_dims };
                let (a, b) = (dims[0] as usize, dims[1] as usize);
                match slot.layout {
                    CacheLayout::Dynamic => FeedTensor::float(vec![1, a, 0, b], &[], ty),
                    CacheLayout::Static { .. } => FeedTensor::float(vec![1, a, b], &vec![0.0; a * b], ty),
                    CacheLayout::Shared { capacity } => FeedTensor::float(vec![1, a, capacity, b], &vec![0.0; a * capacity * b], ty),
                }
            } else if let Some(index) = self.index_feed(name, ids) {
                index
            } else if let Some(t) = Component::from_name(name).and_then(|c| reference.prefill.components.get(&c)) {
                float(t)
            } else {
                return Err(self.unknown_input(name));
            };
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    /// The protocol's integer inputs for a prefill of `ids`, as owned tensors.
    fn index_feed(&self, name: &str, ids: &[i64]) -> Option<FeedTensor> {
        let (shape, data) = self.protocol.feed(name).indices(ids, 0)?;
        let data = match self.protocol.index_dtype(name) {
            "int32" => FeedData::I32(data.into_iter().map(|x| x as i32).collect()),
            _ => FeedData::I64(data),
        };
        Some(FeedTensor { shape, data })
    }
}
