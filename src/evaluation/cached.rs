//! The evaluation's reference-side results through the reference cache (`crate::reference_cache`):
//! what each key is made of, and how the evaluation's own result types are stored.
//!
//! A case's **identity** is everything its reference runs read: the reference code version and
//! device, every file of the checkpoint folder (weights, config), the inputs (ids, pixels,
//! positions, token types), the mask scope asked for, the generation asked for (EOS ids, new
//! tokens, whether L3 keeps all positions and layers), and for a quantized build what the
//! reference reads of it (its quantized weights, their nodes and the initializers they read:
//! [`BuildContent`], not the rest of its graphs, so an exporter's fix elsewhere in a graph keeps
//! the cached reference side) and the kernel model its floors follow. Each result adds what distinguishes
//! it (`arbiter`, `floor float16 given`, the candidate's activations for a conditioned floor).

use std::sync::OnceLock;

use super::error::SharedError;
use super::request::{eos_ids, max_new_tokens};
use crate::artifacts::Artifacts;
use crate::case::{Case, Level};
use crate::inputs::ModelInputs;
use crate::metrics::WeightError;
use crate::onnx::protocol;
use crate::onnx::quantized::{BuildContent, QuantizedBuild, StoredBytes};
use crate::reference_cache::codec::{Decoder, Encoder};
use crate::reference_cache::{CacheError, Cached, Held, KeyBuilder, Store, CODE_VERSION};
use crate::runtime::kernels::MatMulNBitsModel;

/// The process's reference cache, `None` when it is off.
pub fn store() -> Option<&'static Store> {
    static STORE: OnceLock<Option<Store>> = OnceLock::new();
    STORE
        .get_or_init(|| {
            let s = &crate::context::current().reference_cache;
            s.root.clone().map(|root| Store::new(root, s.max_bytes))
        })
        .as_ref()
}

/// The digest of every file under `dir` (recursively, by relative path), through the store's
/// remembered digests.
fn folder(store: &Store, key: &mut KeyBuilder, part: &str, dir: &std::path::Path) -> Result<(), CacheError> {
    let mut files = Vec::new();
    for f in crate::files::walk(dir, &|_| true) {
        files.push(f.map_err(|e| CacheError::Io { path: e.path, source: e.source })?);
    }
    let digests = store.digests.digests(&files)?;
    for (f, digest) in files.iter().zip(digests) {
        let rel = f.strip_prefix(dir).unwrap_or(f).to_string_lossy().into_owned();
        key.text(&format!("{part}/{rel}"), &digest);
    }
    Ok(())
}

/// A quantized build's part of a case's identity: what of it the reference side reads
/// ([`BuildContent`]), each external-data file by its digest (remembered by its metadata).
fn build_part(store: &Store, key: &mut KeyBuilder, build: &BuildContent) -> Result<(), CacheError> {
    for (i, weight) in build.weights.iter().enumerate() {
        key.text(&format!("build weight {i}"), weight);
    }
    let files = build.external_files();
    let digests: std::collections::BTreeMap<_, _> = files.iter().zip(store.digests.digests(&files)?).collect();
    for (name, (ty, bytes)) in &build.initializers {
        let at = match bytes {
            StoredBytes::Inline(digest) => format!("inline {digest:032x}"),
            StoredBytes::External { file, location, offset, length } => {
                let digest = digests.get(file).map_or("", String::as_str);
                format!("`{location}` {digest} at {offset} +{length}")
            }
        };
        key.text(&format!("build initializer {name}"), &format!("{ty}, {at}"));
    }
    Ok(())
}

/// `inputs` into `key`, bit exact.
pub fn add_inputs(key: &mut KeyBuilder, inputs: &ModelInputs) {
    key.i64s(protocol::INPUT_IDS, &inputs.input_ids);
    if let Some(p) = &inputs.pixel_values {
        key.text("pixel_values shape", &format!("{:?}", p.shape)).f32s(protocol::PIXEL_VALUES, &p.data);
    }
    if let Some(p) = &inputs.image_position_ids {
        key.text("image_position_ids shape", &format!("{:?}", p.shape)).i64s(protocol::IMAGE_POSITION_IDS, &p.data);
    }
    if let Some(t) = &inputs.mm_token_type_ids {
        key.i64s("mm_token_type_ids", t);
    }
}

