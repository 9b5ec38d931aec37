//! How each result the reference side computes is written into an entry and read back: runs,
//! their prefill (components, layers, modules, all-position logits), decode steps and local
//! layers. The f64 arbiter's all-position logits, kept as its hidden state and head while it is
//! alive, are written slice-major and read back one slice at a time ([`StoredSlices`]).

use std::collections::BTreeMap;

use onnx_parity_reference::weights::rounding::Adopted;
use onnx_parity_reference::BidirectionalScope;

use super::codec::{Decoder, Encoder};
use super::error::CacheError;
use crate::outputs::{
    Component, Dense, GeneratedTokens, Isolated, Isolation, LayerOutputs, LocalLayers, Prefill, Run, StoredSlices, StreamedLogits,
};

type W = std::io::Result<()>;
type R<T> = Result<T, CacheError>;

/// A value an entry holds.
pub trait Cached: Sized {
    fn encode(&self, e: &mut Encoder) -> W;
    fn decode(d: &mut Decoder) -> R<Self>;

    /// Whether the stored value is cheaper to use than the computed one (logits made from a
    /// hidden state by the head are read back slice by slice instead of made again at every
    /// comparison).
    fn read_back_after_store(&self) -> bool {
        false
    }
}

pub fn dense(e: &mut Encoder, t: &Dense<f32>) -> W {
    e.usize(t.shape.len())?;
    t.shape.iter().try_for_each(|&s| e.usize(s))?;
    e.f32s(&t.data)
}

pub fn read_dense(d: &mut Decoder) -> R<Dense<f32>> {
    let rank = d.count()?;
    let shape = (0..rank).map(|_| d.usize()).collect::<R<Vec<usize>>>()?;
    let data = d.f32s()?;
    if shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s)) != Some(data.len()) {
        return Err(CacheError::Shape(format!("shape {shape:?} for {} values", data.len())));
    }
    Ok(Dense::new(shape, data))
}

fn denses(e: &mut Encoder, v: &[Dense<f32>]) -> W {
    e.usize(v.len())?;
    v.iter().try_for_each(|t| dense(e, t))
}

fn read_denses(d: &mut Decoder) -> R<Vec<Dense<f32>>> {
    let n = d.count()?;
    (0..n).map(|_| read_dense(d)).collect()
}

fn named(e: &mut Encoder, m: &BTreeMap<String, Dense<f32>>) -> W {
    e.usize(m.len())?;
    m.iter().try_for_each(|(k, t)| {
        e.str(k)?;
        dense(e, t)
    })
}

fn read_named(d: &mut Decoder) -> R<BTreeMap<String, Dense<f32>>> {
    let n = d.count()?;
    (0..n).map(|_| Ok((d.str()?, read_dense(d)?))).collect()
}

fn components(e: &mut Encoder, m: &BTreeMap<Component, Dense<f32>>) -> W {
    e.usize(m.len())?;
    m.iter().try_for_each(|(k, t)| {
        e.str(k.as_str())?;
        dense(e, t)
    })
}

fn read_components(d: &mut Decoder) -> R<BTreeMap<Component, Dense<f32>>> {
    let n = d.count()?;
    (0..n)
        .map(|_| {
            let name = d.str()?;
            let c = Component::from_name(&name).ok_or_else(|| CacheError::Shape(format!("unknown component `{name}`")))?;
            Ok((c, read_dense(d)?))
        })
        .collect()
}

fn modules(e: &mut Encoder, v: &[BTreeMap<String, Dense<f32>>]) -> W {
    e.usize(v.len())?;
    v.iter().try_for_each(|m| named(e, m))
}

fn read_modules(d: &mut Decoder) -> R<Vec<BTreeMap<String, Dense<f32>>>> {
    let n = d.count()?;
    (0..n).map(|_| read_named(d)).collect()
}

fn layers(e: &mut Encoder, l: &LayerOutputs) -> W {
    match l {
        LayerOutputs::NotRequested => e.u64(0),
        LayerOutputs::Unavailable(why) => {
            e.u64(1)?;
            e.str(why)
        }
        LayerOutputs::Tensors(t) => {
            e.u64(2)?;
            denses(e, t)
        }
    }
}

