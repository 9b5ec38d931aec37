//! Full-size architecture checks without weights: the dry manifest of a config, and the
//! header-only check of a checkpoint against it — on sparse files (header written, file extended
//! with `set_len`), so a 12B check costs no disk and no RAM.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use onnx_parity_reference::weights::Problem;
use onnx_parity_reference::{Gemma4, ModelConfig};

fn real_config(name: &str) -> Result<ModelConfig> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cases/configs").join(name);
    ModelConfig::from_file(&path).with_context(|| format!("{} (the committed real config)", path.display()))
}

/// Writes a safetensors file holding only a header for `tensors` (bf16, consecutive offsets)
/// and extends it to its full length without writing data (sparse).
fn sparse_checkpoint(dir: &Path, tensors: &BTreeMap<String, Vec<usize>>) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape) in tensors {
        let bytes = shape.iter().product::<usize>() * 2;
        header.insert(name.clone(), serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]}));
        offset += bytes;
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header))?;
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let path = dir.join("model.safetensors");
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    std::fs::write(&path, &bytes)?;
    std::fs::OpenOptions::new().write(true).open(&path)?.set_len((bytes.len() + offset) as u64)?;
    Ok(())
}

/// Guards the L2 parameter counts of the verbatim real configs (HF 5.14.1 on the meta device,
/// audio excluded: the reference does not run it): 12B 11,957,272,624 of 11,959,730,224,
/// 31B 31,273,088,876 (no audio).
#[test]
fn dry_manifests_of_real_configs_match_hf() -> Result<()> {
    for (name, tensors, elements) in [
        ("gemma-4-12B.json", 676, 11_957_272_624usize),
        ("gemma-4-31B-it.json", 1188, 31_273_088_876),
        ("gemma-4-26B-A4B-it.json", 1013, 25_805_936_206),
    ] {
        let model = Gemma4::dry(real_config(name)?)?;
        let m = model.weight_manifest();
        let n: usize = m.values().map(|s| s.iter().product::<usize>()).sum();
        ensure!(m.len() == tensors && n == elements, "{name}: {} tensors, {n} elements; HF: {tensors}, {elements}", m.len());
    }
    Ok(())
}

/// Guards the header-only check at full size: a sparse 12B checkpoint with exactly the manifest
/// passes; a missing tensor, a wrong shape and an extra tensor are each reported by name.
#[test]
fn sparse_full_size_checkpoint_is_checked_by_headers_alone() -> Result<()> {
    let config = real_config("gemma-4-12B.json")?;
    let manifest = Gemma4::dry(config.clone())?.weight_manifest().clone();
    let dir = tempfile::tempdir()?;
    sparse_checkpoint(dir.path(), &manifest)?;
    let size = std::fs::metadata(dir.path().join("model.safetensors"))?.len();
    ensure!(size > 20_000_000_000, "the sparse file stands for ~24 GB of bf16 weights, got {size}");
    let ok = Gemma4::check_headers(config.clone(), dir.path())?;
    ensure!(ok.problems.is_empty() && ok.unread.is_empty(), "{:?} / {:?}", ok.problems, ok.unread.keys());

    let mut broken = manifest.clone();
    let gone = "model.language_model.layers.3.mlp.down_proj.weight";
    broken.remove(gone).context("manifest has the tensor")?;
    let reshaped = "model.language_model.layers.0.self_attn.q_norm.weight";
    broken.insert(reshaped.into(), vec![128]);
    broken.insert("model.language_model.layers.0.extra.weight".into(), vec![4]);
    let dir = tempfile::tempdir()?;
    sparse_checkpoint(dir.path(), &broken)?;
    let bad = Gemma4::check_headers(config, dir.path())?;
    ensure!(bad.problems.contains(&Problem::Missing { name: gone.into() }), "{:?}", bad.problems);
    ensure!(bad.problems.contains(&Problem::Shape { name: reshaped.into(), expected: vec![256], actual: vec![128] }), "{:?}", bad.problems);
    ensure!(bad.unread.contains_key("model.language_model.layers.0.extra.weight"), "{:?}", bad.unread.keys());
    ensure!(bad.problems.len() == 2, "{:?}", bad.problems);
    Ok(())
}

/// Guards that the committed fixtures' checkpoints hold exactly what the reference reads (no
/// tensor HF writes is ignored by the reference, none it reads is absent).
#[test]
fn fixture_checkpoints_match_their_manifests() -> Result<()> {
    for name in ["unified-vision", "unified-text-kvshare", "gemma4-text-ple", "gemma4-text-moe", "gemma4-vision", "gemma4-vision-large"] {
        let dir = common::fixture_dir(name).join("checkpoint");
        let check = Gemma4::check_headers(ModelConfig::from_file(&dir.join("config.json"))?, &dir)?;
        ensure!(check.problems.is_empty() && check.unread.is_empty(), "{name}: {:?} / {:?}", check.problems, check.unread.keys());
    }
    Ok(())
}
