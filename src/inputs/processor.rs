//! Gemma4Unified prompt processing: prompt text + image files → [`ModelInputs`], reproducing
//! HF transformers 5.14.1's `Gemma4UnifiedProcessor.__call__` (torchvision image backend) so a
//! case can be written as a prompt and images instead of precomputed tensors.
//!
//! What HF does, step by step (and what this module mirrors):
//!
//! 1. **Images.** Decoded to 8-bit RGB (`convert("RGB")`: alpha dropped, grey replicated; no
//!    EXIF rotation — the processor itself applies none), resized to the largest size that keeps
//!    the aspect ratio, has at most `max_soft_tokens · k²` patches of `patch_size` px and sides
//!    divisible by `k · patch_size` (`k` = `pooling_kernel_size`;
//!    `get_aspect_ratio_preserving_size`). The resize is `tvF.resize(uint8, BICUBIC,
//!    antialias=True)`, which on CPU runs PyTorch's *uint8* antialiased kernel: PIL-style filter
//!    support and centring, weights normalised in f64 then quantised to int16, width pass then
//!    height pass, each rounded and clamped back to uint8 (see [`resize_aa_u8`]). It is
//!    reproduced here bit for bit, so `pixel_values` match exactly.
//! 2. **Rescale** (`uint8 * rescale_factor`, computed in f32) and optional normalisation.
//! 3. **Patches.** `patch_size` px patches merged k×k (`patches_merge`) — which amounts to
//!    `(k·patch_size)` px patches, each flattened (row, column, channel) — padded with zero rows
//!    to `max_soft_tokens`; `image_position_ids` are the merged patches' (x, y) grid positions,
//!    (-1, -1) for padding.
//! 4. **Text.** Each `<|image|>` placeholder is replaced by `boi + image_token × n + eoi`
//!    (n = the image's real merged patches), then the whole string is tokenized with special
//!    tokens: `tokenizer.json`'s own post-processor decides BOS (`add_bos_token` in
//!    `tokenizer_config.json` is ignored by HF once a `tokenizer.json` exists).
//! 5. `mm_token_type_ids`: 1 for image soft tokens (not boi/eoi), 2 video, 3 audio, else 0.
//!
//! Checked against HF: the `unified-vision` fixture (unit test, bit-exact), and while writing
//! this, 140 image/config pairs (upscaling and downscaling 5×900 … 1600×1200, patch 2–16,
//! k 2–3, 70–1120 soft tokens, bicubic and bilinear, rescale, normalise, RGBA/L/LA/P PNGs) with
//! all `pixel_values` bits and `image_position_ids` equal, and 8 prompts' `input_ids`.
//!
//! Deliberate differences: a text-only prompt yields only `input_ids` (HF adds an all-zero
//! `mm_token_type_ids`, which carries no information for a text-only model input); JPEG decoding
//! is close but not bit-exact (see [`load_rgb`]); 16-bit images are refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::{AddedToken, Tokenizer};

use super::{Dense, InputsError, ModelInputs};

/// `_SUPPORTED_SOFT_TOKENS` of `image_processing_gemma4_unified.py`; HF rejects other values.
const SUPPORTED_SOFT_TOKENS: [usize; 5] = [70, 140, 280, 560, 1120];

/// The processor adds this token itself (`tokenizer.add_special_tokens` in its `__init__`).
const VIDEO_TOKEN: &str = "<|video|>";

/// Resampling filter (`resample` in the image processor config, PIL numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// PIL 2 → torchvision BILINEAR (triangle filter, support 1).
    Bilinear,
    /// PIL 3 → torchvision BICUBIC (Keys cubic with a = -0.5, PIL's, support 2). Gemma's default.
    Bicubic,
}

impl Resample {
    fn from_pil(code: i64) -> Option<Resample> {
        match code {
            2 => Some(Resample::Bilinear),
            3 => Some(Resample::Bicubic),
            _ => None,
        }
    }

    /// `interp_size` of PyTorch's `HelperInterpLinear` / `HelperInterpCubic`.
    fn interp_size(self) -> usize {
        match self {
            Resample::Bilinear => 2,
            Resample::Bicubic => 4,
        }
    }

