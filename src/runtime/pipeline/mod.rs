//! The ONNX Runtime side of a comparison: sessions for an export package, prefill with logits for
//! every position, and greedy decoding with the KV cache.
//!
//! Protocol (mobius exports): vision_encoder(pixel_values, pixel_position_ids) → image_features;
//! embedding(input_ids, image_features) → inputs_embeds (+ per_layer_inputs for gemma4 PLE
//! models); decoder(inputs_embeds, attention_mask, position_ids, `[input_ids]`, `[per_layer_inputs]`,
//! past_key_values.i.{key,value}) → logits, present.i.{key,value}. A text-only package is one
//! model taking `input_ids` (gemma4_text computes its per-layer embeddings inside). Every
//! embedding output the decoder also takes is routed to it by name, at prefill and at every
//! decode step, so the pipeline needs no per-family code. Names, KV geometry and the float type
//! are read from the sessions; `present.*` values are moved into the next step's
//! `past_key_values.*` without copying.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor, TensorElementType};

mod activations;
mod error;
mod isolation;
mod kv;
mod local_cut;
mod step;
mod values;

pub use error::PipelineError;
use kv::{kv_slots, CacheLayout, KvSlot};
use step::DecoderStep;
use values::{check_value, declared_shape, float_value, to_dense_f32};

use super::session::{self, ModelSource, Partition, SessionError, SessionOptions};
use crate::inputs::{Dense, ModelInputs};
use crate::metrics::greedy_token;
use crate::onnx::feed::FloatType;
use crate::onnx::layers::{self, LayerBoundary, LayersError};
use crate::onnx::package::{Layout, OnnxPackage, DECODER, EMBEDDING, TEXT_MODEL, VISION_ENCODER};
use crate::onnx::protocol::{self, ExportProtocol, Feed};
use crate::onnx::shapes::{self, Axis, Source};
use crate::outputs::{Component, GeneratedTokens, LayerOutputs, Prefill};

/// Which graph the decoder session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderGraph {
    /// The export's decoder file as it is.
    Original,
    /// The decoder with every layer's output exposed as an extra graph output ([`layers`]), so a
    /// prefill also returns them. Its logits are bit-identical to the original's (a test holds
    /// that on every fixture export), which is why it can be *the* decoder session rather than a
    /// second one beside it: one copy of the weights in memory, one prefill.
    WithLayerOutputs,
}

/// Sessions of one export package: the decoder and the embedding model for the whole run (every
/// decode step needs both); the vision encoder only for the prefill, opened then and released
/// before the decoder runs, its output kept for a second prefill of the same images.
pub struct OnnxPipeline {
    root: PathBuf,
    /// The decoder session; released for the local layer runs ([`isolation`]), after which the
    /// pipeline cannot decode any more.
    decoder: Option<Session>,
    decoder_path: PathBuf,
    decoder_role: &'static str,
    embedding: Option<Session>,
    vision_path: Option<PathBuf>,
    /// The last images encoded and their features (a forced and a free decode of one case
    /// prefill the same images).
    vision_memo: Option<VisionMemo>,
    kv: Vec<KvSlot>,
    /// The static buffers' capacity, when any pair is static.
    capacity: Option<usize>,
    /// What the package's graphs and runtime config declare (the positions bound of ORT GenAI's
    /// `search.max_length`, logits of the last position only).
    protocol: ExportProtocol,
    /// Element type of activations (`inputs_embeds`, `image_features`, KV): f32 or f16.
    float: TensorElementType,
    hidden: i64,
    opts: SessionOptions,
    /// The decoder's layer outputs (extra graph outputs), or why there are none.
    layers: Result<Vec<LayerBoundary>, NoLayerOutputs>,
    /// The extra output holding the stream entering layer 0, where the decoder embeds the ids
    /// itself (captured with the layers, as the `inputs_embeds` component).
    embeddings_output: Option<String>,
    /// Extra outputs captured with the layers: the inputs of the quantized matmuls this EP's
    /// kernel rounds to int8 ([`activations`]), with their element types.
    activations: Vec<(String, i32)>,
    /// Sub-models whose compute nodes ONNX Runtime put partly on the CPU EP although the
    /// session's EP was another (what a user of the build on that EP gets: L3–L5 say so).
    partitions: Vec<Partition>,
    /// The decoder cut and its session, being made beside the runs
    /// ([`OnnxPipeline::prepare_local_layers`]).
    cut_ahead: Option<std::thread::JoinHandle<Result<local_cut::OpenedCut, local_cut::CutFailure>>>,
}

