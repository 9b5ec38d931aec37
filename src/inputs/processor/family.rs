//! The two Gemma 4 image processors of HF transformers 5.14.1 and the one step where they differ.
//!
//! Both resize to the same aspect-ratio-preserving size (a budget of `max_soft_tokens · k²`
//! patches of `patch_size` px, sides multiples of `k · patch_size`), with the same antialiased
//! uint8 resize and the same rescale ([`super::super::image`]). They differ in what one
//! `pixel_values` row is:
//!
//! | family | HF classes | one row | rows per image | soft tokens per image |
//! |---|---|---|---|---|
//! | [`Family::Gemma4`] | `Gemma4Processor`, `Gemma4ImageProcessor` | one `p` px patch, `3·p²` values | `max_soft_tokens · k²` | patches / k² (the vision tower average-pools k×k patches) |
//! | [`Family::Unified`] | `Gemma4UnifiedProcessor`, `Gemma4UnifiedImageProcessor` | k×k patches merged (`patches_merge`), `3·(k·p)²` values | `max_soft_tokens` | merged patches |
//!
//! In both, a row is flattened (row, column, channel) and rows run over the grid row-major;
//! `patches_merge` reorders the k×k patches of each kernel into one `(k·p)`² block, which is
//! exactly `(k·p)` px patchification, so both are [`patchify`] with a different side and length.
//! Positions are the (x, y) grid indices of the row's block (for Unified, the merged grid).
//!
//! The prompt side (`boi + image_token × n + eoi`, BOS, `mm_token_type_ids`) is the same code in
//! both HF processors and lives in the parent module.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::super::image::{aspect_ratio_preserving_size, patchify, resize_aa_u8, value_table, RgbImage};
use super::super::InputsError;
use super::config::{ImageProcessorConfig, ImageProcessorSource};

/// Which HF image processor (and processor) a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `Gemma4Processor` / `Gemma4ImageProcessor` (model_type `gemma4`): unmerged patches.
    Gemma4,
    /// `Gemma4UnifiedProcessor` / `Gemma4UnifiedImageProcessor` (model_type `gemma4_unified`):
    /// merged patches.
    Unified,
}

/// What one configuration field says about the family, for error messages.
struct Vote {
    family: Family,
    path: PathBuf,
    field: String,
    value: String,
}

impl Family {
    const ALL: [Family; 2] = [Family::Gemma4, Family::Unified];

    pub fn processor_class(self) -> &'static str {
        match self {
            Family::Gemma4 => "Gemma4Processor",
            Family::Unified => "Gemma4UnifiedProcessor",
        }
    }

    pub fn image_processor_type(self) -> &'static str {
        match self {
            Family::Gemma4 => "Gemma4ImageProcessor",
            Family::Unified => "Gemma4UnifiedImageProcessor",
        }
    }

    pub fn model_type(self) -> &'static str {
        match self {
            Family::Gemma4 => "gemma4",
            Family::Unified => "gemma4_unified",
        }
    }

    /// Side in pixels of the square block one `pixel_values` row holds.
    pub fn patch_side(self, c: &ImageProcessorConfig) -> usize {
        match self {
            Family::Gemma4 => c.patch_size,
            Family::Unified => c.token_side(),
        }
    }

    /// Rows per image after padding: `max_patches` (Gemma4) or `max_soft_tokens` (Unified).
    pub fn rows(self, c: &ImageProcessorConfig) -> usize {
        match self {
            Family::Gemma4 => c.max_patches(),
            Family::Unified => c.max_soft_tokens,
        }
    }

    /// Length of one `pixel_values` row: `3 · side²`.
    pub fn patch_dim(self, c: &ImageProcessorConfig) -> usize {
        let side = self.patch_side(c);
        side * side * 3
    }

    /// Soft tokens for an image of `rows` real rows: HF's `num_soft_tokens_per_image`
    /// (`patches.shape[0] // k²` for Gemma4, the merged patch count for Unified).
    pub fn soft_tokens(self, c: &ImageProcessorConfig, rows: usize) -> usize {
        match self {
            Family::Gemma4 => rows / (c.pooling_kernel_size * c.pooling_kernel_size),
            Family::Unified => rows,
        }
    }

    /// Decides the family the way HF would load the checkpoint: `AutoImageProcessor` builds the
    /// class named by `image_processor_type`, `AutoProcessor` the one named by `processor_class`,
    /// and without them both fall back to `config.json`'s `model_type`. Every one of these that
    /// is present must name a Gemma 4 class of the same family: a mix (say a `gemma4` model with
    /// a Unified image processor) would give `pixel_values` rows the vision tower cannot take,
    /// and an unknown class is an error naming the file and field. A `model_type` that is
    /// neither `gemma4` nor `gemma4_unified` is only an error when nothing else decides.
    pub fn resolve(source: &ImageProcessorSource, config: &Value, config_path: &Path) -> Result<Family, InputsError> {
        let mut votes = Vec::new();
        let type_field = if source.nested { "image_processor.image_processor_type" } else { "image_processor_type" };
        if let Some(v) = source.json.get("image_processor_type").filter(|v| !v.is_null()) {
            votes.push(Self::vote(v, &source.path, type_field, Family::image_processor_type)?);
        }
        let class_source = match &source.processor_config {
            Some((json, path)) => Some((json, path.as_path())),
            None if !source.nested => Some((&source.json, source.path.as_path())),
            None => None,
        };
        if let Some((json, path)) = class_source {
            if let Some(v) = json.get("processor_class").filter(|v| !v.is_null()) {
                votes.push(Self::vote(v, path, "processor_class", Family::processor_class)?);
            }
        }
        let model_type = config.get("model_type").and_then(Value::as_str);
        if let Some(mt) = model_type {
            if let Some(family) = Self::ALL.into_iter().find(|f| f.model_type() == mt) {
                votes.push(Vote { family, path: config_path.into(), field: "model_type".into(), value: mt.into() });
            }
        }
        let Some(first) = votes.first() else {
            let found = model_type.map_or("no `model_type`".to_string(), |mt| format!("`model_type` {mt:?}"));
            return Err(InputsError::Config {
                path: source.path.clone(),
                message: format!(
                    "cannot tell which Gemma 4 image processor this is: no `{type_field}` nor `processor_class` here, and {} has {found}; expected `processor_class` \"Gemma4Processor\" or \"Gemma4UnifiedProcessor\" (or `model_type` \"gemma4\" / \"gemma4_unified\")",
                    config_path.display()
                ),
            });
        };
        if let Some(other) = votes.iter().find(|v| v.family != first.family) {
            return Err(InputsError::Config {
                path: other.path.clone(),
                message: format!(
                    "`{}` is {:?} (the {:?} family) but {} has `{}` {:?} (the {:?} family); their pixel_values layouts differ, so one of them is wrong",
                    other.field,
                    other.value,
                    other.family,
                    first.path.display(),
                    first.field,
                    first.value,
                    first.family
                ),
            });
        }
        Ok(first.family)
    }

    /// Maps one class-name field to its family; anything else is an error naming the field.
    fn vote(v: &Value, path: &Path, field: &str, name: fn(Family) -> &'static str) -> Result<Vote, InputsError> {
        let err = |message: String| InputsError::Config { path: path.into(), message };
        let s = v.as_str().ok_or_else(|| err(format!("`{field}`: expected a class name (a string), found {v}")))?;
        let family = Self::ALL.into_iter().find(|&f| name(f) == s).ok_or_else(|| {
            err(format!(
                "`{field}` is {s:?}; only {:?} and {:?} (HF's Gemma 4 classes, torchvision backend) are supported",
                name(Family::Gemma4),
                name(Family::Unified)
            ))
        })?;
        Ok(Vote { family, path: path.into(), field: field.into(), value: s.into() })
    }
}