    /// `aa_filter` of the same helpers (the cubic one is PIL's, a = -0.5, not PyTorch's -0.75).
    fn filter(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Resample::Bilinear => {
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Resample::Bicubic => {
                let a = -0.5;
                if x < 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                } else {
                    0.0
                }
            }
        }
    }
}

/// `Gemma4UnifiedImageProcessor` settings: class defaults overridden by the checkpoint's
/// `processor_config.json` (`image_processor` section) or `preprocessor_config.json`.
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
    /// The class attributes of `Gemma4UnifiedImageProcessor`.
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
                    return Err(err("`do_convert_rgb: false` is not supported (the Gemma4Unified processor forces RGB)".into()));
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

    /// Reads `processor_config.json` (its `image_processor` object) or, for older checkpoints,
    /// `preprocessor_config.json`. `None` when the folder has neither.
    pub fn from_checkpoint(dir: &Path) -> Result<Option<Self>, InputsError> {
        let processor = dir.join("processor_config.json");
        if processor.is_file() {
            let json = read_json(&processor)?;
            if let Some(ip) = json.get("image_processor") {
                return Self::from_json(ip, &processor).map(Some);
            }
        }
        let pre = dir.join("preprocessor_config.json");
        if pre.is_file() {
            return Self::from_json(&read_json(&pre)?, &pre).map(Some);
        }
        Ok(None)
    }

    /// Patches a model patch merges: `max_soft_tokens · k²` teacher patches per image.
    fn max_patches(&self) -> usize {
        self.max_soft_tokens * self.pooling_kernel_size * self.pooling_kernel_size
    }

    /// Side of a merged (model) patch in pixels.
    fn merged_side(&self) -> usize {
        self.pooling_kernel_size * self.patch_size
    }

    /// Length of one `pixel_values` row: a merged patch of `(k·p)²` RGB pixels.
    pub fn patch_dim(&self) -> usize {
        self.merged_side() * self.merged_side() * 3
    }
}

/// An 8-bit RGB image, row-major, channels interleaved (what PIL's `convert("RGB")` gives).
#[derive(Debug, Clone, PartialEq)]
pub struct RgbImage {
    pub height: usize,
    pub width: usize,
    pub data: Vec<u8>,
}

/// Decodes an image file the way HF's processor sees it after `convert("RGB")`: 8-bit RGB,
/// alpha dropped (not composited), grey replicated, palette expanded, no EXIF rotation.
///
/// 16-bit and float images are refused: how they reach 8 bits depends on the caller's decoder
/// (PIL or torchvision), so there is no single HF answer to reproduce.
///
/// JPEG is decoded by the `image` crate (zune-jpeg), not libjpeg-turbo as in PIL: measured on a
/// 517×333 test image (Pillow 13.0, quality 75–95, 4:4:4/4:2:2/4:2:0) up to 4/255 per sample
/// differs on 2–27 % of samples, so JPEG `pixel_values` are close to HF's, not equal, and a
/// warning says so. PNG decoding is exact.
pub fn load_rgb(path: &Path) -> Result<RgbImage, InputsError> {
    let err = |message: String| InputsError::Image { path: path.into(), message };
    let reader = image::ImageReader::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let reader = reader.with_guessed_format().map_err(|e| err(format!("cannot read: {e}")))?;
    if reader.format() == Some(image::ImageFormat::Jpeg) {
        tracing::warn!(
            "{}: JPEG decoded with zune-jpeg, which differs from PIL's libjpeg-turbo by up to a few levels per sample; pixel_values will not match HF's bit for bit (use PNG for exact inputs)",
            path.display()
        );
    }
    let img = reader.decode().map_err(|e| err(format!("cannot decode as an image (PNG or JPEG expected): {e}")))?;
    use image::DynamicImage as D;
    let rgb = match img {
        D::ImageLuma8(_) | D::ImageLumaA8(_) | D::ImageRgb8(_) | D::ImageRgba8(_) => img.to_rgb8(),
        other => {
            return Err(err(format!(
                "{:?} images are not supported: only 8-bit grey/RGB(A) images have one HF-defined conversion to RGB; convert it to 8-bit",
                other.color()
            )))
        }
    };
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    if w == 0 || h == 0 {
        return Err(err(format!("image is {w}×{h}")));
    }
    Ok(RgbImage { height: h, width: w, data: rgb.into_raw() })
}

