//! The plain data both back ends of a comparison exchange: the inputs of one prompt and what a
//! greedy generation produced. Plain vectors, not candle tensors, so that the ONNX Runtime side
//! of the harness uses the very same types (one `ModelInputs`, one `GeneratedTokens`).

/// A dense row-major tensor: shape and data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dense<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

impl<T> Dense<T> {
    /// `shape`'s product must equal `data.len()` (checked in debug builds).
    pub fn new(shape: Vec<usize>, data: Vec<T>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Dense { shape, data }
    }

    /// Whether the shape's element count equals the data length (for values built by hand).
    pub fn is_consistent(&self) -> bool {
        self.shape.iter().product::<usize>() == self.data.len()
    }
}

/// One prompt in the HF processor's layout (batch size 1).
///
/// `pixel_values` rows are raw patches: for `gemma4_unified` merged `(k·p)²·3` patches padded to
/// `max_soft_tokens`, for `gemma4` unmerged `3·p²` patches padded to `max_soft_tokens·k²`; in both
/// the rows are HWC within a patch and `image_position_ids` holds each patch's (x, y) on the
/// patch grid, (−1, −1) for padding rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelInputs {
    /// `input_ids` [1, S], image placeholders already expanded.
    pub input_ids: Vec<i64>,
    /// `pixel_values` [n_img, max_patches, patch_dim], f32 in the processor's value range.
    pub pixel_values: Option<Dense<f32>>,
    /// `image_position_ids` [n_img, max_patches, 2].
    pub image_position_ids: Option<Dense<i64>>,
    /// `mm_token_type_ids` [1, S]: 0 text, 1 image, 2 video, 3 audio; decides the image blocks.
    pub mm_token_type_ids: Option<Vec<i64>>,
}

impl ModelInputs {
    /// A text-only prompt.
    pub fn from_ids(ids: Vec<i64>) -> Self {
        ModelInputs { input_ids: ids, ..Default::default() }
    }

    /// Whether the prompt carries images.
    pub fn has_images(&self) -> bool {
        self.pixel_values.is_some()
    }
}

/// A greedy generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GeneratedTokens {
    /// New tokens only; ends with the EOS token if one was produced (free-running decodes).
    pub tokens: Vec<i64>,
    /// Logits (softcapped, `[vocab]`) each token was chosen from (or, teacher-forced, fed after):
    /// step 0 is the prefill's last position, step k the k-th cached decode step (HF
    /// `generate(output_logits=True)`).
    pub step_logits: Vec<Vec<f32>>,
}
