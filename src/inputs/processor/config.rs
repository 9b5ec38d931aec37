//! The image processor settings of a checkpoint: the class attributes that
//! `Gemma4ImageProcessor` and `Gemma4UnifiedImageProcessor` share (the two classes declare the
//! same attributes with the same defaults in transformers 5.14.1), overridden by the
//! checkpoint's `processor_config.json` (`image_processor` section) or
//! `preprocessor_config.json`. Which family uses them is decided in [`super::family`].

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::inputs::error::InputsError;
use crate::inputs::image::Resample;

/// A JSON file of the checkpoint (config, processor, tokenizer config), its errors naming it.
pub(crate) fn read_json(path: &Path) -> Result<Value, InputsError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputsError::Read { path: path.into(), source })?;
    serde_json::from_str(&text).map_err(|e| InputsError::Config { path: path.into(), message: format!("not valid JSON: {e}") })
}

/// `_SUPPORTED_SOFT_TOKENS` of both image processors; HF rejects other values.
pub const SUPPORTED_SOFT_TOKENS: [usize; 5] = [70, 140, 280, 560, 1120];

/// Image processor settings (HF field names).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessorConfig {
    pub patch_size: usize,
    pub pooling_kernel_size: usize,
    pub max_soft_tokens: usize,
    pub do_resize: bool,
    pub resample: Resample,
    pub do_rescale: bool,
    pub rescale_factor: f64,
    pub do_normalize: bool,
    pub image_mean: [f64; 3],
    pub image_std: [f64; 3],
}

impl Default for ImageProcessorConfig {
    /// The class attributes of `Gemma4ImageProcessor` / `Gemma4UnifiedImageProcessor`.
    fn default() -> Self {
        ImageProcessorConfig {
            patch_size: 16,
            pooling_kernel_size: 3,
            max_soft_tokens: 280,
            do_resize: true,
            resample: Resample::Bicubic,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: false,
            image_mean: [0.0; 3],
            image_std: [1.0; 3],
        }
    }
}

/// Where a checkpoint keeps its image processor settings: the JSON object and the file it
/// came from, plus `processor_config.json`'s top level when that file exists (its
/// `processor_class` helps decide the family, see [`super::family`]).
#[derive(Debug, Clone)]
pub struct ImageProcessorSource {
    pub json: Value,
    pub path: PathBuf,
    /// The settings are `processor_config.json`'s `image_processor` section (else the top level
    /// of `preprocessor_config.json`).
    pub nested: bool,
    pub processor_config: Option<(Value, PathBuf)>,
}

impl ImageProcessorSource {
    /// `processor_config.json` (its `image_processor` object) or, for older checkpoints,
    /// `preprocessor_config.json`. `None` when the folder has neither settings.
    pub fn find(dir: &Path) -> Result<Option<Self>, InputsError> {
        let processor = dir.join("processor_config.json");
        let processor_config = if processor.is_file() { Some((read_json(&processor)?, processor)) } else { None };
        if let Some((json, path)) = &processor_config {
            if let Some(ip) = json.get("image_processor") {
                return Ok(Some(ImageProcessorSource { json: ip.clone(), path: path.clone(), nested: true, processor_config }));
            }
        }
        let pre = dir.join("preprocessor_config.json");
        if pre.is_file() {
            return Ok(Some(ImageProcessorSource { json: read_json(&pre)?, path: pre, nested: false, processor_config }));
        }
        Ok(None)
    }
}

impl ImageProcessorConfig {
    /// Reads the image processor's JSON object. Keys HF's image processor would not act on
    /// (`image_processor_type`, `do_convert_rgb`, …) are ignored; known keys with a wrong type or
    /// value are errors, because silently falling back to a default would change `pixel_values`.
    pub fn from_json(obj: &Value, path: &Path) -> Result<Self, InputsError> {
        let err = |message: String| InputsError::Config { path: path.into(), message };
        let map = obj.as_object().ok_or_else(|| err("expected a JSON object for the image processor".into()))?;
        let mut c = ImageProcessorConfig::default();
        let uint = |key: &str, v: &Value| -> Result<usize, InputsError> {
            v.as_u64().filter(|&n| n > 0).map(|n| n as usize).ok_or_else(|| err(format!("`{key}`: expected a positive integer, found {v}")))
        };
        let boolean = |key: &str, v: &Value| v.as_bool().ok_or_else(|| err(format!("`{key}`: expected true or false, found {v}")));
        let triple = |key: &str, v: &Value| -> Result<[f64; 3], InputsError> {
            if let Some(x) = v.as_f64() {
                return Ok([x; 3]);
            }
            match v.as_array().map(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>()) {
                Some(Some(a)) if a.len() == 3 => Ok([a[0], a[1], a[2]]),
                _ => Err(err(format!("`{key}`: expected a number or 3 numbers (one per RGB channel), found {v}"))),
            }
        };
        for (key, v) in map {
            if v.is_null() {
                continue;
            }
            match key.as_str() {
                "patch_size" => c.patch_size = uint(key, v)?,
                "pooling_kernel_size" => c.pooling_kernel_size = uint(key, v)?,
                "max_soft_tokens" => c.max_soft_tokens = uint(key, v)?,
                "do_resize" => c.do_resize = boolean(key, v)?,
                "do_rescale" => c.do_rescale = boolean(key, v)?,
                "do_normalize" => c.do_normalize = boolean(key, v)?,
                "rescale_factor" => {
                    c.rescale_factor = v.as_f64().ok_or_else(|| err(format!("`rescale_factor`: expected a number, found {v}")))?
                }
                "image_mean" => c.image_mean = triple(key, v)?,
                "image_std" => c.image_std = triple(key, v)?,
                "resample" => {
                    c.resample = v
                        .as_i64()
                        .and_then(Resample::from_pil)
                        .ok_or_else(|| err(format!("`resample`: {v} is not supported; expected 3 (BICUBIC, Gemma's) or 2 (BILINEAR)")))?
                }
                "do_convert_rgb" if !boolean(key, v)? => {
                    return Err(err("`do_convert_rgb: false` is not supported (the Gemma 4 processors force RGB)".into()));
                }
                _ => {}
            }
        }
        if !SUPPORTED_SOFT_TOKENS.contains(&c.max_soft_tokens) {
            return Err(err(format!(
                "`max_soft_tokens` must be one of {SUPPORTED_SOFT_TOKENS:?} (as HF requires), found {}",
                c.max_soft_tokens
            )));
        }
        if c.do_normalize && c.image_std.contains(&0.0) {
            return Err(err("`image_std` contains 0".into()));
        }
        Ok(c)
    }

    /// `max_patches = max_soft_tokens · k²`: the `patch_size` px patch budget the resize aims
    /// for, in both families.
    pub fn max_patches(&self) -> usize {
        self.max_soft_tokens * self.pooling_kernel_size * self.pooling_kernel_size
    }

    /// Side of a model token's pixel block, `k · patch_size`: the resize makes both image sides
    /// multiples of it, so every token pools (or merges) a full k×k group of patches.
    pub fn token_side(&self) -> usize {
        self.pooling_kernel_size * self.patch_size
    }
}
