//! The processor layout both image paths take, checked once.

use candle_core::Tensor;

use crate::error::{Error, Result};

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