/// `get_aspect_ratio_preserving_size`: the largest (height, width) with at most `max_patches`
/// patches whose sides are multiples of `k · patch_size`, with HF's fallbacks for extreme aspect
/// ratios. f64 arithmetic in Python's order so the floors land identically.
pub fn aspect_ratio_preserving_size(
    height: usize,
    width: usize,
    patch_size: usize,
    max_patches: usize,
    pooling_kernel_size: usize,
) -> Result<(usize, usize), String> {
    let total_px = (height * width) as f64;
    let target_px = max_patches * patch_size * patch_size;
    let factor = (target_px as f64 / total_px).sqrt();
    let ideal_height = factor * height as f64;
    let ideal_width = factor * width as f64;
    let side_mult = pooling_kernel_size * patch_size;
    let mut target_height = (ideal_height / side_mult as f64).floor() as usize * side_mult;
    let mut target_width = (ideal_width / side_mult as f64).floor() as usize * side_mult;
    if target_height == 0 && target_width == 0 {
        return Err(format!(
            "resizing {width}×{height} (W×H) would give a 0×0 image (sides must be multiples of pooling_kernel_size·patch_size = {side_mult})"
        ));
    }
    let max_side_length = (max_patches / (pooling_kernel_size * pooling_kernel_size)) * side_mult;
    if target_height == 0 {
        target_height = side_mult;
        target_width = ((width as f64 / height as f64).floor() as usize * side_mult).min(max_side_length);
    } else if target_width == 0 {
        target_width = side_mult;
        target_height = ((height as f64 / width as f64).floor() as usize * side_mult).min(max_side_length);
    }
    if target_height * target_width > target_px {
        return Err(format!(
            "resizing {width}×{height} (W×H) to {target_width}×{target_height} exceeds {max_patches} patches of {patch_size} px"
        ));
    }
    Ok((target_height, target_width))
}

/// One axis of PyTorch's antialiased uint8 interpolation: per output index the first input
/// index, the tap count, `kmax` int16 weights, and the fixed-point precision shared by the axis.
struct AxisTaps {
    start: Vec<usize>,
    len: Vec<usize>,
    weights: Vec<i32>,
    kmax: usize,
    precision: u32,
}

/// `HelperInterpBase::_compute_index_ranges_weights`, `_compute_indices_min_size_weights_aa` and
/// `_compute_index_ranges_int16_weights` (aten/src/ATen/native/cpu/UpSampleKernel.cpp), for
/// `align_corners=False` and no explicit scale factor (torchvision passes a size).
fn axis_taps(in_size: usize, out_size: usize, filter: Resample) -> AxisTaps {
    let scale = in_size as f64 / out_size as f64;
    let interp = filter.interp_size() as f64;
    let support = if scale >= 1.0 { interp * 0.5 * scale } else { interp * 0.5 };
    let kmax = support.ceil() as usize * 2 + 1;
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let mut start = Vec::with_capacity(out_size);
    let mut len = Vec::with_capacity(out_size);
    let mut wf = vec![0.0f64; out_size * kmax];
    let mut wt_max = 0.0f64;
    for i in 0..out_size {
        let center = scale * (i as f64 + 0.5);
        // C++ `static_cast<int64_t>` truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xsize = ((center + support + 0.5) as i64).min(in_size as i64) - xmin;
        let xsize = xsize.clamp(0, kmax as i64) as usize;
        let w = &mut wf[i * kmax..(i + 1) * kmax];
        let mut total = 0.0f64;
        for (j, wj) in w.iter_mut().enumerate().take(xsize) {
            *wj = filter.filter(((j as i64 + xmin) as f64 - center + 0.5) * invscale);
            total += *wj;
        }
        if total != 0.0 {
            for wj in w.iter_mut().take(xsize) {
                *wj /= total;
                wt_max = wt_max.max(*wj);
            }
        }
        start.push(xmin as usize);
        len.push(xsize);
    }
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wt_max * (1u32 << (precision + 1)) as f64) as i32;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let weights = wf
        .iter()
        .map(|&w| {
            let v = w * (1u32 << precision) as f64;
            // `(v < 0) ? (int)(-0.5 + v) : (int)(0.5 + v)`, then stored as int16.
            (if v < 0.0 { (-0.5 + v) as i32 } else { (0.5 + v) as i32 }) as i16 as i32
        })
        .collect();
    AxisTaps { start, len, weights, kmax, precision }
}

