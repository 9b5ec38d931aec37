//! Gemma 4 prompt processing: prompt text + image files → [`ModelInputs`], reproducing
//! HF transformers 5.14.1's `Gemma4Processor.__call__` and `Gemma4UnifiedProcessor.__call__`
//! (torchvision image backend) so a case can be written as a prompt and images instead of
//! precomputed tensors. Which of the two a checkpoint uses is decided by [`family::Family`]
//! from `processor_config.json` / `config.json`.
//!
//! What HF does, step by step (and what this module mirrors):
//!
//! 1. **Images** ([`super::image`], shared by both families). Decoded to 8-bit RGB
//!    (`convert("RGB")`: alpha dropped, grey replicated; no EXIF rotation — the processor itself
//!    applies none), resized to the largest size that keeps the aspect ratio, has at most
//!    `max_soft_tokens · k²` patches of `patch_size` px and sides divisible by
//!    `k · patch_size` (`k` = `pooling_kernel_size`; `get_aspect_ratio_preserving_size`). The
//!    resize is `tvF.resize(uint8, BICUBIC, antialias=True)`, which on CPU runs PyTorch's
//!    *uint8* antialiased kernel: PIL-style filter support and centring, weights normalised in
//!    f64 then quantised to int16, width pass then height pass, each rounded and clamped back to
//!    uint8. It is reproduced bit for bit, so `pixel_values` match exactly.
//! 2. **Rescale** (`uint8 * rescale_factor`, computed in f32) and optional normalisation.
//! 3. **Patches** ([`family`]). Gemma4: `patch_size` px patches, each flattened (row, column,
//!    channel), padded with zero rows to `max_soft_tokens · k²`; positions are the patches'
//!    (x, y) grid indices; the image gets `patches / k²` soft tokens (the vision tower pools
//!    k×k). Unified: the patches merged k×k (`patches_merge`) — which amounts to `(k·p)` px
//!    patches — padded to `max_soft_tokens`, positions on the merged grid, one soft token per
//!    merged patch. Padding positions are (-1, -1).
//! 4. **Text** (identical code in both HF processors). Each `<|image|>` placeholder is replaced
//!    by `boi + image_token × n + eoi` (n = the image's soft tokens), then the whole string is
//!    tokenized with special tokens: `tokenizer.json`'s own post-processor decides BOS
//!    (`add_bos_token` in `tokenizer_config.json` is ignored by HF once a `tokenizer.json`
//!    exists). With images and no text, the prompt is the placeholders joined by spaces.
//!    Through a chat template ([`chat`], `apply_chat_template`) the rendered turn is the text,
//!    tokenized without special tokens when it starts with the BOS string.
//! 5. `mm_token_type_ids`: 1 for image soft tokens (not boi/eoi), 2 video, 3 audio, else 0.
//!
//! Checked against HF (all `pixel_values` bits, `image_position_ids`, `input_ids` and
//! `mm_token_type_ids` equal). Unified: the `unified-vision` fixture (unit test), and while
//! writing it, 140 image/config pairs (upscaling and downscaling 5×900 … 1600×1200, patch 2–16,
//! k 2–3, 70–1120 soft tokens, bicubic and bilinear, rescale, normalise, RGBA/L/LA/P PNGs) and 8
//! prompts; after the split into families, 184 more pairs (62 processor calls) again. Gemma4: the
//! `gemma4-vision` fixture (unit test), and while writing it, 480 image/config pairs in 118
//! processor calls of up to 6 images each: patch 2, 3, 4, 5, 6, 7, 8, 10, 14, 16 with k 2 or 3,
//! every supported `max_soft_tokens`, images from 1×1, 2×1 and 100×1 to 1600×1200 and 2000×3
//! (305 upscaled, 115 downscaled, 60 already at their target size), bicubic and bilinear,
//! per-channel and scalar normalisation, a non-default `rescale_factor`, `do_rescale` false
//! (HF then returns uint8, equal in value), RGB/RGBA/L/LA/P/P-with-transparency PNGs, default
//! (empty) prompts and placeholders glued to words.
//!
//! Deliberate differences: a text-only prompt yields only `input_ids` (HF adds an all-zero
//! `mm_token_type_ids`, which carries no information for a text-only model input); 16-bit
//! images and CMYK JPEGs are refused (JPEG is otherwise decoded as PIL does, [`super::jpeg`]); with
//! `do_resize` false, sides must be multiples of `k · patch_size` (see
//! [`family::ImageProcessor::process_image`]); `Gemma4ImageProcessorPil` (the PIL backend, not
//! what `AutoImageProcessor` picks when torchvision is installed) is refused. HF's
//! `validate_inputs` rejects *every* call, text-only included, when the tokenizer has no
//! `boa_token`/`eoa_token` (`audio is not None and … or boa is None or eoa is None` — an
//! operator-precedence slip, measured in 5.14.1); this port does not need those tokens.

