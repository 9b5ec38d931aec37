//! The two image paths of Gemma 4, behind one enum: the unified family's encoder-free embedder
//! and the gemma4 family's ViT tower. Both turn the processor's `pixel_values` /
//! `image_position_ids` into one feature row per image soft token, in the order the image
//! placeholders appear.

pub mod tower;
pub mod unified;

use candle_core::Tensor;

use crate::error::{Error, Result};
pub use tower::VisionTower;
pub use unified::UnifiedEmbedder;

/// How a checkpoint turns images into soft tokens.
#[derive(Debug)]
pub enum VisionPath {
    /// `gemma4_unified`: merged patches → LayerNorms, Dense, factorised positions → projection.
    Unified(UnifiedEmbedder),
    /// `gemma4`: ViT tower over unmerged patches, k×k pooling, `embed_vision`.
    Tower(VisionTower),
}

impl VisionPath {
    /// Features `[n_tokens, text_hidden]` of the non-padding soft tokens, image-major.
    pub fn forward(&self, pixel_values: &Tensor, image_position_ids: &Tensor) -> Result<Tensor> {
        match self {
            VisionPath::Unified(v) => v.forward(pixel_values, image_position_ids),
            VisionPath::Tower(v) => v.forward(pixel_values, image_position_ids),
        }
    }
}

/// Checks the processor layout both paths take: `pixel_values` `[n_img, max_patches, patch_dim]`
/// with the model's `patch_dim` (`what` says how it is made) and `image_position_ids` `[n_img,
/// max_patches, 2]`; returns `(n_img, max_patches)`.
pub(crate) fn check_patch_inputs(
    pixel_values: &Tensor,
    image_position_ids: &Tensor,
    patch_dim: usize,
    what: &str,
) -> Result<(usize, usize)> {
    let (n_img, max_patches, got) = pixel_values
        .dims3()
        .map_err(|_| Error::input(format!("pixel_values must be [n_img, max_patches, {what}], got {:?}", pixel_values.dims())))?;
    if got != patch_dim {
        return Err(Error::input(format!("pixel_values last dim {got} ≠ {what} = {patch_dim}")));
    }
    if image_position_ids.dims() != [n_img, max_patches, 2] {
        return Err(Error::input(format!("image_position_ids must be [{n_img}, {max_patches}, 2], got {:?}", image_position_ids.dims())));
    }
    Ok((n_img, max_patches))
}
