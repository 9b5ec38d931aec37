//! `ModelInputs`: the one set of tensors both back ends receive (DESIGN §3), in the HF processor
//! layout of DESIGN §4. Built from a case's explicit `input_ids`, its `tensors:` safetensors file,
//! or (see `processor`) prompts, a tokenizer and images.

pub mod image;
pub mod jpeg;
pub mod processor;
pub mod prompt;
pub mod replay;

use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

/// Why inputs could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a safetensors file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}`: {expected}")]
    Tensor { path: PathBuf, name: String, expected: String },
    #[error("the case gives no inputs: set `inputs.input_ids`, `inputs.tensors`, or `inputs.prompts` with a `checkpoint:`")]
    NoInputs,
    /// A checkpoint/processor configuration file that is missing, malformed or inconsistent.
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    /// The tokenizer file, or what the processor needs from it.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// An image file that cannot be opened, decoded or processed.
    #[error("image {path}: {message}")]
    Image { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

pub use onnx_parity_reference::{Dense, ModelInputs};

/// Reads a safetensors file with `input_ids` [1,S] and optional `pixel_values`,
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
    let ids = read_i64(&st, "input_ids", path)?.ok_or_else(|| err("input_ids", "required, i64 [1, S]".into()))?;
    if ids.shape.len() != 2 || ids.shape[0] != 1 || ids.shape[1] == 0 {
        return Err(err("input_ids", format!("shape [1, S] with S > 0, found {:?}", ids.shape)));
    }
    let seq = ids.shape[1];
    let pixel_values = read_f32(&st, "pixel_values", path)?;
    let image_position_ids = read_i64(&st, "image_position_ids", path)?;
    let mm = read_i64(&st, "mm_token_type_ids", path)?;
    match (&pixel_values, &image_position_ids) {
        (Some(p), Some(q)) => {
            if p.shape.len() != 3 {
                return Err(err("pixel_values", format!("rank 3 [n_img, max_patches, patch_dim], found {:?}", p.shape)));
            }
            if q.shape != [p.shape[0], p.shape[1], 2] {
                return Err(err(
                    "image_position_ids",
                    format!("shape [{}, {}, 2] to match pixel_values, found {:?}", p.shape[0], p.shape[1], q.shape),
                ));
            }
        }
        (None, None) => {}
        (Some(_), None) => return Err(err("image_position_ids", "required when pixel_values is given".into())),
        (None, Some(_)) => return Err(err("pixel_values", "required when image_position_ids is given".into())),
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

/// The inputs a case describes: `inputs.tensors` (HF processor output), else explicit
/// `inputs.input_ids`, else prompts (+ images) through the tokenizer and image processor.
pub fn for_case(case: &crate::case::Case) -> Result<ModelInputs, InputsError> {
    Ok(for_case_with_source(case)?.0)
}

/// Where a case's inputs came from (the `inputs` command's summary).
#[derive(Debug, Clone, PartialEq)]
pub enum InputsSource {
    Tensors(PathBuf),
    InputIds,
    Prompt(prompt::PromptFormat),
}

impl std::fmt::Display for InputsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputsSource::Tensors(p) => write!(f, "inputs.tensors {}", p.display()),
            InputsSource::InputIds => f.write_str("inputs.input_ids"),
            InputsSource::Prompt(format) => write!(f, "the prompt through the tokenizer and image processor, {format}"),
        }
    }
}

/// [`for_case`], and where the inputs came from.
pub fn for_case_with_source(case: &crate::case::Case) -> Result<(ModelInputs, InputsSource), InputsError> {
    if let Some(path) = &case.inputs.tensors {
        return Ok((load_safetensors(path)?, InputsSource::Tensors(path.clone())));
    }
    if let Some(ids) = &case.inputs.input_ids {
        if ids.is_empty() {
            return Err(InputsError::Invalid(format!("{}: inputs.input_ids is empty", case.path.display())));
        }
        return Ok((ModelInputs::from_ids(ids.clone()), InputsSource::InputIds));
    }
    if !case.inputs.prompts.is_empty() || !case.inputs.images.is_empty() {
        let (inputs, format) = from_prompt(case)?;
        return Ok((inputs, InputsSource::Prompt(format)));
    }
    Err(InputsError::NoInputs)
}

/// The tensors both back ends receive, as safetensors (`input_ids` [1,S] i64, and with images
/// `pixel_values`, `image_position_ids`, `mm_token_type_ids` [1,S]) — the layout
/// [`load_safetensors`] reads, so a written file is a case's `inputs.tensors`.
pub fn to_safetensors(inputs: &ModelInputs) -> Result<Vec<u8>, String> {
    let mut file = crate::tensor_file::TensorFile::new().i64("input_ids", vec![1, inputs.input_ids.len()], &inputs.input_ids);
    if let Some(px) = &inputs.pixel_values {
        file = file.f32("pixel_values", px.shape.clone(), &px.data);
    }
    if let Some(pos) = &inputs.image_position_ids {
        file = file.i64("image_position_ids", pos.shape.clone(), &pos.data);
    }
    if let Some(mm) = &inputs.mm_token_type_ids {
        file = file.i64("mm_token_type_ids", vec![1, mm.len()], mm);
    }
    file.to_bytes()
}