/// One fixed-point output sample: `(2^(p-1) + Σ pixel·w) >> p`, clamped to uint8
/// (`basic_loop_aa_horizontal<uint8_t>` / the AVX kernels; `>>` is arithmetic).
#[inline]
fn fixed_point(acc: i32, precision: u32) -> u8 {
    (acc >> precision).clamp(0, 255) as u8
}

/// `tvF.resize(uint8 [3,H,W], [out_h, out_w], interpolation, antialias=True)` on CPU, bit-exact:
/// PyTorch routes uint8 bicubic (and, on AVX2/AArch64, bilinear) to its separable uint8 kernel,
/// which resizes the width first, rounds to uint8, then the height — Pillow's algorithm. An axis
/// whose size does not change is not resampled at all.
pub fn resize_aa_u8(img: &RgbImage, out_h: usize, out_w: usize, filter: Resample) -> RgbImage {
    const C: usize = 3;
    let (h, w) = (img.height, img.width);
    let mut data = img.data.clone();
    let mut cur_w = w;
    if out_w != w {
        let t = axis_taps(w, out_w, filter);
        let half = 1i32 << (t.precision.max(1) - 1);
        let mut out = vec![0u8; h * out_w * C];
        for y in 0..h {
            let row = &data[y * w * C..(y + 1) * w * C];
            for x in 0..out_w {
                let ws = &t.weights[x * t.kmax..x * t.kmax + t.len[x]];
                for c in 0..C {
                    let mut acc = half;
                    for (j, &wj) in ws.iter().enumerate() {
                        acc += row[(t.start[x] + j) * C + c] as i32 * wj;
                    }
                    out[(y * out_w + x) * C + c] = fixed_point(acc, t.precision);
                }
            }
        }
        data = out;
        cur_w = out_w;
    }
    if out_h != h {
        let t = axis_taps(h, out_h, filter);
        let half = 1i32 << (t.precision.max(1) - 1);
        let stride = cur_w * C;
        let mut out = vec![0u8; out_h * stride];
        for y in 0..out_h {
            let ws = &t.weights[y * t.kmax..y * t.kmax + t.len[y]];
            for i in 0..stride {
                let mut acc = half;
                for (j, &wj) in ws.iter().enumerate() {
                    acc += data[(t.start[y] + j) * stride + i] as i32 * wj;
                }
                out[y * stride + i] = fixed_point(acc, t.precision);
            }
        }
        data = out;
    }
    RgbImage { height: out_h, width: out_w, data }
}

/// One image's processor output before stacking.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImage {
    /// `[max_soft_tokens, patch_dim]`, zero rows after the real patches.
    pub pixel_values: Vec<f32>,
    /// `[max_soft_tokens, 2]` (x, y); (-1, -1) for padding.
    pub position_ids: Vec<i64>,
    /// Real merged patches = soft tokens the prompt gets for this image.
    pub num_soft_tokens: usize,
}