/// The identity of `case`'s reference side on `inputs` ([module doc](self)); `None` when the
/// cache is off or a file cannot be read (then nothing is cached and the runs report the error).
pub fn identity(store: &Store, case: &Case, inputs: &ModelInputs, model: MatMulNBitsModel, code: &str) -> Option<KeyBuilder> {
    let artifacts = Artifacts::of(case);
    let checkpoint = artifacts.checkpoint.as_deref()?;
    let build = match case.dtype.is_quantized() {
        false => None,
        true => match artifacts.export.as_deref().map(|e| (e, QuantizedBuild::content(e))) {
            Some((_, Ok(Some(content)))) => Some(content),
            unread => {
                let why = match unread {
                    None => "a quantized case without an export".to_string(),
                    Some((e, Ok(_))) => format!("{}: no graph has a quantized weight", e.display()),
                    Some((_, Err(e))) => e.to_string(),
                };
                tracing::warn!("{}: the reference cache is not used for this case: {why}", case.name);
                return None;
            }
        },
    };
    let mut key = KeyBuilder::new("case", code);
    let device = crate::gpu::device_spec().map(|d| d.to_string()).unwrap_or_else(|e| e.to_string());
    key.text("device", &device);
    let built = (|| -> Result<(), CacheError> {
        folder(store, &mut key, "checkpoint", checkpoint)?;
        add_inputs(&mut key, inputs);
        key.text("bidirectional", &format!("{:?}", case.bidirectional));
        key.i64s("eos", &eos_ids(case));
        key.text("max_new_tokens", &max_new_tokens(case).to_string());
        key.text("l3", &case.levels.contains(&Level::L3).to_string());
        key.text("dtype", case.dtype.as_str());
        if let Some(build) = &build {
            build_part(store, &mut key, build)?;
            key.text("kernel model", &format!("{model:?}"));
        }
        Ok(())
    })();
    match built {
        Ok(()) => Some(key),
        Err(e) => {
            tracing::warn!("{}: the reference cache is not used for this case: {e}", case.name);
            None
        }
    }
}

/// The identity for this build's code ([`CODE_VERSION`]).
pub fn current_identity(case: &Case, inputs: &ModelInputs, model: MatMulNBitsModel) -> Option<KeyBuilder> {
    identity(store()?, case, inputs, model, CODE_VERSION)
}

/// The key of result `what` (with `extra` parts) of the case `identity` stands for.
pub fn entry_key(identity: &KeyBuilder, what: &str, extra: impl FnOnce(&mut KeyBuilder)) -> crate::reference_cache::Key {
    let mut key = identity.clone();
    key.text("result", what);
    extra(&mut key);
    key.finish()
}

/// Whether `what` (with `extra` parts) of the case `identity` stands for is stored.
pub fn is_stored(identity: Option<&KeyBuilder>, what: &str, extra: impl FnOnce(&mut KeyBuilder)) -> bool {
    let (Some(store), Some(identity)) = (store(), identity) else { return false };
    store.contains(&entry_key(identity, what, extra))
}

/// `what` of `case` under `identity` (with `extra` parts) from the cache, else `compute`d and
/// stored. A failed computation is not stored.
pub fn through<T: Cached>(
    case: &Case,
    identity: Option<&KeyBuilder>,
    what: &str,
    extra: impl FnOnce(&mut KeyBuilder),
    compute: impl FnOnce() -> Result<T, SharedError>,
) -> Result<T, SharedError> {
    let (Some(store), Some(identity)) = (store(), identity) else { return compute() };
    let key = entry_key(identity, what, extra);
    if let Some(v) = store.get(what, &case.name, &key) {
        return Ok(v);
    }
    let value = compute()?;
    if store.put(what, &case.name, &key, &value) && value.read_back_after_store() {
        if let Some(v) = store.read_back(what, &case.name, &key) {
            return Ok(v);
        }
    }
    Ok(value)
}

/// [`through`] for a result the judge reads only after more models have run: once computed and
/// stored it is held in its entry, not in memory ([`Held`]); with the cache off, in a temporary
/// file ([`Held::spill`]); found in the cache, in memory (no model runs after it).
pub fn through_held<T: Cached>(
    case: &Case,
    identity: Option<&KeyBuilder>,
    what: &str,
    extra: impl FnOnce(&mut KeyBuilder),
    compute: impl FnOnce() -> Result<T, SharedError>,
) -> Result<Held<T>, SharedError> {
    let (Some(store), Some(identity)) = (store(), identity) else { return compute().map(|v| Held::spill(what, v)) };
    let key = entry_key(identity, what, extra);
    if let Some(v) = store.get(what, &case.name, &key) {
        return Ok(Held::Memory(v));
    }
    Ok(store.put_held(what, &case.name, &key, compute()?))
}

impl Cached for Vec<WeightError> {
    fn encode(&self, e: &mut Encoder) -> std::io::Result<()> {
        e.usize(self.len())?;
        self.iter().try_for_each(|w| {
            e.str(&w.key)?;
            e.str(&w.node)?;
            e.u64(w.bits as u64)?;
            e.f64(w.relative_error)?;
            match w.rounding_error {
                None => e.u64(0),
                Some(r) => {
                    e.u64(1)?;
                    e.f64(r)
                }
            }
        })
    }

    fn decode(d: &mut Decoder) -> Result<Self, CacheError> {
        let n = d.count()?;
        (0..n)
            .map(|_| {
                let (key, node, bits, relative_error) = (d.str()?, d.str()?, d.u64()? as u32, d.f64()?);
                let rounding_error = if d.u64()? == 0 { None } else { Some(d.f64()?) };
                Ok(WeightError { key, node, bits, relative_error, rounding_error })
            })
            .collect()
    }
}
