//! Checkpoint handling: a missing or mis-shaped tensor is an error naming it (and the file);
//! sharded checkpoints load to the same function; half-precision weights are upcast.

mod common;

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor};
use common::{fixture_dir, max_abs_diff, read_safetensors};
use onnx_parity_reference::{BidirectionalScope, Dense, Error, Gemma4, ModelInputs};

/// Copies the unified-vision checkpoint into a temp dir with its tensors rewritten by `edit`.
fn rewritten(edit: impl FnOnce(&mut HashMap<String, Tensor>) -> Result<()>) -> Result<tempfile::TempDir> {
    let src = fixture_dir("unified-vision").join("checkpoint");
    let dir = tempfile::tempdir()?;
    std::fs::copy(src.join("config.json"), dir.path().join("config.json"))?;
    let (mut tensors, _) = read_safetensors(&src.join("model.safetensors"))?;
    edit(&mut tensors)?;
    candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors"))?;
    Ok(dir)
}

fn prompt() -> ModelInputs {
    ModelInputs { input_ids: vec![2, 40, 41, 42, 43, 44, 45, 46, 47, 48], ..Default::default() }
}

fn logits(dir: &Path) -> Result<Tensor> {
    let m = Gemma4::load(dir)?;
    Ok(m.prefill(&prompt(), BidirectionalScope::None)?)
}

#[test]
fn missing_tensor_is_named() -> Result<()> {
    let name = "model.language_model.layers.2.self_attn.k_norm.weight";
    let dir = rewritten(|t| {
        t.remove(name).context("fixture lacks the tensor")?;
        Ok(())
    })?;
    match Gemma4::load(dir.path()) {
        Err(e @ Error::MissingTensor { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(name), "{msg}");
            assert!(msg.contains("model.safetensors"), "{msg}");
            Ok(())
        }
        other => bail!("expected MissingTensor, got {other:?}"),
    }
}

#[test]
fn wrong_shape_is_named() -> Result<()> {
    let name = "model.vision_embedder.patch_dense.weight";
    let dir = rewritten(|t| {
        let w = t.get(name).context("fixture lacks the tensor")?;
        let transposed = w.t()?.contiguous()?;
        t.insert(name.to_string(), transposed);
        Ok(())
    })?;
    match Gemma4::load(dir.path()) {
        Err(e @ Error::TensorShape { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(name) && msg.contains("model.safetensors"), "{msg}");
            Ok(())
        }
        other => bail!("expected TensorShape, got {other:?}"),
    }
}

/// The layer_scalar buffer is a stored tensor, not an implicit 1.
#[test]
fn missing_layer_scalar_is_named() -> Result<()> {
    let name = "model.language_model.layers.0.layer_scalar";
    let dir = rewritten(|t| {
        t.remove(name).context("fixture lacks layer_scalar")?;
        Ok(())
    })?;
    let err = Gemma4::load(dir.path()).err().context("load should fail")?;
    assert!(err.to_string().contains(name), "{err}");
    Ok(())
}

#[test]
fn sharded_checkpoint_loads_identically() -> Result<()> {
    let single = fixture_dir("unified-vision").join("checkpoint");
    let (tensors, _) = read_safetensors(&single.join("model.safetensors"))?;
    let dir = tempfile::tempdir()?;
    std::fs::copy(single.join("config.json"), dir.path().join("config.json"))?;
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let mut map = serde_json::Map::new();
    for (file, part) in [("model-00001-of-00002.safetensors", a), ("model-00002-of-00002.safetensors", b)] {
        let shard: HashMap<String, Tensor> = part.iter().map(|n| ((*n).clone(), tensors[*n].clone())).collect();
        candle_core::safetensors::save(&shard, dir.path().join(file))?;
        for n in part {
            map.insert((*n).clone(), serde_json::Value::String(file.to_string()));
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.path().join("model.safetensors.index.json"), index.to_string())?;
    let d = max_abs_diff(&logits(dir.path())?, &logits(&single)?)?;
    assert_eq!(d, 0.0, "sharded load must be bit-identical");
    Ok(())
}

/// A missing tensor in a sharded checkpoint names the tensor too.
#[test]
fn sharded_missing_tensor_is_named() -> Result<()> {
    let name = "model.language_model.norm.weight";
    let dir = rewritten(|t| {
        t.remove(name).context("fixture lacks the tensor")?;
        Ok(())
    })?;
    std::fs::rename(dir.path().join("model.safetensors"), dir.path().join("model-00001-of-00001.safetensors"))?;
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"metadata":{},"weight_map":{"lm_head.weight":"model-00001-of-00001.safetensors"}}"#,
    )?;
    let err = Gemma4::load(dir.path()).err().context("load should fail")?;
    assert!(matches!(err, Error::MissingTensor { .. }) && err.to_string().contains(name), "{err}");
    Ok(())
}

/// bf16/f16 weights are upcast once to f32: the model equals the f32 model built from the
/// rounded weights.
#[test]
fn half_precision_weights_are_upcast() -> Result<()> {
    for dtype in [DType::BF16, DType::F16] {
        let half = rewritten(|t| {
            for v in t.values_mut() {
                *v = v.to_dtype(dtype)?;
            }
            Ok(())
        })?;
        let rounded = rewritten(|t| {
            for v in t.values_mut() {
                *v = v.to_dtype(dtype)?.to_dtype(DType::F32)?;
            }
            Ok(())
        })?;
        let d = max_abs_diff(&logits(half.path())?, &logits(rounded.path())?)?;
        assert_eq!(d, 0.0, "{dtype:?} upcast differs from rounded f32 weights");
    }
    Ok(())
}

/// HF accepts the module-name form of the renamed vision tensors too
/// (`model.embed_vision.patch_dense.weight`, `...multimodal_embedder.embedding_projection...`).
#[test]
fn module_names_load_identically() -> Result<()> {
    let single = fixture_dir("unified-vision").join("checkpoint");
    let renamed = rewritten(|t| {
        let old: Vec<String> = t.keys().cloned().collect();
        for k in old {
            let new = k
                .replace("model.vision_embedder.", "model.embed_vision.")
                .replace("embed_vision.embedding_projection", "embed_vision.multimodal_embedder.embedding_projection");
            if new != k {
                let v = t.remove(&k).context("key vanished")?;
                t.insert(new, v);
            }
        }
        Ok(())
    })?;
    let px = Tensor::rand(0f32, 1f32, (1, 4, 48), &candle_core::Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
    let inputs = ModelInputs {
        pixel_values: Some(Dense::new(vec![1, 4, 48], px)),
        image_position_ids: Some(Dense::new(vec![1, 4, 2], vec![0, 0, 1, 0, 0, 1, -1, -1])),
        ..prompt()
    };
    let a = Gemma4::load(&single)?.image_features(&inputs)?.context("features")?;
    let b = Gemma4::load(renamed.path())?.image_features(&inputs)?.context("features")?;
    assert_eq!(a.dims(), &[3, 64]);
    assert_eq!(max_abs_diff(&a, &b)?, 0.0);
    Ok(())
}
