//! Shared helpers of the fixture tests: load a fixture's checkpoint, inputs and HF oracle.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use onnx_parity_reference::{Dense, Gemma4, ModelInputs};

/// `fixtures/<name>` of the workspace.
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("fixtures").join(name)
}

/// A fixture: the loaded reference, its inputs and the oracle tensors with metadata.
pub struct Fixture {
    pub model: Gemma4,
    pub inputs: ModelInputs,
    pub oracle: HashMap<String, Tensor>,
    pub metadata: HashMap<String, String>,
}

pub fn read_safetensors(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let tensors = candle_core::safetensors::load(path, &Device::Cpu).with_context(|| format!("reading {}", path.display()))?;
    let bytes = std::fs::read(path)?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).with_context(|| format!("header of {}", path.display()))?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    Ok((tensors, metadata))
}

pub fn load_fixture(name: &str) -> Result<Fixture> {
    let dir = fixture_dir(name);
    if !dir.join("oracle.safetensors").exists() {
        bail!("fixture {} is missing; regenerate with scripts/make-fixtures.sh", dir.display());
    }
    let model = Gemma4::load(&dir.join("checkpoint"))?;
    let (inp, _) = read_safetensors(&dir.join("inputs.safetensors"))?;
    let (oracle, metadata) = read_safetensors(&dir.join("oracle.safetensors"))?;
    let ids = |k: &str| -> Result<Option<Vec<i64>>> { inp.get(k).map(|t| Ok(t.flatten_all()?.to_vec1::<i64>()?)).transpose() };
    let inputs = ModelInputs {
        input_ids: ids("input_ids")?.context("inputs.safetensors lacks input_ids")?,
        pixel_values: inp
            .get("pixel_values")
            .map(|t| Ok::<_, anyhow::Error>(Dense::new(t.dims().to_vec(), t.flatten_all()?.to_vec1::<f32>()?)))
            .transpose()?,
        image_position_ids: inp
            .get("image_position_ids")
            .map(|t| Ok::<_, anyhow::Error>(Dense::new(t.dims().to_vec(), t.flatten_all()?.to_vec1::<i64>()?)))
            .transpose()?,
        mm_token_type_ids: ids("mm_token_type_ids")?,
    };
    Ok(Fixture { model, inputs, oracle, metadata })
}

impl Fixture {
    pub fn oracle(&self, name: &str) -> Result<&Tensor> {
        self.oracle.get(name).with_context(|| format!("oracle.safetensors lacks {name}"))
    }
}

/// max |a − b| over all elements; shapes must agree.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    if a.dims() != b.dims() {
        bail!("shape mismatch: {:?} vs {:?}", a.dims(), b.dims());
    }
    let d = (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    if d.is_nan() {
        bail!("NaN in comparison");
    }
    Ok(d)
}

/// Asserts `max |a − b| ≤ bound` with a message naming `what`; returns the difference.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, bound: f32) -> Result<f32> {
    let d = max_abs_diff(got, want)?;
    eprintln!("{what}: max abs diff {d:.3e} (bound {bound:.0e})");
    if d > bound {
        bail!("{what}: max abs diff {d:e} exceeds {bound:e}");
    }
    Ok(d)
}

/// Bound for logits (all positions, every decode step) against the HF f32 oracle.
pub const LOGITS_BOUND: f32 = 1e-4;
/// Bound for image features and input embeddings against the HF f32 oracle.
pub const FEATURES_BOUND: f32 = 1e-5;

/// Compares the reference's greedy generation with the oracle's tokens and step logits.
pub fn check_greedy(f: &Fixture, scope: onnx_parity_reference::BidirectionalScope, logit_bound: f32) -> Result<()> {
    let want_tokens = f.oracle("greedy_tokens")?.flatten_all()?.to_vec1::<i64>()?;
    let want_steps = f.oracle("step_logits")?;
    let eos = f.model.config().text().eos_token_id.as_ref().map(|e| e.to_vec()).unwrap_or_default();
    let gen = f.model.greedy(&f.inputs, want_tokens.len(), &eos, scope)?;
    if gen.tokens != want_tokens {
        bail!("greedy tokens {:?} vs HF {:?}", gen.tokens, want_tokens);
    }
    if gen.step_logits.len() != want_steps.dim(0)? {
        bail!("{} step logits vs HF {}", gen.step_logits.len(), want_steps.dim(0)?);
    }
    let mut worst = 0f32;
    for (i, row) in gen.step_logits.iter().enumerate() {
        let got = Tensor::new(row.as_slice(), want_steps.device())?;
        let d = max_abs_diff(&got, &want_steps.get(i)?)?;
        eprintln!("step_logits[{i}]: max abs diff {d:.3e}");
        worst = worst.max(d);
    }
    if worst > logit_bound {
        bail!("step logits: max abs diff {worst:e} exceeds {logit_bound:e}");
    }
    Ok(())
}
