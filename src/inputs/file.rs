//! The inputs file: the tensors both back ends receive, in the HF processor's names and layout,
//! as safetensors (a case's `inputs.tensors`, what `onnx-parity inputs` writes).

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::error::InputsError;
use crate::onnx::protocol;
use onnx_parity_reference::{Dense, ModelInputs};

/// Reads a safetensors file with `input_ids` `[1,S]` and optional `pixel_values`,
/// `image_position_ids`, `mm_token_type_ids` (the HF processor's names and layout).
pub fn load_safetensors(path: &Path) -> Result<ModelInputs, InputsError> {
    let bytes = std::fs::read(path).map_err(|source| InputsError::Read { path: path.into(), source })?;
    parse_safetensors(&bytes, path)
}

/// [`load_safetensors`] on bytes already read; `path` names the source in errors.
pub fn parse_safetensors(bytes: &[u8], path: &Path) -> Result<ModelInputs, InputsError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| InputsError::Format { path: path.into(), message: format_error(bytes, &e) })?;
    let err = |name: &str, expected: String| InputsError::Tensor { path: path.into(), name: name.into(), expected };
    for audio in ["input_features", "input_features_mask"] {
        if st.names().contains(&audio) {
            return Err(err(audio, "audio inputs are not supported (audio is out of scope: text and images only)".into()));
        }
    }
    let ids = read_i64(&st, protocol::INPUT_IDS, path)?.ok_or_else(|| err(protocol::INPUT_IDS, "required, i64 [1, S]".into()))?;
    if ids.shape.len() != 2 || ids.shape[0] != 1 || ids.shape[1] == 0 {
        return Err(err(protocol::INPUT_IDS, format!("shape [1, S] with S > 0, found {:?}", ids.shape)));
    }
    let seq = ids.shape[1];
    let pixel_values = read_f32(&st, protocol::PIXEL_VALUES, path)?;
    let image_position_ids = read_i64(&st, protocol::IMAGE_POSITION_IDS, path)?;
    let mm = read_i64(&st, "mm_token_type_ids", path)?;
    match (&pixel_values, &image_position_ids) {
        (Some(p), Some(q)) => {
            if p.shape.len() != 3 {
                return Err(err(protocol::PIXEL_VALUES, format!("rank 3 [n_img, max_patches, patch_dim], found {:?}", p.shape)));
            }
            if q.shape != [p.shape[0], p.shape[1], 2] {
                return Err(err(
                    protocol::IMAGE_POSITION_IDS,
                    format!("shape [{}, {}, 2] to match pixel_values, found {:?}", p.shape[0], p.shape[1], q.shape),
                ));
            }
        }
        (None, None) => {}
        (Some(_), None) => return Err(err(protocol::IMAGE_POSITION_IDS, "required when pixel_values is given".into())),
        (None, Some(_)) => return Err(err(protocol::PIXEL_VALUES, "required when image_position_ids is given".into())),
    }
    if let Some(m) = &mm {
        if m.shape != [1, seq] {
            return Err(err("mm_token_type_ids", format!("shape [1, {seq}] like input_ids, found {:?}", m.shape)));
        }
    }
    Ok(ModelInputs { input_ids: ids.data, pixel_values, image_position_ids, mm_token_type_ids: mm.map(|m| m.data) })
}

/// The safetensors crate's error, with the sizes involved where it gives none (a truncated file
/// reads "invalid header length" or "incomplete metadata, file not fully covered" otherwise).
fn format_error(bytes: &[u8], e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    let after = bytes.len().saturating_sub(8);
    let claimed = bytes.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_le_bytes).unwrap_or_default();
    match e {
        E::HeaderTooSmall => format!("{} bytes, fewer than the 8 of the header length", bytes.len()),
        E::HeaderTooLarge | E::InvalidHeaderLength => {
            format!("{e}: the header length says {claimed} bytes, the file holds {after} after it (truncated, or not a safetensors file)")
        }
        E::MetadataIncompleteBuffer => {
            // The end of the data the header describes (its largest end offset).
            let header = usize::try_from(claimed).ok().and_then(|n| bytes.get(8..8usize.checked_add(n)?));
            let json: Option<serde_json::Value> = header.and_then(|h| serde_json::from_slice(h).ok());
            let end = json
                .as_ref()
                .and_then(|v| v.as_object())
                .map(|m| m.values().filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64()).max().unwrap_or(0));
            let have = after.saturating_sub(usize::try_from(claimed).unwrap_or(usize::MAX));
            match end {
                Some(end) => {
                    format!("the header's data_offsets describe {end} bytes of tensor data, the file holds {have} (truncated or padded)")
                }
                None => e.to_string(),
            }
        }
        other => other.to_string(),
    }
}

fn view<'a>(
    st: &'a SafeTensors<'a>,
    name: &str,
    path: &Path,
    want: Dtype,
) -> Result<Option<safetensors::tensor::TensorView<'a>>, InputsError> {
    match st.tensor(name) {
        Err(_) => Ok(None),
        Ok(v) if v.dtype() == want => Ok(Some(v)),
        Ok(v) => {
            Err(InputsError::Tensor { path: path.into(), name: name.into(), expected: format!("dtype {want:?}, found {:?}", v.dtype()) })
        }
    }
}

fn read_i64(st: &SafeTensors<'_>, name: &str, path: &Path) -> Result<Option<Dense<i64>>, InputsError> {
    Ok(view(st, name, path, Dtype::I64)?.map(|v| {
        let data = v.data().chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect();
        Dense::new(v.shape().to_vec(), data)
    }))
}

fn read_f32(st: &SafeTensors<'_>, name: &str, path: &Path) -> Result<Option<Dense<f32>>, InputsError> {
    Ok(view(st, name, path, Dtype::F32)?.map(|v| {
        let data = v.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Dense::new(v.shape().to_vec(), data)
    }))
}

/// The tensors both back ends receive, as safetensors (`input_ids` `[1,S]` i64, and with images
/// `pixel_values`, `image_position_ids`, `mm_token_type_ids` `[1,S]`) — the layout
/// [`load_safetensors`] reads, so a written file is a case's `inputs.tensors`.
pub fn to_safetensors(inputs: &ModelInputs) -> Result<Vec<u8>, crate::tensor_file::TensorFileError> {
    let mut file = crate::tensor_file::TensorFile::new().i64(protocol::INPUT_IDS, vec![1, inputs.input_ids.len()], &inputs.input_ids);
    if let Some(px) = &inputs.pixel_values {
        file = file.f32(protocol::PIXEL_VALUES, px.shape.clone(), &px.data);
    }
    if let Some(pos) = &inputs.image_position_ids {
        file = file.i64(protocol::IMAGE_POSITION_IDS, pos.shape.clone(), &pos.data);
    }
    if let Some(mm) = &inputs.mm_token_type_ids {
        file = file.i64("mm_token_type_ids", vec![1, mm.len()], mm);
    }
    file.to_bytes()
}