/// One image's processor output before stacking.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImage {
    /// `[rows, patch_dim]`, zero rows after the real patches.
    pub pixel_values: Vec<f32>,
    /// `[rows, 2]` (x, y); (-1, -1) for padding.
    pub position_ids: Vec<i64>,
    /// Image tokens the prompt gets for this image.
    pub num_soft_tokens: usize,
}

/// A checkpoint's image processor: its family and settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    pub family: Family,
    pub config: ImageProcessorConfig,
}

impl ImageProcessor {
    /// `pixel_values` rows per image.
    pub fn rows(&self) -> usize {
        self.family.rows(&self.config)
    }

    /// Length of one `pixel_values` row.
    pub fn patch_dim(&self) -> usize {
        self.family.patch_dim(&self.config)
    }

    /// `Gemma4ImageProcessor._preprocess` / `Gemma4UnifiedImageProcessor._preprocess` for one
    /// decoded image. `name` is used in errors.
    ///
    /// With `do_resize` false the sides must be multiples of `k · patch_size` in both families:
    /// HF's Gemma4 class only needs multiples of `patch_size`, but then its
    /// `patches // k²` soft tokens would not match what the k×k pooling produces.
    pub fn process_image(&self, img: &RgbImage, name: &Path) -> Result<ProcessedImage, InputsError> {
        let c = &self.config;
        let err = |message: String| InputsError::Image { path: name.into(), message };
        let resized;
        let img = if c.do_resize {
            let (th, tw) =
                aspect_ratio_preserving_size(img.height, img.width, c.patch_size, c.max_patches(), c.pooling_kernel_size).map_err(err)?;
            if (th, tw) == (img.height, img.width) {
                img
            } else {
                resized = resize_aa_u8(img, th, tw, c.resample);
                &resized
            }
        } else {
            img
        };
        let side = c.token_side();
        if img.height % side != 0 || img.width % side != 0 {
            return Err(err(format!(
                "with do_resize false the image ({}×{} W×H) must have sides divisible by pooling_kernel_size·patch_size = {side}",
                img.width, img.height
            )));
        }
        let tokens = (img.height / side) * (img.width / side);
        if tokens > c.max_soft_tokens {
            return Err(err(format!("gives {tokens} soft tokens, more than max_soft_tokens = {}", c.max_soft_tokens)));
        }
        let table = value_table(c.do_rescale.then_some(c.rescale_factor), c.do_normalize.then_some((c.image_mean, c.image_std)));
        let patches = patchify(img, self.family.patch_side(c), self.rows(), &table).map_err(err)?;
        Ok(ProcessedImage {
            num_soft_tokens: self.family.soft_tokens(c, patches.count),
            pixel_values: patches.pixel_values,
            position_ids: patches.position_ids,
        })
    }
}
