//! Pixel operations of HF's Gemma 4 image processors (transformers 5.14.1, torchvision backend),
//! reproduced bit for bit: decoding to 8-bit RGB ([`load_rgb`]), the aspect-ratio-preserving
//! target size ([`aspect_ratio_preserving_size`]), PyTorch's antialiased uint8 resize
//! ([`resize_aa_u8`]), the uint8 → f32 rescale/normalise ([`value_table`]) and the cut into
//! zero-padded square patches ([`patchify`]).
//!
//! Both families (`Gemma4ImageProcessor` and `Gemma4UnifiedImageProcessor`) share all of this;
//! they differ only in the patch side and the padded length (see `processor::family`). Nothing
//! here knows about tokenizers or configuration files.

use std::path::Path;

use super::error::InputsError;

/// Resampling filter (`resample` in the image processor config, PIL numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// PIL 2 → torchvision BILINEAR (triangle filter, support 1).
    Bilinear,
    /// PIL 3 → torchvision BICUBIC (Keys cubic with a = -0.5, PIL's, support 2). Gemma's default.
    Bicubic,
}

impl Resample {
    pub fn from_pil(code: i64) -> Option<Resample> {
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
/// JPEG is decoded by libjpeg-turbo's code at PIL's settings ([`super::jpeg`]), so its pixels
/// equal PIL's bit for bit; PNG and the rest by the `image` crate, also exact.
pub fn load_rgb(path: &Path) -> Result<RgbImage, InputsError> {
    let err = |message: String| InputsError::Image { path: path.into(), message };
    let reader = image::ImageReader::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let reader = reader.with_guessed_format().map_err(|e| err(format!("cannot read: {e}")))?;
    if reader.format() == Some(image::ImageFormat::Jpeg) {
        let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let jpeg = super::jpeg::decode_like_pil(&bytes).map_err(|e| err(format!("cannot decode: {e}")))?;
        if jpeg.width == 0 || jpeg.height == 0 {
            return Err(err(format!("image is {}×{}", jpeg.width, jpeg.height)));
        }
        return Ok(RgbImage { height: jpeg.height, width: jpeg.width, data: jpeg.rgb });
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

/// The test pattern `check` feeds a vision export given no image, as a PNG: 96×64 (W×H, wider
/// than high, so a transposed patch grid shows; the processor resizes it to its own patch
/// budget), red rising left to right, green top to bottom, blue a checkerboard of 8 px squares,
/// so neighbouring patches differ.
pub fn test_pattern_png() -> Result<Vec<u8>, image::ImageError> {
    let (width, height) = (96u32, 64u32);
    let ramp = |v: u32, n: u32| (v * 255 / (n - 1)) as u8;
    let img =
        image::RgbImage::from_fn(width, height, |x, y| image::Rgb([ramp(x, width), ramp(y, height), ((x / 8 + y / 8) % 2 * 255) as u8]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)?;
    Ok(out.into_inner())
}

/// Why an image's size does not fit the processor's patch grid (the caller names the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error(
        "resizing {width}×{height} (W×H) would give a 0×0 image (sides must be multiples of pooling_kernel_size·patch_size = {side_mult})"
    )]
    ResizesToNothing { width: usize, height: usize, side_mult: usize },
    #[error("resizing {width}×{height} (W×H) to {target_width}×{target_height} exceeds {max_patches} patches of {patch_size} px")]
    ResizeExceeds { width: usize, height: usize, target_width: usize, target_height: usize, max_patches: usize, patch_size: usize },
    #[error("{w}×{h} (W×H) RGB image has {got} bytes, expected {expected}")]
    Bytes { w: usize, h: usize, got: usize, expected: usize },
    #[error("{w}×{h} (W×H) is not a whole number of {side} px patches")]
    NotWholePatches { w: usize, h: usize, side: usize },
    #[error("{w}×{h} (W×H) gives {count} patches of {side} px, more than the {rows} the processor pads to")]
    TooManyPatches { w: usize, h: usize, count: usize, side: usize, rows: usize },
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
) -> Result<(usize, usize), GeometryError> {
    let total_px = (height * width) as f64;
    let target_px = max_patches * patch_size * patch_size;
    let factor = (target_px as f64 / total_px).sqrt();
    let ideal_height = factor * height as f64;
    let ideal_width = factor * width as f64;
    let side_mult = pooling_kernel_size * patch_size;
    let mut target_height = (ideal_height / side_mult as f64).floor() as usize * side_mult;
    let mut target_width = (ideal_width / side_mult as f64).floor() as usize * side_mult;
    if target_height == 0 && target_width == 0 {
        return Err(GeometryError::ResizesToNothing { width, height, side_mult });
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
        return Err(GeometryError::ResizeExceeds { width, height, target_width, target_height, max_patches, patch_size });
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

/// uint8 → f32 per channel, as `rescale_and_normalize` computes it. `rescale` is
/// `rescale_factor` when `do_rescale`, `normalize` is `(image_mean, image_std)` when
/// `do_normalize`:
/// - rescale only: `uint8_tensor * rescale_factor`, an f32 product with the factor rounded
///   to f32 (measured in torch 2.15: this differs from the f64 product rounded for 126 of
///   the 256 values, so the order matters for bit-exactness);
/// - normalise: HF fuses the rescale into mean/std (`tensor(mean) * (1/rescale_factor)`,
///   f32) and runs `tvF.normalize`, `(x - mean) / std` in f32;
/// - neither: the raw values (HF would even keep them uint8).
pub fn value_table(rescale: Option<f64>, normalize: Option<([f64; 3], [f64; 3])>) -> [[f32; 256]; 3] {
    let mut t = [[0.0f32; 256]; 3];
    for (c, row) in t.iter_mut().enumerate() {
        let norm = normalize.map(|(mean, std)| {
            let (mut mean, mut std) = (mean[c] as f32, std[c] as f32);
            if let Some(factor) = rescale {
                let inv = (1.0 / factor) as f32;
                mean *= inv;
                std *= inv;
            }
            (mean, std)
        });
        for (v, out) in row.iter_mut().enumerate() {
            let x = v as f32;
            *out = match (norm, rescale) {
                (Some((mean, std)), _) => (x - mean) / std,
                (None, Some(factor)) => x * factor as f32,
                (None, None) => x,
            };
        }
    }
    t
}

/// An image cut into square patches and padded, before stacking into the batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Patches {
    /// `[rows, side² · 3]`: the real patches, then zero rows.
    pub pixel_values: Vec<f32>,
    /// `[rows, 2]`, (x, y) = (column, row) of each patch in the grid; (-1, -1) for padding.
    pub position_ids: Vec<i64>,
    /// Real (non-padding) patches.
    pub count: usize,
}

/// `convert_image_to_patches` followed by `pad_along_first_dim`: `side`-px squares in row-major
/// grid order, each flattened (row, column, channel) — the `permute(1, 3, 2, 4, 0)` of the CHW
/// tensor — with every sample mapped through `table` (see [`value_table`]; mapping the uint8
/// value is exact because the rescale is elementwise), then padded to `rows` with zero pixels
/// and position (-1, -1). Positions are `meshgrid(arange(W/side), arange(H/side), "xy")`:
/// x = column first.
///
/// Errors (the caller adds the file name) when the image is not a whole number of patches or
/// has more patches than `rows`: HF would fail in `reshape` or silently return an unpadded,
/// over-long sequence the model cannot take.
pub fn patchify(img: &RgbImage, side: usize, rows: usize, table: &[[f32; 256]; 3]) -> Result<Patches, GeometryError> {
    let (h, w) = (img.height, img.width);
    if img.data.len() != h * w * 3 {
        return Err(GeometryError::Bytes { w, h, got: img.data.len(), expected: h * w * 3 });
    }
    if side == 0 || h % side != 0 || w % side != 0 {
        return Err(GeometryError::NotWholePatches { w, h, side });
    }
    let (gh, gw) = (h / side, w / side);
    let count = gh * gw;
    if count > rows {
        return Err(GeometryError::TooManyPatches { w, h, count, side, rows });
    }
    let dim = side * side * 3;
    let mut pixel_values = vec![0.0f32; rows * dim];
    let mut position_ids = vec![-1i64; rows * 2];
    for gy in 0..gh {
        for gx in 0..gw {
            let m = gy * gw + gx;
            let dst = &mut pixel_values[m * dim..(m + 1) * dim];
            for r in 0..side {
                let src = ((gy * side + r) * w + gx * side) * 3;
                let row = &img.data[src..src + side * 3];
                for (i, (d, &s)) in dst[r * side * 3..(r + 1) * side * 3].iter_mut().zip(row).enumerate() {
                    *d = table[i % 3][s as usize];
                }
            }
            position_ids[m * 2] = gx as i64;
            position_ids[m * 2 + 1] = gy as i64;
        }
    }
    Ok(Patches { pixel_values, position_ids, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the target size follows HF's `get_aspect_ratio_preserving_size`, including its
    /// fallback branch for extreme aspect ratios.
    #[test]
    fn target_sizes_match_hf_for_fixture_images() {
        // a.png 28×20 (W×H) → 36×28 → 9×7 = 63 soft tokens; b.png 12×12 → 32×32 → 64.
        assert_eq!(aspect_ratio_preserving_size(20, 28, 2, 280, 2), Ok((28, 36)));
        assert_eq!(aspect_ratio_preserving_size(12, 12, 2, 280, 2), Ok((32, 32)));
        // Extreme aspect ratio: HF's fallback branch.
        assert_eq!(aspect_ratio_preserving_size(1, 1000, 2, 280, 2), Ok((4, 280)));
    }

    /// A W×H image whose sample at (y, x, c) is `100·y + 10·x + c`, so a value names its place.
    fn numbered(h: usize, w: usize) -> RgbImage {
        let data = (0..h).flat_map(|y| (0..w).flat_map(move |x| (0..3).map(move |c| (100 * y + 10 * x + c) as u8))).collect();
        RgbImage { height: h, width: w, data }
    }

    /// Guards: patches are row-major over the grid, flattened (row, column, channel) inside a
    /// patch, positions are (x = column, y = row), and padding is zero pixels with (-1, -1).
    #[test]
    fn patchify_lays_out_rows_columns_channels_and_pads() {
        let p = patchify(&numbered(2, 4), 2, 3, &value_table(None, None)).unwrap();
        assert_eq!(p.count, 2);
        #[rustfmt::skip]
        let want: Vec<f32> = vec![
            // patch (x 0, y 0): rows 0–1, columns 0–1
            0., 1., 2., 10., 11., 12., 100., 101., 102., 110., 111., 112.,
            // patch (x 1, y 0): rows 0–1, columns 2–3
            20., 21., 22., 30., 31., 32., 120., 121., 122., 130., 131., 132.,
            // padding
            0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0.,
        ];
        assert_eq!(p.pixel_values, want);
        assert_eq!(p.position_ids, vec![0, 0, 1, 0, -1, -1]);
    }

    /// Guards: a grid taller than one patch numbers positions (x, y) with x running fastest.
    #[test]
    fn patchify_positions_are_column_then_row() {
        let p = patchify(&numbered(4, 2), 2, 2, &value_table(None, None)).unwrap();
        assert_eq!(p.position_ids, vec![0, 0, 0, 1]);
        assert_eq!(&p.pixel_values[12..15], &[200., 201., 202.]);
    }

    /// Guards: images that are not a whole number of patches, or have more patches than rows,
    /// are errors rather than panics or silently over-long outputs.
    #[test]
    fn patchify_rejects_partial_patches_and_overflow() {
        let t = value_table(None, None);
        assert!(patchify(&numbered(3, 4), 2, 8, &t).unwrap_err().to_string().contains("not a whole number of 2 px patches"));
        assert!(patchify(&numbered(4, 4), 2, 3, &t).unwrap_err().to_string().contains("gives 4 patches of 2 px, more than the 3"));
        let short = RgbImage { height: 2, width: 2, data: vec![0; 11] };
        assert!(patchify(&short, 2, 1, &t).unwrap_err().to_string().contains("11 bytes, expected 12"));
    }

    /// Guards: the rescale is torch's f32 product `uint8 * f32(rescale_factor)`, not the f64
    /// product rounded to f32 (they disagree on about half the values), and normalisation uses
    /// HF's fused mean/std.
    #[test]
    fn value_table_rescales_in_f32_like_torch() {
        let t = value_table(Some(1.0 / 255.0), None);
        let f32_product = (0..256).filter(|&v| t[0][v] == v as f32 * (1.0f64 / 255.0) as f32).count();
        let f64_product = (0..256).filter(|&v| t[0][v] == (v as f64 / 255.0) as f32).count();
        assert_eq!(f32_product, 256);
        assert_eq!(f64_product, 256 - 126, "the f64 product rounded to f32 differs on 126 values (numpy, measured)");
        let n = value_table(Some(1.0 / 255.0), Some(([0.5; 3], [0.5; 3])));
        assert_eq!(n[1][0], (0.0 - 0.5 * 255.0f32) / (0.5 * 255.0f32));
        assert_eq!(value_table(None, None)[2][200], 200.0);
    }
}