pub mod chat;
pub mod config;
pub mod family;
mod tokens;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::Tokenizer;

use super::error::InputsError;
use super::image::load_rgb;
use chat::{ChatTemplate, Content};
use config::{read_json, ImageProcessorConfig, ImageProcessorSource};
use family::{resolve_family, ImageProcessor};
use onnx_parity_reference::{Dense, ModelInputs};
use tokens::{prepare_tokenizer, special_tokens, SpecialTokens, VIDEO_TOKEN};

/// The Gemma 4 processor of one checkpoint: tokenizer, image processor (family and settings)
/// and the multimodal special tokens.
#[derive(Debug, Clone)]
pub struct Processor {
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    /// `None` when the checkpoint has no image processor config (text-only prompts still work).
    image: Option<ImageProcessor>,
    image_config_dir: PathBuf,
    tokens: SpecialTokens,
    /// The tokenizer's chat template, if it has one ([`chat`]).
    chat_template: Option<ChatTemplate>,
    /// The named special tokens of `tokenizer_config.json`, the template's context.
    token_strings: BTreeMap<String, String>,
}

impl Processor {
    /// Loads `tokenizer.json`, `tokenizer_config.json`, `processor_config.json` and `config.json`
    /// from an HF checkpoint folder.
    pub fn from_checkpoint(dir: &Path) -> Result<Self, InputsError> {
        Self::load(dir, None)
    }

    /// Like [`Processor::from_checkpoint`], with `tokenizer.json` taken from `tokenizer` when
    /// given (its folder's `tokenizer_config.json` is used if it has one, else the checkpoint's).
    pub fn load(dir: &Path, tokenizer: Option<&Path>) -> Result<Self, InputsError> {
        if !dir.is_dir() {
            return Err(InputsError::Config { path: dir.into(), message: "checkpoint folder not found".into() });
        }
        let tokenizer_path = tokenizer.map(Path::to_path_buf).unwrap_or_else(|| dir.join("tokenizer.json"));
        let tok_err = |message: String| InputsError::Tokenizer { path: tokenizer_path.clone(), message };
        if !tokenizer_path.is_file() {
            return Err(tok_err("not found (prompts need a tokenizer: the checkpoint's tokenizer.json or the case's `tokenizer:`)".into()));
        }
        let mut tok = Tokenizer::from_file(&tokenizer_path).map_err(|e| tok_err(format!("not a tokenizers JSON file: {e}")))?;

        let tok_config_path = tokenizer
            .and_then(Path::parent)
            .map(|p| p.join("tokenizer_config.json"))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| dir.join("tokenizer_config.json"));
        let tok_config = if tok_config_path.is_file() { read_json(&tok_config_path)? } else { Value::Object(Default::default()) };
        let config_path = dir.join("config.json");
        let config = if config_path.is_file() { read_json(&config_path)? } else { Value::Object(Default::default()) };

        let template_dirs: Vec<&Path> = tokenizer.and_then(Path::parent).into_iter().chain(std::iter::once(dir)).collect();
        let chat_template = ChatTemplate::find(&template_dirs, &tok_config, &tok_config_path)?;
        let token_strings = tokens::named_tokens(&tok_config);

        prepare_tokenizer(&mut tok, &tok_config).map_err(|e| tok_err(e.to_string()))?;
        let tokens = special_tokens(&tok, &tok_config, &config, &tokenizer_path, &config_path)?;