fn read_layers(d: &mut Decoder) -> R<LayerOutputs> {
    Ok(match d.u64()? {
        0 => LayerOutputs::NotRequested,
        1 => LayerOutputs::Unavailable(d.str()?),
        2 => LayerOutputs::Tensors(read_denses(d)?),
        t => return Err(CacheError::Shape(format!("layer outputs of kind {t}"))),
    })
}

/// The streamed logits, slice-major: rows, vocab, slice width, then each `[rows, cols]` block.
fn streamed(e: &mut Encoder, s: Option<&StreamedLogits>) -> W {
    let Some(s) = s else { return e.u64(0) };
    e.u64(1)?;
    let shape = s.shape();
    let (rows, vocab) = (shape[1], shape[2]);
    e.usize(rows)?;
    e.usize(vocab)?;
    e.usize(StreamedLogits::SLICE)?;
    let mut failed = None;
    s.for_each_slice::<onnx_parity_reference::Error>(|_, _, values| {
        if let Err(err) = e.f32_block(values) {
            failed = Some(err);
        }
        Ok(())
    })
    .map_err(|err| std::io::Error::other(err.to_string()))?;
    failed.map_or(Ok(()), Err)
}

fn read_streamed(d: &mut Decoder) -> R<Option<std::sync::Arc<StreamedLogits>>> {
    if d.u64()? == 0 {
        return Ok(None);
    }
    let (rows, vocab, slice) = (d.usize()?, d.usize()?, d.usize()?);
    let bytes = (rows as u64).saturating_mul(vocab as u64).saturating_mul(4);
    let offset = d.skip(bytes)?;
    let (file, path) = d.shared();
    Ok(Some(std::sync::Arc::new(StreamedLogits::stored(StoredSlices { file, path, offset, rows, vocab, slice: slice.max(1) }))))
}

fn prefill(e: &mut Encoder, p: &Prefill) -> W {
    dense(e, &p.logits)?;
    streamed(e, p.streamed.as_deref())?;
    components(e, &p.components)?;
    layers(e, &p.layers)?;
    modules(e, &p.modules)?;
    named(e, &p.activations)
}

fn read_prefill(d: &mut Decoder) -> R<Prefill> {
    Ok(Prefill {
        logits: read_dense(d)?,
        streamed: read_streamed(d)?,
        components: read_components(d)?,
        layers: read_layers(d)?,
        modules: read_modules(d)?,
        activations: read_named(d)?,
    })
}

impl Cached for Run {
    fn encode(&self, e: &mut Encoder) -> W {
        prefill(e, &self.prefill)?;
        e.i64s(&self.generation.tokens)?;
        e.usize(self.generation.step_logits.len())?;
        self.generation.step_logits.iter().try_for_each(|s| e.f32s(s))?;
        components(e, &self.step_inputs)
    }

    /// The f64 arbiter's logits made by its head: read back from the entry just written
    /// (bit-identical, the same slices) rather than made again at every comparison.
    fn read_back_after_store(&self) -> bool {
        self.prefill.streamed.as_ref().is_some_and(|s| s.is_computed())
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        let prefill = read_prefill(d)?;
        let tokens = d.i64s()?;
        let n = d.count()?;
        let step_logits = (0..n).map(|_| d.f32s()).collect::<R<Vec<_>>>()?;
        Ok(Run { prefill, generation: GeneratedTokens { tokens, step_logits }, step_inputs: read_components(d)? })
    }
}

impl Cached for LocalLayers {
    fn encode(&self, e: &mut Encoder) -> W {
        denses(e, &self.layers)?;
        modules(e, &self.modules)
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        Ok(LocalLayers { layers: read_denses(d)?, modules: read_modules(d)? })
    }
}

fn optional_dense(e: &mut Encoder, t: Option<&Dense<f32>>) -> W {
    match t {
        None => e.u64(0),
        Some(t) => {
            e.u64(1)?;
            dense(e, t)
        }
    }
}