impl ImageProcessorConfig {
    /// `Gemma4UnifiedImageProcessor._preprocess` for one decoded image. `name` is used in errors.
    pub fn process_image(&self, img: &RgbImage, name: &Path) -> Result<ProcessedImage, InputsError> {
        let err = |message: String| InputsError::Image { path: name.into(), message };
        let resized;
        let img = if self.do_resize {
            let (th, tw) =
                aspect_ratio_preserving_size(img.height, img.width, self.patch_size, self.max_patches(), self.pooling_kernel_size)
                    .map_err(err)?;
            if (th, tw) == (img.height, img.width) {
                img
            } else {
                resized = resize_aa_u8(img, th, tw, self.resample);
                &resized
            }
        } else {
            img
        };
        let side = self.merged_side();
        if img.height % side != 0 || img.width % side != 0 {
            return Err(err(format!(
                "with do_resize false the image ({}×{} W×H) must have sides divisible by pooling_kernel_size·patch_size = {side}",
                img.width, img.height
            )));
        }
        let (gh, gw) = (img.height / side, img.width / side);
        let n = gh * gw;
        if n > self.max_soft_tokens {
            return Err(err(format!("gives {n} soft tokens, more than max_soft_tokens = {}", self.max_soft_tokens)));
        }
        let table = self.value_table();
        let dim = self.patch_dim();
        let mut pixel_values = vec![0.0f32; self.max_soft_tokens * dim];
        let mut position_ids = vec![-1i64; self.max_soft_tokens * 2];
        // `patches_merge` reorders the k×k teacher patches of each kernel and lays them out as
        // one (k·p)² block, kernels in row-major order: exactly (k·p) px patchification.
        for gy in 0..gh {
            for gx in 0..gw {
                let m = gy * gw + gx;
                let dst = &mut pixel_values[m * dim..(m + 1) * dim];
                for r in 0..side {
                    let src = ((gy * side + r) * img.width + gx * side) * 3;
                    let row = &img.data[src..src + side * 3];
                    for (i, (d, &s)) in dst[r * side * 3..(r + 1) * side * 3].iter_mut().zip(row).enumerate() {
                        *d = table[i % 3][s as usize];
                    }
                }
                position_ids[m * 2] = gx as i64;
                position_ids[m * 2 + 1] = gy as i64;
            }
        }
        Ok(ProcessedImage { pixel_values, position_ids, num_soft_tokens: n })
    }

    /// uint8 → f32 per channel, as `rescale_and_normalize` computes it:
    /// - rescale only: `uint8_tensor * rescale_factor`, an f32 product with the factor rounded
    ///   to f32 (measured in torch 2.15: this differs from the f64 product rounded for 126 of
    ///   the 256 values, so the order matters for bit-exactness);
    /// - normalise: HF fuses the rescale into mean/std (`tensor(mean) * (1/rescale_factor)`,
    ///   f32) and runs `tvF.normalize`, `(x - mean) / std` in f32;
    /// - neither: the raw values (HF would even keep them uint8).
    fn value_table(&self) -> [[f32; 256]; 3] {
        let mut t = [[0.0f32; 256]; 3];
        for (c, row) in t.iter_mut().enumerate() {
            let (mut mean, mut std) = (self.image_mean[c] as f32, self.image_std[c] as f32);
            if self.do_rescale {
                let inv = (1.0 / self.rescale_factor) as f32;
                mean *= inv;
                std *= inv;
            }
            for (v, out) in row.iter_mut().enumerate() {
                let x = v as f32;
                *out = if self.do_normalize {
                    (x - mean) / std
                } else if self.do_rescale {
                    x * self.rescale_factor as f32
                } else {
                    x
                };
            }
        }
        t
    }
}

/// Token strings and ids the processor needs.
#[derive(Debug, Clone)]
struct SpecialTokens {
    image: String,
    boi: String,
    eoi: String,
    image_id: u32,
    video_id: Option<u32>,
    audio: Option<(String, u32)>,
}

/// The Gemma4Unified processor of one checkpoint: tokenizer, image processor settings and
/// the multimodal special tokens.
#[derive(Debug, Clone)]
pub struct Processor {
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    /// `None` when the checkpoint has no processor config (text-only prompts still work).
    image: Option<ImageProcessorConfig>,
    image_config_dir: PathBuf,
    tokens: SpecialTokens,
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

        prepare_tokenizer(&mut tok, &tok_config).map_err(tok_err)?;
        let tokens = special_tokens(&tok, &tok_config, &config, &tokenizer_path, &config_path)?;

        let image = ImageProcessorConfig::from_checkpoint(dir)?;
        if let (Some(ip), Some(vision)) = (&image, config.get("vision_config").filter(|v| v.is_object())) {
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
        Ok(Processor { tokenizer: tok, tokenizer_path, image, image_config_dir: dir.into(), tokens })
    }

    /// The image processor settings in use, if the checkpoint has them.
    pub fn image_config(&self) -> Option<&ImageProcessorConfig> {
        self.image.as_ref()
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
            .encode(text.as_str(), true)
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
        let (max, dim) = (ip.max_soft_tokens, ip.patch_dim());
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
            pixel_values: Some(Dense::new(vec![n, max, dim], processed.iter().flat_map(|p| p.pixel_values.iter().copied()).collect())),
            image_position_ids: Some(Dense::new(vec![n, max, 2], processed.iter().flat_map(|p| p.position_ids.iter().copied()).collect())),
            mm_token_type_ids: Some(mm),
        })
    }
}