        let image = match ImageProcessorSource::find(dir)? {
            Some(source) => {
                let settings = ImageProcessorConfig::from_json(&source.json, &source.path)?;
                Some(ImageProcessor { family: resolve_family(&source, &config, &config_path)?, config: settings })
            }
            None => None,
        };
        if let (Some(ip), Some(vision)) = (image.as_ref().map(|i| &i.config), config.get("vision_config").filter(|v| v.is_object())) {
            for (key, ours) in [("patch_size", ip.patch_size), ("pooling_kernel_size", ip.pooling_kernel_size)] {
                if let Some(model) = vision.get(key).and_then(Value::as_u64) {
                    if model as usize != ours {
                        return Err(InputsError::Config {
                            path: config_path.clone(),
                            message: format!("vision_config.{key} is {model} but the image processor config says {ours}; pixel_values would not fit the model"),
                        });
                    }
                }
            }
        }
        Ok(Processor { tokenizer: tok, tokenizer_path, image, image_config_dir: dir.into(), tokens, chat_template, token_strings })
    }

    /// The image processor (family and settings) in use, if the checkpoint has one.
    pub fn image_processor(&self) -> Option<&ImageProcessor> {
        self.image.as_ref()
    }

    /// The tokenizer's chat template, if any.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The image placeholder string (`<|image|>`).
    pub fn image_placeholder(&self) -> &str {
        &self.tokens.image
    }

    /// `processor(images=[images], text=[prompt])` for one prompt. Each `<|image|>` in the prompt
    /// takes the next image; with images and an empty prompt, HF's default prompt (the
    /// placeholders joined by spaces) is used. Text-only prompts give only `input_ids`.
    pub fn process(&self, prompt: &str, images: &[PathBuf]) -> Result<ModelInputs, InputsError> {
        let t = &self.tokens;
        let default_prompt;
        let prompt = if prompt.is_empty() && !images.is_empty() {
            default_prompt = vec![t.image.as_str(); images.len()].join(" ");
            default_prompt.as_str()
        } else {
            prompt
        };
        self.expand_and_encode(prompt, images, true)
    }

    /// `processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)` for
    /// one user turn: the template renders `content`, whose image items take `images` in order,
    /// and the text is tokenized without special tokens when it already starts with the BOS
    /// string (HF's rule: the template emits `<bos>` itself, a second one must not be added).
    pub fn process_chat(&self, content: &[Content], images: &[PathBuf]) -> Result<ModelInputs, InputsError> {
        let template = self.chat_template.as_ref().ok_or_else(|| InputsError::Tokenizer {
            path: self.tokenizer_path.clone(),
            message: "has no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json's chat_template)".into(),
        })?;
        let rendered = template.render_user_turn(content, &self.token_strings)?;
        let add_special_tokens = match self.token_strings.get("bos_token") {
            Some(bos) => !rendered.starts_with(bos.as_str()),
            None => true,
        };
        self.expand_and_encode(&rendered, images, add_special_tokens)
    }

    /// The shared second half of both calls: each placeholder expanded to the image's soft
    /// tokens, the text tokenized, the tensors assembled.
    fn expand_and_encode(&self, prompt: &str, images: &[PathBuf], add_special_tokens: bool) -> Result<ModelInputs, InputsError> {
        let t = &self.tokens;
        let placeholders = prompt.matches(t.image.as_str()).count();
        if placeholders != images.len() {
            return Err(InputsError::Invalid(format!(
                "the prompt has {placeholders} {} placeholder(s) but {} image(s) were given; HF requires one placeholder per image",
                t.image,
                images.len()
            )));
        }

        let mut processed = Vec::with_capacity(images.len());
        let mut image_config = None;
        if !images.is_empty() {
            let ip = self.image.as_ref().ok_or_else(|| InputsError::Config {
                path: self.image_config_dir.join("processor_config.json"),
                message: "not found (nor preprocessor_config.json); images need the image processor settings".into(),
            })?;
            for path in images {
                let img = load_rgb(path)?;
                processed.push(ip.process_image(&img, path)?);
            }
            image_config = Some(ip);
        }

        let mut text = String::with_capacity(prompt.len());
        for (i, piece) in prompt.split(t.image.as_str()).enumerate() {
            if i > 0 {
                let n = processed[i - 1].num_soft_tokens;
                text.push_str(&t.boi);
                text.push_str(&t.image.repeat(n));
                text.push_str(&t.eoi);
            }
            text.push_str(piece);
        }

        let enc = self
            .tokenizer
            .encode(text.as_str(), add_special_tokens)
            .map_err(|e| InputsError::Tokenizer { path: self.tokenizer_path.clone(), message: format!("encoding the prompt: {e}") })?;
        let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i as i64).collect();
        // `_check_special_mm_tokens`: each placeholder string must have become exactly one id.
        let mut checks = vec![(t.image.as_str(), t.image_id)];
        if let Some(v) = t.video_id {
            checks.push((VIDEO_TOKEN, v));
        }
        if let Some((s, id)) = &t.audio {
            checks.push((s.as_str(), *id));
        }
        for (s, id) in checks {
            let in_text = text.matches(s).count();
            let in_ids = ids.iter().filter(|&&x| x == id as i64).count();
            if in_text != in_ids {
                return Err(InputsError::Tokenizer {
                    path: self.tokenizer_path.clone(),
                    message: format!("{s} occurs {in_text} times in the expanded prompt but id {id} {in_ids} times in input_ids; the tokenizer must keep {s} as one special token"),
                });
            }
        }

        let Some(ip) = image_config else {
            return Ok(ModelInputs::from_ids(ids));
        };
        let (rows, dim) = (ip.rows(), ip.patch_dim());
        let mm: Vec<i64> = ids
            .iter()
            .map(|&id| {
                if id == t.image_id as i64 {
                    1
                } else if t.video_id.is_some_and(|v| id == v as i64) {
                    2
                } else if t.audio.as_ref().is_some_and(|(_, a)| id == *a as i64) {
                    3
                } else {
                    0
                }
            })
            .collect();
        let n = processed.len();
        Ok(ModelInputs {
            input_ids: ids,
            pixel_values: Some(Dense::new(vec![n, rows, dim], processed.iter().flat_map(|p| p.pixel_values.iter().copied()).collect())),
            image_position_ids: Some(Dense::new(vec![n, rows, 2], processed.iter().flat_map(|p| p.position_ids.iter().copied()).collect())),
            mm_token_type_ids: Some(mm),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use family::Family;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision")
    }

    /// Runs the prompt and images of `fixtures/<name>/processor.json` through the checkpoint's
    /// processor and asserts HF's `processor.safetensors` is reproduced bit for bit; returns the
    /// family the checkpoint resolved to.
    fn assert_reproduces_hf_fixture(name: &str) -> Family {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
        let desc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("processor.json")).unwrap()).unwrap();
        let prompt = desc["text"].as_str().unwrap();
        let images: Vec<PathBuf> = desc["images"].as_array().unwrap().iter().map(|p| dir.join(p.as_str().unwrap())).collect();
        let p = Processor::from_checkpoint(&dir.join("checkpoint")).unwrap();
        let got = p.process(prompt, &images).unwrap();
        let want = crate::inputs::file::load_safetensors(&dir.join("processor.safetensors")).unwrap();
        assert_eq!(got.input_ids, want.input_ids);
        assert_eq!(got.mm_token_type_ids, want.mm_token_type_ids);
        assert_eq!(got.image_position_ids, want.image_position_ids);
        let (g, w) = (got.pixel_values.unwrap(), want.pixel_values.unwrap());
        assert_eq!(g.shape, w.shape);
        let max_diff = g.data.iter().zip(&w.data).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        // Bit-exact: the uint8 antialiased resize and the f32 rescale are reproduced exactly.
        assert_eq!(max_diff, 0.0, "pixel_values max abs diff vs HF");
        assert!(g.data.iter().zip(&w.data).all(|(a, b)| a.to_bits() == b.to_bits()));
        p.image_processor().map(|ip| ip.family).unwrap()
    }

    /// Guards: the Unified path reproduces HF's `Gemma4UnifiedProcessor` output on the fixture
    /// bit for bit (ids, token types, positions and every `pixel_values` bit).
    #[test]
    fn processor_reproduces_hf_fixture_exactly() {
        assert_eq!(assert_reproduces_hf_fixture("unified-vision"), Family::Unified);
    }

    /// Guards: the Gemma4 path reproduces HF's `Gemma4Processor` output (unmerged patches padded
    /// to `max_soft_tokens · k²`, `patches / k²` image tokens per image) on the `gemma4-vision`
    /// fixture bit for bit.
    #[test]
    fn gemma4_processor_reproduces_hf_fixture_exactly() {
        assert_eq!(assert_reproduces_hf_fixture("gemma4-vision"), Family::Gemma4);
    }

    /// Guards: BOS comes from `tokenizer.json`'s post-processor, and a text-only prompt yields
    /// no image tensors.
    #[test]
    fn text_only_prompt_gets_bos_and_nothing_else() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let got = p.process("dado bupa", &[]).unwrap();
        assert_eq!(got.input_ids[0], 2);
        assert_eq!(got.input_ids.len(), 3);
        assert!(got.pixel_values.is_none() && got.image_position_ids.is_none() && got.mm_token_type_ids.is_none());
    }

    /// Guards: a missing image file is an error naming it.
    #[test]
    fn missing_image_is_an_error_naming_it() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let missing = fixture().join("images/does-not-exist.png");
        let e = p.process("see <|image|> here", &[missing]).unwrap_err().to_string();
        assert!(e.contains("does-not-exist.png") && e.contains("cannot open"), "{e}");
    }

    /// Guards: HF's one-placeholder-per-image rule.
    #[test]
    fn placeholder_count_must_match_images() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let e = p.process("no placeholder", &[fixture().join("images/a.png")]).unwrap_err().to_string();
        assert!(e.contains("0 <|image|> placeholder(s) but 1 image(s)"), "{e}");
    }

    /// Guards: a file that is not an image is an error naming it.
    #[test]
    fn undecodable_image_is_an_error_naming_it() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let bad = fixture().join("processor.json");
        let e = p.process("<|image|>", &[bad]).unwrap_err().to_string();
        assert!(e.contains("processor.json") && e.contains("cannot decode"), "{e}");
    }
}