fn read_optional_dense(d: &mut Decoder) -> R<Option<Dense<f32>>> {
    Ok(match d.u64()? {
        0 => None,
        _ => Some(read_dense(d)?),
    })
}

/// A candidate's isolation, written while the floors its int8 steps condition are made (it waits
/// on disk, [`super::Held::spill`]).
impl Cached for Isolation {
    fn encode(&self, e: &mut Encoder) -> W {
        let i = match self {
            Isolation::NotRun => return e.u64(0),
            Isolation::Failed(why) => {
                e.u64(1)?;
                return e.str(why);
            }
            Isolation::Done(i) => i,
        };
        e.u64(2)?;
        optional_dense(e, i.image_features.as_ref())?;
        components(e, &i.embedding)?;
        optional_dense(e, i.logits.as_ref())?;
        match &i.step_logits {
            None => e.u64(0)?,
            Some(s) => {
                e.u64(1)?;
                e.f32s(s)?;
            }
        }
        layers(e, &i.layers)?;
        named(e, &i.activations)?;
        layers(e, &i.local)?;
        modules(e, &i.modules)?;
        e.usize(i.unidentified.len())?;
        i.unidentified.iter().try_for_each(|((layer, module), why)| {
            e.usize(*layer)?;
            e.str(module)?;
            e.str(why)
        })?;
        named(e, &i.local_activations)?;
        e.u64(u64::from(i.text_only))
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        match d.u64()? {
            0 => return Ok(Isolation::NotRun),
            1 => return Ok(Isolation::Failed(d.str()?)),
            2 => {}
            t => return Err(CacheError::Shape(format!("isolation of kind {t}"))),
        }
        let image_features = read_optional_dense(d)?;
        let embedding = read_components(d)?;
        let logits = read_optional_dense(d)?;
        let step_logits = match d.u64()? {
            0 => None,
            _ => Some(d.f32s()?),
        };
        let layers = read_layers(d)?;
        let activations = read_named(d)?;
        let local = read_layers(d)?;
        let modules = read_modules(d)?;
        let n = d.count()?;
        let unidentified = (0..n).map(|_| Ok(((d.usize()?, d.str()?), d.str()?))).collect::<R<BTreeMap<_, _>>>()?;
        let local_activations = read_named(d)?;
        let text_only = d.u64()? != 0;
        Ok(Isolation::Done(Box::new(Isolated {
            image_features,
            embedding,
            logits,
            step_logits,
            layers,
            activations,
            local,
            modules,
            unidentified,
            local_activations,
            text_only,
        })))
    }
}

impl Cached for BidirectionalScope {
    fn encode(&self, e: &mut Encoder) -> W {
        e.u64(match self {
            BidirectionalScope::AllLayers => 0,
            BidirectionalScope::SlidingWindowed => 1,
            BidirectionalScope::None => 2,
        })
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        Ok(match d.u64()? {
            0 => BidirectionalScope::AllLayers,
            1 => BidirectionalScope::SlidingWindowed,
            2 => BidirectionalScope::None,
            s => return Err(CacheError::Shape(format!("bidirectional scope {s}"))),
        })
    }
}

impl<T: Cached> Cached for Option<T> {
    fn encode(&self, e: &mut Encoder) -> W {
        match self {
            None => e.u64(0),
            Some(v) => {
                e.u64(1)?;
                v.encode(e)
            }
        }
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        Ok(match d.u64()? {
            0 => None,
            _ => Some(T::decode(d)?),
        })
    }
}

impl Cached for Vec<Adopted> {
    fn encode(&self, e: &mut Encoder) -> W {
        e.usize(self.len())?;
        self.iter().try_for_each(|a| {
            e.str(&a.key)?;
            e.usize(a.row)?;
            e.usize(a.col)?;
            e.f64(a.own)?;
            e.f64(a.candidate)
        })
    }

    fn decode(d: &mut Decoder) -> R<Self> {
        let n = d.count()?;
        (0..n).map(|_| Ok(Adopted { key: d.str()?, row: d.usize()?, col: d.usize()?, own: d.f64()?, candidate: d.f64()? })).collect()
    }
}