fn read_json(path: &Path) -> Result<Value, InputsError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputsError::Read { path: path.into(), source })?;
    serde_json::from_str(&text).map_err(|e| InputsError::Config { path: path.into(), message: format!("not valid JSON: {e}") })
}

/// A special-token entry of `tokenizer_config.json`: a string or a serialised `AddedToken`.
fn token_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Named special tokens of `tokenizer_config.json`: top-level `*_token` keys and a dict-style
/// `extra_special_tokens`.
fn named_tokens(config: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(map) = config.as_object() {
        for (k, v) in map {
            if k.ends_with("_token") {
                if let Some(s) = token_str(v) {
                    out.insert(k.clone(), s);
                }
            }
        }
        if let Some(Value::Object(extra)) = map.get("extra_special_tokens") {
            for (k, v) in extra {
                if let Some(s) = token_str(v) {
                    out.insert(k.clone(), s);
                }
            }
        }
    }
    out
}

/// What `TokenizersBackend.from_pretrained` and the processor's `__init__` do to the raw
/// `tokenizer.json` before encoding:
/// - special tokens named in `tokenizer_config.json` (and the processor's `<|video|>`) that are
///   not yet added tokens are added as special tokens, so they are never split;
/// - truncation and padding stored in `tokenizer.json` are dropped (the processor calls the
///   tokenizer with `padding=True` and no truncation, which for one sequence is neither).
///
/// The post-processor is left as `tokenizer.json` has it: `from_pretrained` discards
/// `add_bos_token`/`add_eos_token` from `tokenizer_config.json` whenever a `tokenizer.json`
/// exists, and a tokenizer.json without post-processor gets `$A` only — no BOS (both measured
/// with transformers 5.14.1).
fn prepare_tokenizer(tok: &mut Tokenizer, config: &Value) -> Result<(), String> {
    let named = named_tokens(config);
    const CORE: [&str; 7] = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];
    let mut wanted: Vec<String> = CORE.iter().filter_map(|k| named.get(*k).cloned()).collect();
    wanted.extend(named.iter().filter(|(k, _)| !CORE.contains(&k.as_str())).map(|(_, s)| s.clone()));
    if let Some(Value::Array(list)) = config.get("extra_special_tokens").or_else(|| config.get("additional_special_tokens")) {
        wanted.extend(list.iter().filter_map(token_str));
    }
    wanted.push(VIDEO_TOKEN.to_string());
    for s in wanted {
        let added = tok.get_added_tokens_decoder().values().any(|t| t.content == s);
        if !added && !s.is_empty() {
            tok.add_special_tokens([AddedToken::from(s, true)]).map_err(|e| format!("adding special token: {e}"))?;
        }
    }
    tok.with_truncation(None).map_err(|e| format!("disabling truncation: {e}"))?;
    tok.with_padding(None);
    Ok(())
}

