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

use super::config::{ImageProcessorConfig, ImageProcessorSource};
use crate::inputs::error::InputsError;
use crate::inputs::image::{aspect_ratio_preserving_size, patchify, resize_aa_u8, value_table, RgbImage};
/// The model family, which decides the HF image processor (and processor) a checkpoint uses:
/// `Gemma4Processor` / `Gemma4ImageProcessor` (model_type `gemma4`, unmerged patches) or
/// `Gemma4UnifiedProcessor` / `Gemma4UnifiedImageProcessor` (model_type `gemma4_unified`, merged
/// patches). The reference's own enum: one `Family` in the project.
pub use onnx_parity_reference::Family;

/// What one configuration field says about the family, for error messages.
struct Vote {
    family: Family,
    path: PathBuf,
    field: String,
    value: String,
}

/// Both families, in the order messages name them.
const FAMILIES: [Family; 2] = [Family::Gemma4, Family::Unified];

/// What a family means for image processing.
pub trait ImageFamily: Copy {
    fn processor_class(self) -> &'static str;
    fn image_processor_type(self) -> &'static str;
    fn model_type(self) -> &'static str;
    /// Side in pixels of the square block one `pixel_values` row holds.
    fn patch_side(self, c: &ImageProcessorConfig) -> usize;
    /// Rows per image after padding: `max_patches` (Gemma4) or `max_soft_tokens` (Unified).
    fn rows(self, c: &ImageProcessorConfig) -> usize;
    /// Length of one `pixel_values` row: `3 · side²`.
    fn patch_dim(self, c: &ImageProcessorConfig) -> usize;
    /// Soft tokens for an image of `rows` real rows: HF's `num_soft_tokens_per_image`
    /// (`patches.shape[0] // k²` for Gemma4, the merged patch count for Unified).
    fn soft_tokens(self, c: &ImageProcessorConfig, rows: usize) -> usize;
}

impl ImageFamily for Family {
    fn processor_class(self) -> &'static str {
        match self {
            Family::Gemma4 => "Gemma4Processor",
            Family::Unified => "Gemma4UnifiedProcessor",
        }
    }

    fn image_processor_type(self) -> &'static str {
        match self {
            Family::Gemma4 => "Gemma4ImageProcessor",
            Family::Unified => "Gemma4UnifiedImageProcessor",
        }
    }

    fn model_type(self) -> &'static str {
        match self {
            Family::Gemma4 => "gemma4",
            Family::Unified => "gemma4_unified",
        }
    }

    fn patch_side(self, c: &ImageProcessorConfig) -> usize {
        match self {
            Family::Gemma4 => c.patch_size,
            Family::Unified => c.token_side(),
        }
    }

    fn rows(self, c: &ImageProcessorConfig) -> usize {
        match self {
            Family::Gemma4 => c.max_patches(),
            Family::Unified => c.max_soft_tokens,
        }
    }

    fn patch_dim(self, c: &ImageProcessorConfig) -> usize {
        let side = self.patch_side(c);
        side * side * 3
    }

    fn soft_tokens(self, c: &ImageProcessorConfig, rows: usize) -> usize {
        match self {
            Family::Gemma4 => rows / (c.pooling_kernel_size * c.pooling_kernel_size),
            Family::Unified => rows,
        }
    }
}

