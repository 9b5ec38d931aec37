//! `ModelInputs`: the one set of tensors both back ends receive (docs/design.md §3), in the HF processor
//! layout of docs/design.md §4. Built from a case's explicit `input_ids`, its `tensors:` safetensors file,
//! or (see `processor`) prompts, a tokenizer and images.

pub mod error;
pub mod file;
pub mod image;
pub mod jpeg;
pub mod processor;
pub mod prompt;
pub mod replay;

use std::path::{Path, PathBuf};

pub use error::InputsError;
pub use file::{load_safetensors, parse_safetensors, to_safetensors};
pub use onnx_parity_reference::{Dense, ModelInputs};

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
pub use crate::context::TESTDATA_ENV;

/// An image of a case: relative to the case YAML's folder when it exists there, else under
/// `$ONNX_PARITY_TESTDATA` (so mobius's case folder runs unchanged), else the YAML-relative path
/// (whose absence the image loader reports).
fn image_path(case: &crate::case::Case, name: &str) -> PathBuf {
    let local = case.path.parent().unwrap_or(Path::new("")).join(name);
    if local.exists() || Path::new(name).is_absolute() {
        return local;
    }
    match &crate::context::current().testdata {
        Some(dir) if dir.join(name).exists() => dir.join(name),
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
