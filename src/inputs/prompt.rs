//! How a case's prompt and images become one processor call — mobius's conventions, so that
//! mobius's goldens' `input_ids` come out of mobius's case files unchanged.
//!
//! - **Chat template** (every task but `text-generation`, when the tokenizer has one, or
//!   `chat_template: true`): the prompt and images become one user turn, images first
//!   (`[{"type": "image"}, …, {"type": "text", "text": prompt}]`), rendered with
//!   `add_generation_prompt` — how mobius made its `-it` vision-language goldens and its
//!   `gemma4-assistant` golden. A prompt that places `<|image|>` itself keeps that order (text
//!   and image items interleaved as written).
//! - **Plain** (`text-generation` cases — mobius's text goldens are completions of the bare
//!   prompt, `-it` models included —, tokenizers without a template, or `chat_template: false`):
//!   the prompt as written, with one
//!   `<|image|>` per image prepended when it has none (mobius's 12B golden: `<bos><|image>…<image|>This
//!   image shows`).

use std::fmt;
use std::path::PathBuf;

use super::error::InputsError;
use super::processor::chat::Content;
use super::processor::Processor;
use crate::case::Case;
use onnx_parity_reference::ModelInputs;

/// The task whose prompts are plain completions by default (mobius's causal-lm cases).
const COMPLETION_TASK: &str = "text-generation";

/// How the prompt was turned into text, and why (the `inputs` summary prints it).
#[derive(Debug, Clone, PartialEq)]
pub enum PromptFormat {
    /// Rendered through the chat template read from this file.
    Chat { template: PathBuf },
    /// The prompt as written (placeholders prepended for images), for the reason given.
    Plain { why: &'static str },
}

impl fmt::Display for PromptFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptFormat::Chat { template } => write!(f, "chat template {}", template.display()),
            PromptFormat::Plain { why } => write!(f, "no chat template ({why})"),
        }
    }
}

/// The format a case's prompt takes with this processor.
pub fn format_for(case: &Case, processor: &Processor) -> Result<PromptFormat, InputsError> {
    let template = processor.chat_template().map(|t| t.source.clone());
    match (case.chat_template, template) {
        (Some(false), _) => Ok(PromptFormat::Plain { why: "chat_template: false" }),
        (Some(true), Some(template)) => Ok(PromptFormat::Chat { template }),
        (Some(true), None) => Err(InputsError::Invalid(format!(
            "{}: chat_template: true, but the tokenizer has no chat template (chat_template.jinja, chat_template.json \
             or tokenizer_config.json's chat_template beside the checkpoint or the case's tokenizer)",
            case.path.display()
        ))),
        (None, None) => Ok(PromptFormat::Plain { why: "the tokenizer has none" }),
        (None, Some(_)) if case.task_type.as_deref() == Some(COMPLETION_TASK) => {
            Ok(PromptFormat::Plain { why: "a text-generation case: a plain completion, as mobius's text goldens" })
        }
        (None, Some(template)) => Ok(PromptFormat::Chat { template }),
    }
}

/// Runs the processor on a case's prompt and images in `format`.
pub fn process(processor: &Processor, format: &PromptFormat, prompt: &str, images: &[PathBuf]) -> Result<ModelInputs, InputsError> {
    let placeholder = processor.image_placeholder();
    match format {
        PromptFormat::Chat { .. } => {
            let content = user_content(prompt, images.len(), placeholder)?;
            processor.process_chat(&content, images)
        }
        PromptFormat::Plain { .. } => {
            let prompt = if !images.is_empty() && !prompt.is_empty() && !prompt.contains(placeholder) {
                format!("{}{prompt}", placeholder.repeat(images.len()))
            } else {
                prompt.to_string()
            };
            processor.process(&prompt, images)
        }
    }
}

/// One user turn's content items: images first, then the text; or, when the prompt holds
/// placeholders, text and images in the prompt's order. Empty text pieces are left out.
pub fn user_content(prompt: &str, n_images: usize, placeholder: &str) -> Result<Vec<Content>, InputsError> {
    let text = |s: &str| (!s.is_empty()).then(|| Content::Text(s.to_string()));
    let placed = prompt.matches(placeholder).count();
    if placed == 0 {
        return Ok(std::iter::repeat_n(Content::Image, n_images).chain(text(prompt)).collect());
    }
    if placed != n_images {
        return Err(InputsError::Invalid(format!(
            "the prompt has {placed} {placeholder} placeholder(s) but {n_images} image(s) were given: place one per image, or none (images then come first)"
        )));
    }
    let mut content = Vec::new();
    for (i, piece) in prompt.split(placeholder).enumerate() {
        if i > 0 {
            content.push(Content::Image);
        }
        content.extend(text(piece));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: mobius's layout (images first) and placeholders kept where the prompt puts them.
    #[test]
    fn user_content_layout() {
        use Content::{Image, Text};
        assert_eq!(user_content("Describe.", 2, "<|image|>").unwrap(), vec![Image, Image, Text("Describe.".into())]);
        assert_eq!(user_content("", 1, "<|image|>").unwrap(), vec![Image]);
        assert_eq!(user_content("See <|image|> and", 1, "<|image|>").unwrap(), vec![Text("See ".into()), Image, Text(" and".into())]);
        assert!(user_content("<|image|>", 2, "<|image|>").unwrap_err().to_string().contains("1 <|image|> placeholder(s) but 2 image(s)"));
    }
}
