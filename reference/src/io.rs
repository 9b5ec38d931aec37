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

impl GeneratedTokens {
    /// The greedy / teacher-forced loop every implementation runs, so they count steps and stop
    /// alike: from the prefill's last-position logits `first`, up to `max_new` tokens — with
    /// `forced`, its tokens (at most `max_new`, no EOS stop), else `choose(k, logits)`'s pick,
    /// stopping after a token in `eos` (which is kept). `step(k, token)` feeds the k-th chosen
    /// token to the cache and returns the next logits; it is not called after the last token.
    pub fn decode<E>(
        first: Vec<f32>,
        max_new: usize,
        eos: &[i64],
        forced: Option<&[i64]>,
        mut choose: impl FnMut(usize, &[f32]) -> Result<i64, E>,
        mut step: impl FnMut(usize, i64) -> Result<Vec<f32>, E>,
    ) -> Result<GeneratedTokens, E> {
        let limit = forced.map_or(max_new, |f| f.len().min(max_new));
        let mut out = GeneratedTokens::default();
        let mut logits = first;
        for k in 0..limit {
            let next = match forced {
                Some(f) => f[k],
                None => choose(k, &logits)?,
            };
            out.tokens.push(next);
            out.step_logits.push(std::mem::take(&mut logits));
            if k + 1 == limit || (forced.is_none() && eos.contains(&next)) {
                break;
            }
            logits = step(k, next)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::GeneratedTokens;

    /// Each step's logits: token t at step k yields logits peaking at id 10 + k + t.
    fn run(max_new: usize, eos: &[i64], forced: Option<&[i64]>) -> (GeneratedTokens, usize) {
        let peak = |i: usize| (0..40).map(|j| if j == i { 1.0 } else { 0.0 }).collect::<Vec<f32>>();
        let mut steps = 0;
        let argmax = |_: usize, l: &[f32]| -> Result<i64, ()> { Ok(l.iter().position(|&v| v == 1.0).ok_or(())? as i64) };
        let g = GeneratedTokens::decode(peak(3), max_new, eos, forced, argmax, |k, t| {
            steps += 1;
            Ok(peak(10 + k + t as usize))
        })
        .expect("decodes");
        (g, steps)
    }

    /// Guards the loop's counting: greedy picks, EOS kept and stops, forced tokens fed without an
    /// EOS stop and cut at `max_new`, no step after the last token, nothing for `max_new` 0.
    #[test]
    fn greedy_forced_and_eos() {
        let (g, steps) = run(3, &[], None);
        assert_eq!((g.tokens, steps), (vec![3, 13, 24], 2));
        let (g, steps) = run(5, &[13], None);
        assert_eq!((g.tokens, steps, g.step_logits.len()), (vec![3, 13], 1, 2));
        let (g, steps) = run(2, &[13], Some(&[13, 5, 6]));
        assert_eq!((g.tokens, steps), (vec![13, 5], 1));
        let (g, steps) = run(0, &[], None);
        assert!(g.tokens.is_empty() && g.step_logits.is_empty() && steps == 0);
    }
}
