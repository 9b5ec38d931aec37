//! `Gemma4UnifiedVisionEmbedder`: the encoder-free image path.
//!
//! raw merged patches → LayerNorm → Linear → LayerNorm → + factorised (x, y) position embedding
//! (an axis with position −1 contributes nothing) → LayerNorm → scale-free RMSNorm → Linear (no
//! bias) to the text width. The three LayerNorms use PyTorch's default eps (1e-5); the RMSNorm
//! uses `vision_config.rms_norm_eps`.
//!
//! HF embeds every patch and then drops padding patches (both coordinates −1). Every step here is
//! row-wise (per patch), so the padding rows are dropped first; the kept rows get the same
//! numbers and no work is spent on padding.

use candle_core::Tensor;

use crate::config::UnifiedVisionConfig;
use crate::error::{Error, Result};
use crate::nn::linear::Linear;
use crate::nn::norm::{LayerNorm, RmsNorm, TORCH_LAYER_NORM_EPS};
use crate::weights::Weights;

/// The vision embedder's weights.
#[derive(Debug)]
pub struct UnifiedEmbedder {
    patch_ln1: LayerNorm,
    patch_dense: Linear,
    patch_ln2: LayerNorm,
    /// `[mm_posemb_size, 2, mm_embed_dim]`, split per axis: `[mm_posemb_size, mm_embed_dim]`.
    pos_x: Tensor,
    pos_y: Tensor,
    pos_norm: LayerNorm,
    pre_projection_norm: RmsNorm,
    embedding_projection: Linear,
    patch_dim: usize,
    posemb_size: usize,
}

impl UnifiedEmbedder {
    /// Loads `{prefix}.patch_ln1`, `patch_dense`, `patch_ln2`, `pos_embedding`, `pos_norm`,
    /// `multimodal_embedder.embedding_projection`.
    pub fn load(vcfg: &UnifiedVisionConfig, text_hidden: usize, w: &Weights, prefix: &str) -> Result<Self> {
        let patch_dim = vcfg.patch_dim();
        let mm = vcfg.mm_embed_dim;
        let eps = TORCH_LAYER_NORM_EPS;
        let pos = w.get(&format!("{prefix}.pos_embedding"), &[vcfg.mm_posemb_size, 2, mm])?;
        Ok(Self {
            patch_ln1: LayerNorm::load(w, &format!("{prefix}.patch_ln1"), patch_dim, eps)?,
            patch_dense: Linear::load(w, &format!("{prefix}.patch_dense"), patch_dim, mm, true)?,
            patch_ln2: LayerNorm::load(w, &format!("{prefix}.patch_ln2"), mm, eps)?,
            pos_x: pos.narrow(1, 0, 1)?.squeeze(1)?.contiguous()?,
            pos_y: pos.narrow(1, 1, 1)?.squeeze(1)?.contiguous()?,
            pos_norm: LayerNorm::load(w, &format!("{prefix}.pos_norm"), mm, eps)?,
            pre_projection_norm: RmsNorm::scale_free(vcfg.rms_norm_eps),
            embedding_projection: Linear::load(
                w,
                &format!("{prefix}.multimodal_embedder.embedding_projection"),
                vcfg.output_proj_dims,
                text_hidden,
                false,
            )?,
            patch_dim,
            posemb_size: vcfg.mm_posemb_size,
        })
    }

    /// `pixel_values` `[n_img, max_patches, patch_dim]` (f32) and `image_position_ids`
    /// `[n_img, max_patches, 2]` (i64, (−1, −1) = padding) → features `[n_tokens, hidden]` of the
    /// non-padding patches, image-major then patch order (HF's `vision_outputs[~padding_mask]`).
    pub fn forward(&self, pixel_values: &Tensor, image_position_ids: &Tensor) -> Result<Tensor> {
        let (n_img, max_patches) =
            super::patches::check_patch_inputs(pixel_values, image_position_ids, self.patch_dim, "model_patch_size²·3")?;
        let patch_dim = self.patch_dim;
        let pos: Vec<i64> = image_position_ids.to_dtype(candle_core::DType::I64)?.flatten_all()?.to_vec1()?;

        // Keep patches unless both coordinates are −1 (`(ids == -1).all(-1)`).
        let mut keep = Vec::new();
        let (mut xs, mut ys, mut vx, mut vy) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in 0..n_img * max_patches {
            let (x, y) = (pos[2 * row], pos[2 * row + 1]);
            if x == -1 && y == -1 {
                continue;
            }
            keep.push(row as u32);
            for (c, idx, valid) in [(x, &mut xs, &mut vx), (y, &mut ys, &mut vy)] {
                // `clamp(min=0)` for the lookup, `!= -1` for the validity factor; other negative
                // values are looked up at row 0 and still count, as in HF.
                let clamped = c.max(0);
                if clamped as usize >= self.posemb_size {
                    return Err(Error::input(format!("image position {c} outside the position table 0..{}", self.posemb_size)));
                }
                idx.push(clamped as u32);
                valid.push(if c != -1 { 1.0f32 } else { 0.0 });
            }
        }
        let dev = pixel_values.device();
        let n = keep.len();
        let keep = Tensor::from_vec(keep, n, dev)?;
        let patches = pixel_values.to_dtype(self.pos_x.dtype())?.reshape((n_img * max_patches, patch_dim))?.index_select(&keep, 0)?;

        // Step 1: LN → Dense → LN
        let h = self.patch_ln1.forward(&patches)?;
        let h = self.patch_dense.forward(&h)?;
        let h = self.patch_ln2.forward(&h)?;

        // Step 2: + (pos[x, 0]·valid_x + pos[y, 1]·valid_y) → LN
        let ex = self.pos_x.index_select(&Tensor::from_vec(xs, n, dev)?, 0)?;
        let ey = self.pos_y.index_select(&Tensor::from_vec(ys, n, dev)?, 0)?;
        let vx = Tensor::from_vec(vx, (n, 1), dev)?.to_dtype(self.pos_x.dtype())?;
        let vy = Tensor::from_vec(vy, (n, 1), dev)?.to_dtype(self.pos_x.dtype())?;
        let pos_embs = (ex.broadcast_mul(&vx)? + ey.broadcast_mul(&vy)?)?;
        let h = (h + pos_embs)?;
        let h = self.pos_norm.forward(&h)?;

        // Step 3: scale-free RMSNorm → projection to the text width
        let h = self.pre_projection_norm.forward(&h)?;
        self.embedding_projection.forward(&h)
    }
}