/// Soft tokens per image: the lengths of the runs of image tokens (`mm_token_type_ids` = 1).
pub fn soft_tokens_per_image(inputs: &ModelInputs) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut run = 0;
    for &t in inputs.mm_token_type_ids.iter().flatten().chain(std::iter::once(&0)) {
        if t == 1 {
            run += 1;
        } else if run > 0 {
            runs.push(run);
            run = 0;
        }
    }
    runs
}

/// `ONNX_PARITY_TESTDATA`: where images named by bare file names resolve (mobius's cases name
/// `pipeline-cat-chonk.jpeg`, which lives in mobius's `testdata/`).
pub const TESTDATA_ENV: &str = "ONNX_PARITY_TESTDATA";

/// An image of a case: relative to the case YAML's folder when it exists there, else under
/// `$ONNX_PARITY_TESTDATA` (so mobius's case folder runs unchanged), else the YAML-relative path
/// (whose absence the image loader reports).
fn image_path(case: &crate::case::Case, name: &str) -> PathBuf {
    let local = case.path.parent().unwrap_or(Path::new("")).join(name);
    if local.exists() || Path::new(name).is_absolute() {
        return local;
    }
    match std::env::var_os(TESTDATA_ENV) {
        Some(dir) if PathBuf::from(&dir).join(name).exists() => PathBuf::from(dir).join(name),
        _ => local,
    }
}

/// Prompt (+ images) through the checkpoint's processor ([`processor::Processor`]), in the
/// format [`prompt::format_for`] picks. Image paths are resolved against the case YAML's folder,
/// like every other path of a case. Only one prompt is supported: the back ends run batch size 1
/// (mobius cases have one prompt).
fn from_prompt(case: &crate::case::Case) -> Result<(ModelInputs, prompt::PromptFormat), InputsError> {
    let file = case.path.display();
    if case.inputs.prompts.len() > 1 {
        return Err(InputsError::Invalid(format!(
            "{file}: inputs.prompts has {} prompts; only one is supported (inputs are batch size 1)",
            case.inputs.prompts.len()
        )));
    }
    if !case.inputs.audio.is_empty() {
        return Err(InputsError::Invalid(format!("{file}: inputs.audio is not supported by the prompt processor (only text and images)")));
    }
    let checkpoint = crate::artifacts::Artifacts::of(case).checkpoint.ok_or_else(|| {
        InputsError::Invalid(format!(
            "{file}: prompts need a checkpoint (`checkpoint:`, or {} in the HF cache) for its tokenizer.json, \
             tokenizer_config.json, processor_config.json and config.json",
            case.model_id
        ))
    })?;
    let processor = processor::Processor::load(&checkpoint, case.tokenizer.as_deref())?;
    let images: Vec<PathBuf> = case.inputs.images.iter().map(|p| image_path(case, p)).collect();
    let text = case.inputs.prompts.first().map(String::as_str).unwrap_or("");
    let format = prompt::format_for(case, &processor)?;
    let inputs = prompt::process(&processor, &format, text, &images)?;
    Ok((inputs, format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Case;

    /// A case written next to the fixture (so its relative paths resolve like a real case's).
    fn case(body: &str) -> Case {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision");
        let yaml = format!(
            "model_id: m\nmodel_type: gemma4_unified\nrevision: r\ntask_type: image-text-to-text\ndtype: float32\nlevel: L3\n{body}"
        );
        Case::from_yaml_str(&yaml, &dir.join("prompt-case.yaml")).unwrap()
    }

    #[test]
    fn prompt_case_goes_through_the_checkpoint_processor() {
        let text = "dado bupa bipi didu bomo <|image|> bese dedu beku <|image|> dega buna bebi xni";
        let c = case(&format!("checkpoint: checkpoint\ninputs:\n  prompts: [\"{text}\"]\n  images: [images/a.png, images/b.png]\n"));
        let got = for_case(&c).unwrap();
        let want = load_safetensors(&c.path.parent().unwrap().join("processor.safetensors")).unwrap();
        assert_eq!(got, want);
    }

    /// Guards: the gemma4 prompt case (cases/vision-language/gemma4-vision-prompt.yaml) gives
    /// exactly what HF's Gemma4Processor gave for the same prompt and image.
    #[test]
    fn gemma4_prompt_case_reproduces_hf_processor_output() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/vision-language/gemma4-vision-prompt.yaml");
        let c = Case::load(&path).unwrap();
        let got = for_case(&c).unwrap();
        let want =
            load_safetensors(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-vision/inputs-one-image.safetensors")).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn prompt_case_errors_are_clear() {
        let two = case("checkpoint: checkpoint\ninputs:\n  prompts: [a, b]\n");
        assert!(for_case(&two).unwrap_err().to_string().contains("2 prompts; only one is supported"));
        let no_ckpt = case("inputs:\n  prompts: [a]\n");
        assert!(for_case(&no_ckpt).unwrap_err().to_string().contains("prompts need a checkpoint"));
        let missing = case("checkpoint: checkpoint\ninputs:\n  prompts: [\"x <|image|>\"]\n  images: [images/nope.png]\n");
        let e = for_case(&missing).unwrap_err().to_string();
        assert!(e.contains("images/nope.png") && e.contains("cannot open"), "{e}");
    }
}
