//! The two image paths of Gemma 4, behind one enum: the unified family's encoder-free embedder
//! and the gemma4 family's ViT tower. Both turn the processor's `pixel_values` /
//! `image_position_ids` into one feature row per image soft token, in the order the image
//! placeholders appear.

mod patches;
pub mod tower;
pub mod unified;

use candle_core::Tensor;

use crate::error::Result;
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