/// Finds the image/boi/eoi (and optional video/audio) tokens: strings from
/// `tokenizer_config.json` (`image_token`, `boi_token`, `eoi_token`, `audio_token`), ids from the
/// tokenizer (as HF's `tokenizer.image_token_id`), cross-checked against `config.json`'s
/// `image_token_id`/`boi_token_id`/`eoi_token_id` — a mismatch means the model would not see
/// the image tokens the processor writes. Without a string in the tokenizer config, the token
/// with `config.json`'s id is used.
fn special_tokens(
    tok: &Tokenizer,
    tok_config: &Value,
    config: &Value,
    tok_path: &Path,
    config_path: &Path,
) -> Result<SpecialTokens, InputsError> {
    let named = named_tokens(tok_config);
    let config_id = |key: &str| config.get(key).and_then(Value::as_u64).map(|v| v as u32);
    let resolve = |name: &str, id_key: &str| -> Result<(String, u32), InputsError> {
        let s = match named.get(name) {
            Some(s) => s.clone(),
            None => config_id(id_key).and_then(|id| tok.id_to_token(id)).ok_or_else(|| InputsError::Tokenizer {
                path: tok_path.into(),
                message: format!("no `{name}` in tokenizer_config.json and no `{id_key}` in config.json naming a token of the vocabulary"),
            })?,
        };
        let id = tok
            .token_to_id(&s)
            .ok_or_else(|| InputsError::Tokenizer { path: tok_path.into(), message: format!("`{name}` {s:?} is not in the vocabulary") })?;
        if let Some(cid) = config_id(id_key) {
            if cid != id {
                return Err(InputsError::Config {
                    path: config_path.into(),
                    message: format!("`{id_key}` is {cid} but the tokenizer gives {s:?} id {id}"),
                });
            }
        }
        Ok((s, id))
    };
    let (image, image_id) = resolve("image_token", "image_token_id")?;
    let (boi, _) = resolve("boi_token", "boi_token_id")?;
    let (eoi, _) = resolve("eoi_token", "eoi_token_id")?;
    let audio = named.get("audio_token").and_then(|s| tok.token_to_id(s).map(|id| (s.clone(), id)));
    Ok(SpecialTokens { image, boi, eoi, image_id, video_id: tok.token_to_id(VIDEO_TOKEN), audio })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision")
    }

    #[test]
    fn target_sizes_match_hf_for_fixture_images() {
        // a.png 28×20 (W×H) → 36×28 → 9×7 = 63 soft tokens; b.png 12×12 → 32×32 → 64.
        assert_eq!(aspect_ratio_preserving_size(20, 28, 2, 280, 2), Ok((28, 36)));
        assert_eq!(aspect_ratio_preserving_size(12, 12, 2, 280, 2), Ok((32, 32)));
        // Extreme aspect ratio: HF's fallback branch.
        assert_eq!(aspect_ratio_preserving_size(1, 1000, 2, 280, 2), Ok((4, 280)));
    }

    #[test]
    fn processor_reproduces_hf_fixture_exactly() {
        let dir = fixture();
        let desc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("processor.json")).unwrap()).unwrap();
        let prompt = desc["text"].as_str().unwrap();
        let images: Vec<PathBuf> = desc["images"].as_array().unwrap().iter().map(|p| dir.join(p.as_str().unwrap())).collect();
        let p = Processor::from_checkpoint(&dir.join("checkpoint")).unwrap();
        let got = p.process(prompt, &images).unwrap();
        let want = ModelInputs::load_safetensors(&dir.join("processor.safetensors")).unwrap();
        assert_eq!(got.input_ids, want.input_ids);
        assert_eq!(got.mm_token_type_ids, want.mm_token_type_ids);
        assert_eq!(got.image_position_ids, want.image_position_ids);
        let (g, w) = (got.pixel_values.unwrap(), want.pixel_values.unwrap());
        assert_eq!(g.shape, w.shape);
        let max_diff = g.data.iter().zip(&w.data).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        // Bit-exact: the uint8 antialiased resize and the f32 rescale are reproduced exactly.
        assert_eq!(max_diff, 0.0, "pixel_values max abs diff vs HF");
        assert!(g.data.iter().zip(&w.data).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn text_only_prompt_gets_bos_and_nothing_else() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let got = p.process("dado bupa", &[]).unwrap();
        assert_eq!(got.input_ids[0], 2);
        assert_eq!(got.input_ids.len(), 3);
        assert!(got.pixel_values.is_none() && got.image_position_ids.is_none() && got.mm_token_type_ids.is_none());
    }

    #[test]
    fn missing_image_is_an_error_naming_it() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let missing = fixture().join("images/does-not-exist.png");
        let e = p.process("see <|image|> here", &[missing]).unwrap_err().to_string();
        assert!(e.contains("does-not-exist.png") && e.contains("cannot open"), "{e}");
    }

    #[test]
    fn placeholder_count_must_match_images() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let e = p.process("no placeholder", &[fixture().join("images/a.png")]).unwrap_err().to_string();
        assert!(e.contains("0 <|image|> placeholder(s) but 1 image(s)"), "{e}");
    }

    #[test]
    fn undecodable_image_is_an_error_naming_it() {
        let p = Processor::from_checkpoint(&fixture().join("checkpoint")).unwrap();
        let bad = fixture().join("processor.json");
        let e = p.process("<|image|>", &[bad]).unwrap_err().to_string();
        assert!(e.contains("processor.json") && e.contains("cannot decode"), "{e}");
    }
}