/// Decides the family the way HF would load the checkpoint: `AutoImageProcessor` builds the
/// class named by `image_processor_type`, `AutoProcessor` the one named by `processor_class`,
/// and without them both fall back to `config.json`'s `model_type`. Every one of these that
/// is present must name a Gemma 4 class of the same family: a mix (say a `gemma4` model with
/// a Unified image processor) would give `pixel_values` rows the vision tower cannot take,
/// and an unknown class is an error naming the file and field. A `model_type` that is
/// neither `gemma4` nor `gemma4_unified` is only an error when nothing else decides.
pub fn resolve_family(source: &ImageProcessorSource, config: &Value, config_path: &Path) -> Result<Family, InputsError> {
    let mut votes = Vec::new();
    let type_field = if source.nested { "image_processor.image_processor_type" } else { "image_processor_type" };
    if let Some(v) = source.json.get("image_processor_type").filter(|v| !v.is_null()) {
        votes.push(vote(v, &source.path, type_field, ImageFamily::image_processor_type)?);
    }
    let class_source = match &source.processor_config {
        Some((json, path)) => Some((json, path.as_path())),
        None if !source.nested => Some((&source.json, source.path.as_path())),
        None => None,
    };
    if let Some((json, path)) = class_source {
        if let Some(v) = json.get("processor_class").filter(|v| !v.is_null()) {
            votes.push(vote(v, path, "processor_class", ImageFamily::processor_class)?);
        }
    }
    let model_type = config.get("model_type").and_then(Value::as_str);
    if let Some(mt) = model_type {
        if let Some(family) = FAMILIES.into_iter().find(|f| f.model_type() == mt) {
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
    let family = FAMILIES.into_iter().find(|&f| name(f) == s).ok_or_else(|| {
        err(format!(
            "`{field}` is {s:?}; only {:?} and {:?} (HF's Gemma 4 classes, torchvision backend) are supported",
            name(Family::Gemma4),
            name(Family::Unified)
        ))
    })?;
    Ok(Vote { family, path: path.into(), field: field.into(), value: s.into() })
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
            let (th, tw) = aspect_ratio_preserving_size(img.height, img.width, c.patch_size, c.max_patches(), c.pooling_kernel_size)
                .map_err(|e| err(e.to_string()))?;
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
        let patches = patchify(img, self.family.patch_side(c), self.rows(), &table).map_err(|e| err(e.to_string()))?;
        Ok(ProcessedImage {
            num_soft_tokens: self.family.soft_tokens(c, patches.count),
            pixel_values: patches.pixel_values,
            position_ids: patches.position_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A W×H image whose sample at (y, x, c) is `10·y + 3·x + c` (< 256 for the sizes used), so a
    /// value names its place.
    fn numbered(h: usize, w: usize) -> RgbImage {
        let data = (0..h).flat_map(|y| (0..w).flat_map(move |x| (0..3).map(move |c| (10 * y + 3 * x + c) as u8))).collect();
        RgbImage { height: h, width: w, data }
    }

    /// Raw values, no resize: patch 2 px, k 2, 70 soft tokens (so 280 Gemma4 rows).
    fn processor(family: Family) -> ImageProcessor {
        let config = ImageProcessorConfig {
            patch_size: 2,
            pooling_kernel_size: 2,
            max_soft_tokens: 70,
            do_resize: false,
            do_rescale: false,
            ..ImageProcessorConfig::default()
        };
        ImageProcessor { family, config }
    }

    /// The values of the `side`-px block at grid (gx, gy) of `numbered`, flattened (row, column, channel).
    fn block(gx: usize, gy: usize, side: usize) -> Vec<f32> {
        (0..side)
            .flat_map(|r| (0..side).flat_map(move |c| (0..3).map(move |ch| (10 * (gy * side + r) + 3 * (gx * side + c) + ch) as f32)))
            .collect()
    }

    /// Guards: Gemma4 rows are single unmerged `patch_size` px patches (3·p² values, HWC inside a
    /// patch), row-major over the patch grid, with (x = column, y = row) positions, padded with
    /// zero rows and (-1, -1) up to `max_soft_tokens · k²` rows; the prompt gets patches / k²
    /// soft tokens.
    #[test]
    fn gemma4_rows_are_unmerged_patches_padded_to_max_patches() {
        let ip = processor(Family::Gemma4);
        assert_eq!((ip.rows(), ip.patch_dim()), (280, 12));
        // 8×4 (W×H): a 4×2 grid of 2 px patches = 2 tokens of k×k = 2×2 patches.
        let out = ip.process_image(&numbered(4, 8), Path::new("t.png")).unwrap();
        assert_eq!(out.num_soft_tokens, 2);
        assert_eq!(out.pixel_values.len(), 280 * 12);
        assert_eq!(out.position_ids.len(), 280 * 2);
        let mut want_pos = Vec::new();
        for gy in 0..2 {
            for gx in 0..4 {
                let m = gy * 4 + gx;
                assert_eq!(&out.pixel_values[m * 12..(m + 1) * 12], block(gx, gy, 2).as_slice(), "patch {m} (x {gx}, y {gy})");
                want_pos.extend([gx as i64, gy as i64]);
            }
        }
        // Patch 1 is the second patch of the first row, not the second row of the first kernel.
        assert_eq!(&out.pixel_values[12..15], &[6., 7., 8.]);
        assert_eq!(&out.position_ids[..16], want_pos.as_slice());
        assert!(out.pixel_values[8 * 12..].iter().all(|&v| v == 0.0));
        assert!(out.position_ids[16..].iter().all(|&v| v == -1));
    }

    /// Guards: Unified rows are k×k patches merged into one (k·p) px block (3·(k·p)² values),
    /// positions on the merged grid, padded to `max_soft_tokens` rows, one soft token per row —
    /// and they carry the same pixels as the Gemma4 rows, only grouped differently.
    #[test]
    fn unified_rows_merge_k_by_k_patches() {
        let ip = processor(Family::Unified);
        assert_eq!((ip.rows(), ip.patch_dim()), (70, 48));
        let out = ip.process_image(&numbered(4, 8), Path::new("t.png")).unwrap();
        assert_eq!(out.num_soft_tokens, 2);
        assert_eq!(out.pixel_values.len(), 70 * 48);
        assert_eq!(&out.pixel_values[..48], block(0, 0, 4).as_slice());
        assert_eq!(&out.pixel_values[48..96], block(1, 0, 4).as_slice());
        assert_eq!(&out.position_ids[..6], &[0, 0, 1, 0, -1, -1]);
        assert!(out.pixel_values[96..].iter().all(|&v| v == 0.0));
    }

    /// Guards: with the resize on, both families pick the same target size and soft-token count
    /// (HF's shared `get_aspect_ratio_preserving_size`), and Gemma4 pads to k² times the rows.
    #[test]
    fn families_agree_on_size_and_soft_tokens() {
        let img = numbered(5, 3);
        let (mut g, mut u) = (processor(Family::Gemma4), processor(Family::Unified));
        g.config.do_resize = true;
        u.config.do_resize = true;
        // 3×5 → 24×40 (W×H): 12×20 patches of 2 px → 6×10 = 60 tokens.
        let (go, uo) = (g.process_image(&img, Path::new("t.png")).unwrap(), u.process_image(&img, Path::new("t.png")).unwrap());
        assert_eq!((go.num_soft_tokens, uo.num_soft_tokens), (60, 60));
        assert_eq!(go.position_ids[2 * 239..2 * 240], [11, 19]);
        assert_eq!(go.position_ids[2 * 240], -1);
        assert_eq!(uo.position_ids[2 * 59..2 * 60], [5, 9]);
    }

    /// Guards: with `do_resize` false, sides must be multiples of k·p in both families.
    #[test]
    fn unresized_image_must_fit_whole_tokens() {
        let e = processor(Family::Gemma4).process_image(&numbered(2, 8), Path::new("odd.png")).unwrap_err().to_string();
        assert!(e.contains("odd.png") && e.contains("divisible by pooling_kernel_size·patch_size = 4"), "{e}");
    }

    fn source(image_processor: Value, processor: Option<Value>) -> ImageProcessorSource {
        ImageProcessorSource {
            json: image_processor,
            path: "ckpt/processor_config.json".into(),
            nested: true,
            processor_config: processor.map(|p| (p, PathBuf::from("ckpt/processor_config.json"))),
        }
    }

    fn resolve(ip: Value, processor: Option<Value>, config: Value) -> Result<Family, String> {
        resolve_family(&source(ip, processor), &config, Path::new("ckpt/config.json")).map_err(|e| e.to_string())
    }

    /// Guards: the family comes from `image_processor_type`, `processor_class` or (as a fallback)
    /// `model_type`, for both families.
    #[test]
    fn family_is_read_from_class_names_or_model_type() {
        let none = json!({});
        assert_eq!(resolve(json!({"image_processor_type": "Gemma4ImageProcessor"}), None, none.clone()), Ok(Family::Gemma4));
        assert_eq!(resolve(json!({}), Some(json!({"processor_class": "Gemma4UnifiedProcessor"})), none.clone()), Ok(Family::Unified));
        assert_eq!(resolve(json!({}), None, json!({"model_type": "gemma4"})), Ok(Family::Gemma4));
        assert_eq!(resolve(json!({}), None, json!({"model_type": "gemma4_unified"})), Ok(Family::Unified));
        // An unrelated model_type does not veto an explicit class.
        assert_eq!(
            resolve(json!({"image_processor_type": "Gemma4UnifiedImageProcessor"}), None, json!({"model_type": "other"})),
            Ok(Family::Unified)
        );
    }

    /// Guards: unknown classes, contradicting fields and a checkpoint that names no family are
    /// errors naming the file and field.
    #[test]
    fn family_errors_name_the_file_and_field() {
        let e = resolve(json!({}), Some(json!({"processor_class": "Gemma3Processor"})), json!({})).unwrap_err();
        assert!(e.contains("ckpt/processor_config.json") && e.contains("`processor_class` is \"Gemma3Processor\""), "{e}");
        let e = resolve(json!({"image_processor_type": "Gemma4ImageProcessorPil"}), None, json!({})).unwrap_err();
        assert!(e.contains("`image_processor.image_processor_type` is \"Gemma4ImageProcessorPil\""), "{e}");
        let e =
            resolve(json!({"image_processor_type": "Gemma4ImageProcessor"}), None, json!({"model_type": "gemma4_unified"})).unwrap_err();
        assert!(e.contains("ckpt/config.json") && e.contains("`model_type` is \"gemma4_unified\"") && e.contains("layouts differ"), "{e}");
        let e = resolve(json!({}), None, json!({"model_type": "llama"})).unwrap_err();
        assert!(e.contains("cannot tell which Gemma 4 image processor") && e.contains("`model_type` \"llama\""), "{e}");
        let e = resolve(json!({"image_processor_type": 3}), None, json!({})).unwrap_err();
        assert!(e.contains("expected a class name"), "{e}");
    }
}