/// Why a pipeline's decoder exposes no layer outputs.
#[derive(Debug, thiserror::Error)]
pub enum NoLayerOutputs {
    #[error("the decoder was opened without its layer outputs")]
    NotRequested,
    #[error(transparent)]
    Unidentifiable(#[from] LayersError),
    #[error("the decoder with its layer outputs exposed does not load: {0}")]
    DoesNotLoad(#[source] SessionError),
}

/// Vision inputs and the features the encoder computed from them.
struct VisionMemo {
    pixel_values: Dense<f32>,
    positions: Dense<i64>,
    features: Dense<f32>,
}

/// Outputs of one embedding call, by name.
type Embedded = BTreeMap<String, DynValue>;

impl OnnxPipeline {
    /// Opens the export's decoder and embedding model as they are (CPU EP, or CUDA with TF32 off
    /// under `cuda`).
    pub fn open(dir: &Path, opts: &SessionOptions) -> Result<Self, PipelineError> {
        Self::open_with(dir, opts, DecoderGraph::Original)
    }

    /// [`open`](Self::open), the decoder session running `graph`. With
    /// [`DecoderGraph::WithLayerOutputs`] a decoder whose layer boundaries cannot be identified
    /// runs as it is, and [`layer_outputs_unavailable`](Self::layer_outputs_unavailable) says why.
    pub fn open_with(dir: &Path, opts: &SessionOptions, graph: DecoderGraph) -> Result<Self, PipelineError> {
        let package = OnnxPackage::open(dir)?;
        let (decoder_role, decoder_path) = match package.layout {
            Layout::TextOnly => (TEXT_MODEL, package.submodel(TEXT_MODEL)),
            Layout::Multimodal => (DECODER, package.submodel(DECODER)),
        };
        let decoder_path = decoder_path
            .ok_or_else(|| PipelineError::Contract { role: decoder_role, message: format!("missing from {}", dir.display()) })?;
        let mut partitions = Vec::new();
        let (decoder, layers, embeddings_output, activations) =
            open_decoder(dir, decoder_role, decoder_path, opts, graph, &mut partitions)?;
        let embedding = package.submodel(EMBEDDING).map(|p| open_session(ModelSource::File(p), opts, &mut partitions)).transpose()?;
        let vision_path = package.submodel(VISION_ENCODER).map(Path::to_path_buf);
        if package.layout == Layout::Multimodal && embedding.is_none() {
            return Err(PipelineError::Contract { role: EMBEDDING, message: format!("missing from {}", dir.display()) });
        }
        // What to feed and how the cache lives come from the package's protocol, the one that
        // L1 checks; the session supplies the static geometry.
        let protocol = ExportProtocol::of_package(&package)?;
        let (kv, capacity) = kv_slots(&decoder, decoder_role, &protocol, opts.ep.is_cuda())?;
        let logits = decoder
            .outputs()
            .iter()
            .find(|o| o.name() == protocol::LOGITS)
            .and_then(|o| o.dtype().tensor_type())
            .ok_or_else(|| PipelineError::Contract { role: decoder_role, message: "no tensor output `logits`".into() })?;
        if !matches!(logits, TensorElementType::Float32 | TensorElementType::Float16 | TensorElementType::Bfloat16) {
            return Err(PipelineError::Contract {
                role: decoder_role,
                message: format!("logits are {logits:?}; float32, float16 and bfloat16 exports are driven"),
            });
        }
        // The activations' type, as the protocol reads it (the KV cache's: ORT GenAI's builder
        // casts a bf16 or f16 build's logits up to float32); the logits are read in whatever type
        // they come.
        let float = match FloatType::from_name(protocol.float) {
            Some(FloatType::F16) => TensorElementType::Float16,
            Some(FloatType::BF16) => TensorElementType::Bfloat16,
            _ => logits,
        };
        // A declared logits shape (rank 0: none declared; the run is checked either way).
        if let Some(shape) = declared_shape(decoder.outputs().iter().find(|o| o.name() == protocol::LOGITS).map(|o| o.dtype())) {
            if !shape.is_empty() {
                let axes = [Axis::Is("batch", 1), Axis::Any("sequence"), Axis::Positive("vocab")];
                shapes::check(decoder_role, "output", protocol::LOGITS, &axes, &shape, Source::Declared)?;
            }
        }
        let hidden = match &embedding {
            Some(e) => {
                let shape = declared_shape(e.outputs().iter().find(|o| o.name() == protocol::INPUTS_EMBEDS).map(|o| o.dtype()))
                    .ok_or_else(|| PipelineError::Contract { role: EMBEDDING, message: "no tensor output `inputs_embeds`".into() })?;
                let axes = [Axis::Is("batch", 1), Axis::Any("sequence"), Axis::Static("hidden")];
                shapes::check(EMBEDDING, "output", protocol::INPUTS_EMBEDS, &axes, &shape, Source::Declared)?;
                shape[2]
            }
            None => 0,
        };
        Ok(OnnxPipeline {
            root: dir.into(),
            decoder: Some(decoder),
            decoder_path: decoder_path.to_path_buf(),
            decoder_role,
            embedding,
            vision_path,
            vision_memo: None,
            kv,
            capacity,
            protocol,
            float,
            hidden,
            opts: opts.clone(),
            layers,
            embeddings_output,
            activations,
            partitions,
            cut_ahead: None,
        })
    }

    /// Why this pipeline returns no layer outputs (`None` when its decoder exposes them).
    pub fn layer_outputs_unavailable(&self) -> Option<&NoLayerOutputs> {
        self.layers.as_ref().err()
    }

    /// The export's activation type (its float inputs are fed in it, outputs read back to f32).
    pub fn float_type(&self) -> FloatType {
        match self.float {
            TensorElementType::Float16 => FloatType::F16,
            TensorElementType::Bfloat16 => FloatType::BF16,
            _ => FloatType::F32,
        }
    }

    /// Number of KV pairs the decoder carries.
    pub fn kv_pairs(&self) -> usize {
        self.kv.len()
    }

    /// The package folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The EP its sessions run on.
    pub fn ep(&self) -> crate::eps::RunEp {
        self.opts.ep
    }

    /// `partitioned: N compute nodes on the CPU (…)` when ORT put compute nodes of its sub-models
    /// on the CPU EP instead of the sessions' EP; `None` when every compute node is on it.
    pub fn partitioned(&self) -> Option<String> {
        if self.partitions.is_empty() {
            return None;
        }
        let n: usize = self.partitions.iter().map(|p| p.nodes.len()).sum();
        let each: Vec<String> = self
            .partitions
            .iter()
            .map(|p| {
                format!("{} {}", p.path.file_name().map_or(p.path.display().to_string(), |_| p.path.display().to_string()), p.nodes.len())
            })
            .collect();
        Some(format!("partitioned: {n} compute nodes on the CPU instead of {} ({})", self.opts.ep.ort_name(), each.join(", ")))
    }

    /// Prefill: logits for every position (and the components on the way).
    pub fn prefill(&mut self, inputs: &ModelInputs) -> Result<Prefill, PipelineError> {
        let (prefill, _cache) = self.prefill_with_cache(inputs, false)?;
        Ok(prefill)
    }

    /// Greedy decoding of up to `max_new` tokens, stopping after an EOS token. With `forced`, the
    /// given tokens are fed instead of the argmax (teacher forcing), so each step's logits can be
    /// compared with another implementation's on identical histories. With `layer_outputs`, the
    /// prefill also returns each decoder layer's output ([`LayerOutputs::Unavailable`] with the
    /// reason when the decoder does not expose them).
    pub fn greedy(
        &mut self,
        inputs: &ModelInputs,
        max_new: usize,
        eos: &[i64],
        forced: Option<&[i64]>,
        layer_outputs: bool,
    ) -> Result<(Prefill, GeneratedTokens), PipelineError> {
        let limit = forced.map_or(max_new, |f| f.len().min(max_new));
        if let Some(capacity) = self.capacity {
            // Every token but the last generated one is written into the cache.
            let needed = inputs.input_ids.len() + limit.saturating_sub(1);
            if needed > capacity {
                return Err(PipelineError::Capacity { capacity, prompt: inputs.input_ids.len(), new: limit });
            }
        }
        if let (Some(max_length), Some(runtime)) = (self.protocol.max_positions(), &self.protocol.runtime) {
            if inputs.input_ids.len() + limit.saturating_sub(1) > max_length {
                let config = runtime.path.clone();
                return Err(PipelineError::MaxLength { config, max_length, prompt: inputs.input_ids.len(), new: limit });
            }
        }
        let (prefill, mut cache) = self.prefill_with_cache(inputs, layer_outputs)?;
        if max_new == 0 {
            return Ok((prefill, GeneratedTokens::default()));
        }
        let (s, v) = (prefill.logits.shape[1], prefill.logits.shape[2]);
        let first = prefill.logits.data[(s - 1) * v..].to_vec();
        let role = self.decoder_role;
        // Positions so far: the prompt (a last-position-logits build returns one row for it).
        let mut total = inputs.input_ids.len();
        let choose = |step: usize, logits: &[f32]| {
            greedy_token(logits).ok_or_else(|| PipelineError::Contract { role, message: format!("decode step {step}: every logit is NaN") })
        };
        let gen = GeneratedTokens::decode(first, max_new, eos, forced, choose, |_, next| {
            total += 1;
            let embedded = self.embed(&[next], None)?;
            let step = self.run_decoder(&[next], embedded, total, std::mem::take(&mut cache), false)?;
            cache = step.present;
            Ok(step.logits.data)
        })?;
        Ok((prefill, gen))
    }

    fn prefill_with_cache(&mut self, inputs: &ModelInputs, layer_outputs: bool) -> Result<(Prefill, Vec<DynValue>), PipelineError> {
        if inputs.input_ids.is_empty() {
            return Err(PipelineError::Contract { role: self.decoder_role, message: "empty prompt (no input_ids)".into() });
        }
        let mut components = BTreeMap::new();
        let image_features = match (&inputs.pixel_values, &inputs.image_position_ids) {
            (Some(px), Some(pos)) => {
                let features = self.image_features(px, pos)?;
                let value = float_value(self.float, &features.shape, &features.data)
                    .map_err(|source| PipelineError::Run { role: EMBEDDING, source })?;
                components.insert(Component::ImageFeatures, features.clone());
                Some(value)
            }
            _ => None,
        };
        let embedded = self.embed(&inputs.input_ids, image_features)?;
        for (name, v) in &embedded {
            if let Some(c) = Component::from_name(name) {
                components.insert(c, to_dense_f32(v, EMBEDDING, name)?);
            }
        }
        let empty = self.empty_cache()?;
        let out = self.run_decoder(&inputs.input_ids, embedded, inputs.input_ids.len(), empty, layer_outputs)?;
        if let Some(e) = out.embeddings {
            components.insert(Component::InputsEmbeds, e);
        }
        let layers = match (layer_outputs, out.layers) {
            (false, _) => LayerOutputs::NotRequested,
            (true, Some(layers)) => LayerOutputs::Tensors(layers),
            (true, None) => {
                LayerOutputs::Unavailable(self.layer_outputs_unavailable().map_or_else(|| "not exposed".to_string(), |e| e.to_string()))
            }
        };
        let prefill = Prefill { logits: out.logits, components, layers, activations: out.activations, ..Default::default() };
        Ok((prefill, out.present))
    }

    /// The vision encoder's `image_features` for these images: the memo of the last call when
    /// they are the same images, else a run of the encoder, whose session lives only for it.
    fn image_features(&mut self, px: &Dense<f32>, pos: &Dense<i64>) -> Result<Dense<f32>, PipelineError> {
        if let Some(m) = self.vision_memo.as_ref().filter(|m| &m.pixel_values == px && &m.positions == pos) {
            return Ok(m.features.clone());
        }
        self.vision_memo = None;
        let path = self.vision_path.as_deref().ok_or_else(|| PipelineError::NoVision(self.root.clone()))?;
        let t = std::time::Instant::now();
        let mut vision = open_session(ModelSource::File(path), &self.opts, &mut self.partitions)?;
        let run = |source| PipelineError::Run { role: VISION_ENCODER, source };
        let pixel_values = float_value(self.float, &px.shape, &px.data).map_err(run)?;
        let pixel_position_ids = Tensor::from_array((pos.shape.clone(), pos.data.clone())).map_err(run)?;
        let mut out = vision
            .run(ort::inputs! { protocol::PIXEL_VALUES => pixel_values, protocol::PIXEL_POSITION_IDS => pixel_position_ids })
            .map_err(run)?;
        let features = out
            .remove(protocol::IMAGE_FEATURES)
            .ok_or_else(|| PipelineError::Contract { role: VISION_ENCODER, message: "no output `image_features`".into() })?;
        let axes = [Axis::Any("image tokens"), Axis::Is("hidden", self.hidden as usize)];
        check_value(VISION_ENCODER, protocol::IMAGE_FEATURES, &axes, &features)?;
        let features = to_dense_f32(&features, VISION_ENCODER, protocol::IMAGE_FEATURES)?;
        // The outputs borrow the session: both go before the decoder runs.
        drop(out);
        drop(vision);
        tracing::debug!("vision encoder of {} ran in {:.2} s and was released", self.root.display(), t.elapsed().as_secs_f64());
        self.vision_memo = Some(VisionMemo { pixel_values: px.clone(), positions: pos.clone(), features: features.clone() });
        Ok(features)
    }

    /// Runs the embedding model (multimodal packages) and keeps every output by name; empty for
    /// text-only packages, whose decoder embeds `input_ids` itself. Decode steps pass
    /// `image_features` of shape [0, hidden].
    fn embed(&mut self, ids: &[i64], image_features: Option<DynValue>) -> Result<Embedded, PipelineError> {
        let float = self.float;
        let hidden = self.hidden;
        if self.embedding.is_none() {
            return Ok(Embedded::new());
        }
        let run = |source| PipelineError::Run { role: EMBEDDING, source };
        let input_ids = self.index_value(protocol::INPUT_IDS, vec![1, ids.len()], ids.to_vec()).map_err(run)?;
        let Some(embedding) = self.embedding.as_mut() else { return Ok(Embedded::new()) };
        let wants_features = embedding.inputs().iter().any(|i| i.name() == protocol::IMAGE_FEATURES);
        let mut feed: Vec<(&str, SessionInputValue<'_>)> = vec![(protocol::INPUT_IDS, input_ids.into())];
        if wants_features {
            let features = match image_features {
                Some(v) => v,
                None => float_value(float, &[0, hidden as usize], &[]).map_err(run)?,
            };
            feed.push((protocol::IMAGE_FEATURES, features.into()));
        }
        let out = embedding.run(feed).map_err(run)?;
        let embedded: Embedded = out.into_iter().map(|(name, v)| (name.to_string(), v)).collect();
        let Some(embeds) = embedded.get(protocol::INPUTS_EMBEDS) else {
            return Err(PipelineError::Contract { role: EMBEDDING, message: "no output `inputs_embeds`".into() });
        };
        let s = ids.len();
        check_value(
            EMBEDDING,
            protocol::INPUTS_EMBEDS,
            &[Axis::Is("batch", 1), Axis::Is("sequence", s), Axis::Is("hidden", hidden as usize)],
            embeds,
        )?;
        if let Some(ple) = embedded.get(protocol::PER_LAYER_INPUTS) {
            let axes = [Axis::Is("batch", 1), Axis::Is("sequence", s), Axis::Positive("layers × per-layer width")];
            check_value(EMBEDDING, protocol::PER_LAYER_INPUTS, &axes, ple)?;
        }
        Ok(embedded)
    }

    fn empty_cache(&self) -> Result<Vec<DynValue>, PipelineError> {
        kv::empty_cache(&self.kv, self.float, self.opts.ep, self.decoder.as_ref())
            .map_err(|source| PipelineError::Run { role: self.decoder_role, source })
    }

    /// The decoder inputs the embedding model's outputs feed (`inputs_embeds`,
    /// `per_layer_inputs`, …), in the protocol's order.
    fn routed(&self) -> impl Iterator<Item = &String> {
        self.protocol.decoder_inputs.iter().filter(|n| self.protocol.feed(n) == Feed::Embedding)
    }

    /// An integer input of `shape` in the element type the graph declares for `name`.
    fn index_value(&self, name: &str, shape: Vec<usize>, data: Vec<i64>) -> Result<DynValue, ort::Error> {
        Ok(match self.protocol.index_dtype(name) {
            "int32" => Tensor::from_array((shape, data.into_iter().map(|x| x as i32).collect::<Vec<_>>()))?.into_dyn(),
            _ => Tensor::from_array((shape, data))?.into_dyn(),
        })
    }

    /// The error for a decoder input outside the protocol.
    fn unknown_input(&self, name: &str) -> PipelineError {
        let message = if self.protocol.feed(name) == Feed::NoEmbeddingModel {
            format!(
                "input `{name}` needs an embedding model and the package has none (an ORT GenAI `exclude_embeds` build \
                 leaves the embedding to another model); only a package that embeds its ids can be run"
            )
        } else {
            format!("input `{name}` is neither part of the decoder protocol nor an output of the embedding model")
        };
        PipelineError::Contract { role: self.decoder_role, message }
    }

    /// The decoder's feeds for `ids` (the last `ids.len()` of `total` positions): index inputs
    /// made here, the embedding model's outputs taken from `embedded`; the past caches are bound
    /// apart.
    fn decoder_feed(&self, ids: &[i64], embedded: &mut Embedded, total: usize) -> Result<Vec<(String, DynValue)>, PipelineError> {
        let role = self.decoder_role;
        let run = |source| PipelineError::Run { role, source };
        let contract = |message: String| PipelineError::Contract { role, message };
        let s = ids.len();
        let mut feed: Vec<(String, DynValue)> = Vec::with_capacity(self.protocol.decoder_inputs.len());
        for name in &self.protocol.decoder_inputs {
            let input = self.protocol.feed(name);
            let value: DynValue = match (input, input.indices(ids, total - s)) {
                (_, Some((shape, data))) => self.index_value(name, shape, data).map_err(run)?,
                (Feed::Past { .. }, None) => continue,
                (Feed::Embedding, None) => embedded
                    .remove(name)
                    .ok_or_else(|| contract(format!("input `{name}` comes from the embedding model, which did not produce it")))?,
                _ => return Err(self.unknown_input(name)),
            };
            feed.push((name.clone(), value));
        }
        Ok(feed)
    }

    /// One decoder call over `ids` (S new positions) with `total` = past + S positions: logits
    /// [1, S, V] as f32, the `present` values in KV order (moved out of the outputs), and with
    /// `capture_layers` each layer's output when the decoder exposes them.
    fn run_decoder(
        &mut self,
        ids: &[i64],
        mut embedded: Embedded,
        total: usize,
        cache: Vec<DynValue>,
        capture_layers: bool,
    ) -> Result<DecoderStep, PipelineError> {
        let role = self.decoder_role;
        let run = |source| PipelineError::Run { role, source };
        let contract = |message: String| PipelineError::Contract { role, message };
        let s = ids.len();
        let feed = self.decoder_feed(ids, &mut embedded, total)?;
        if cache.len() != self.kv.len() * 2 {
            return Err(contract("KV cache shorter than the decoder's KV inputs".into()));
        }
        let decoder = self.decoder.as_mut().ok_or_else(|| contract("the decoder session was released for the local layer runs".into()))?;
        // Everything is bound: the feeds and the past caches as inputs; logits, layer outputs
        // and activations returned in host memory (they are read); the presents kept where the
        // EP computes them (device memory on CUDA), so a cache never crosses to the host and
        // back between steps. ORT GenAI's shared buffers are bound as their past input *and*
        // their present output, so GroupQueryAttention writes the new positions in place (its
        // share-buffer mode, which CUDA's sliding-window kernel requires) and the buffers stay
        // this call's `cache`.
        let mut cache = cache;
        let mut binding = decoder.create_binding().map_err(run)?;
        for (name, value) in &feed {
            binding.bind_input(name.as_str(), value).map_err(run)?;
        }
        let host = ort::memory::MemoryInfo::default();
        let kv_home = kv::kv_memory(self.opts.ep).map_err(run)?;
        let presents: Vec<&str> = self.kv.iter().flat_map(|s| [s.present_key.as_str(), s.present_value.as_str()]).collect();
        // Each name once: an instrumented decoder may list one tensor twice (the stream entering
        // layer 0 is also a quantized matmul's input), and a binding holds a name once.
        let mut bound = std::collections::BTreeSet::new();
        for output in decoder.outputs().iter().map(|o| o.name()).filter(|n| !presents.contains(n) && bound.insert(*n)) {
            binding.bind_output_to_device(output, &host).map_err(run)?;
        }
        let pairs = self.kv.iter().flat_map(|slot| {
            let shared = matches!(slot.layout, CacheLayout::Shared { .. });
            [(&slot.past_key, &slot.present_key, shared), (&slot.past_value, &slot.present_value, shared)]
        });
        for ((past, present, shared), value) in pairs.zip(cache.iter_mut()) {
            binding.bind_input(past.as_str(), &*value).map_err(run)?;
            if shared {
                binding.bind_output(present.as_str(), value).map_err(run)?;
            } else {
                binding.bind_output_to_device(present.as_str(), &kv_home).map_err(run)?;
            }
        }
        let mut out = decoder.run_binding(&binding).map_err(run)?;
        let logits = out.remove(protocol::LOGITS).ok_or_else(|| contract("no output `logits`".into()))?;
        let logits = to_dense_f32(&logits, role, protocol::LOGITS)?;
        let positions = if self.protocol.last_position_logits { 1 } else { s };
        shapes::check_returned(
            role,
            protocol::LOGITS,
            &[Axis::Is("batch", 1), Axis::Is("sequence", positions), Axis::Positive("vocab")],
            &logits.shape,
        )?;
        let boundaries = self.layers.as_ref().ok().map(Vec::as_slice).filter(|_| capture_layers);
        let captured = step::captures(&mut out, boundaries, self.embeddings_output.as_deref(), &self.activations, role)?;
        let present = step::presents(&mut out, &self.kv, &cache, role)?;
        Ok(DecoderStep { logits, present, layers: captured.layers, embeddings: captured.embeddings, activations: captured.activations })
    }
}

/// A decoder session's layer outputs, or why it has none.
type LayerOutputsOf = Result<Vec<LayerBoundary>, NoLayerOutputs>;

/// The decoder session for `graph`, its layer outputs (or why there are none), the output
/// holding the stream entering layer 0 (when exposed) and the int8-quantized matmuls' inputs
/// exposed with them (a quantized build of the package at `root` whose kernel on `opts.ep`
/// quantizes them).
fn open_decoder(
    root: &Path,
    role: &'static str,
    path: &Path,
    opts: &SessionOptions,
    graph: DecoderGraph,
    partitions: &mut Vec<Partition>,
) -> Result<OpenedDecoder, PipelineError> {
    if graph == DecoderGraph::Original {
        return Ok((open_session(ModelSource::File(path), opts, partitions)?, Err(NoLayerOutputs::NotRequested), None, Vec::new()));
    }
    let t = std::time::Instant::now();
    let mut copy = match layers::instrument(path) {
        Ok(copy) => copy,
        Err(e) => {
            tracing::info!("{e}: the decoder runs as exported, without layer outputs");
            return Ok((open_session(ModelSource::File(path), opts, partitions)?, Err(e.into()), None, Vec::new()));
        }
    };
    let mut quantized = activations::quantized(root, role, opts.ep, path, &copy.bytes);
    if !quantized.is_empty() {
        match activations::expose(&copy.bytes, &quantized) {
            Ok(bytes) => copy.bytes = bytes,
            Err(e) => {
                tracing::warn!("{}: its quantized matmuls' inputs cannot be exposed ({e}); no rounding hints", path.display());
                quantized.clear();
            }
        }
    }
    let source = ModelSource::Memory { path, bytes: &copy.bytes, external_data_dir: &copy.external_data_dir };
    let session = match open_session(source, opts, partitions) {
        Ok(s) => s,
        // Only ORT refusing the edited graph is a reason to run the original: an EP without a
        // device, or one that would run nodes on the CPU, fails the original as well.
        Err(e @ session::SessionError::Load { .. }) => {
            let reason = NoLayerOutputs::DoesNotLoad(e);
            tracing::warn!("{reason}; it runs as exported");
            drop(copy);
            return Ok((open_session(ModelSource::File(path), opts, partitions)?, Err(reason), None, Vec::new()));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::debug!("decoder with {} layer outputs opened in {:.2} s", copy.layers.len(), t.elapsed().as_secs_f64());
    Ok((session, Ok(copy.layers), copy.embeddings, quantized))
}

/// A decoder session, its layer outputs, the stream entering layer 0 and the quantized matmuls'
/// inputs it exposes ([`open_decoder`]).
type OpenedDecoder = (Session, LayerOutputsOf, Option<String>, Vec<(String, i32)>);

/// Opens a session on `opts.ep`, keeping where ORT put compute nodes on the CPU instead (one
/// entry per graph file).
pub(super) fn open_session(
    source: ModelSource<'_>,
    opts: &SessionOptions,
    partitions: &mut Vec<Partition>,
) -> Result<Session, SessionError> {
    let placed = session::open_placed(source, opts)?;
    if let Some(p) = placed.partition {
        tracing::warn!("{}", p.describe(source.graph().as_ref()));
        if !partitions.iter().any(|q| q.path == p.path) {
            partitions.push(p);
        }
    }
    Ok(placed.session)
}
