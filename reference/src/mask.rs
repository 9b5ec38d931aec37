//! Attention masks: causal, exclusive sliding window, and the bidirectional image-block overlay
//! in the three scopes HF implements (docs/design.md §5).
//!
//! HF builds masks from boolean mask functions over absolute positions (`masking_utils.py`):
//! `causal_mask_function` (`k ≤ q`), `sliding_window_overlay` (`k > q − w`, so the window is
//! exclusive: `q − k < w`), and `blockwise_overlay` (`q` and `k` in the same non-text block).
//! Gemma4Unified combines them three different ways depending on the code path:
//!
//! | scope | full layers | sliding layers | HF code path |
//! |---|---|---|---|
//! | `all-layers` | `causal ∨ block` | `(causal ∧ window) ∨ block` | `Gemma4UnifiedModel.forward` (`create_masks_for_generate(block_sequence_ids=…)`) |
//! | `sliding-windowed` | `causal` | `(causal ∨ block) ∧ window` | `create_masks_for_vision_model` (`Gemma4Model.forward`, compileable-cache generate) |
//! | `none` | `causal` | `causal ∧ window` | no `mm_token_type_ids` (static-cache decode, text-only) |
//!
//! Blocks come only from `mm_token_type_ids` (HF's `get_block_sequence_ids_for_mask`): each
//! maximal run of vision tokens (type 1 image or 2 video) is one block; text, audio and positions
//! past the prompt (decode steps, where HF drops `mm_token_type_ids`) are in no block. Masked
//! scores get `f32::MIN` added (HF's eager mask uses `finfo(dtype).min`, not `-inf`).

use std::fmt;
use std::str::FromStr;

use candle_core::{DType, Device, Tensor};

use crate::config::{LayerType, ModelType};
use crate::error::{Error, Result};

/// Which layers the bidirectional image-block overlay reaches (see the module table). Case files
/// name it in kebab case (`bidirectional: sliding-windowed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BidirectionalScope {
    /// Block ORed into full and sliding masks, unlimited by the window (`Gemma4UnifiedModel.forward`).
    AllLayers,
    /// Full layers causal; sliding layers `window ∧ (causal ∨ block)` (`Gemma4Model.forward`).
    SlidingWindowed,
    /// No overlay.
    None,
}

impl BidirectionalScope {
    /// What HF's own `forward` does for `model_type` when the text config has
    /// `use_bidirectional_attention: "vision"`: `gemma4_unified` → all-layers, `gemma4` →
    /// sliding-windowed, the text-only types → none. (A config with
    /// `use_bidirectional_attention: null` gets no overlay from HF whatever the type; see
    /// `Gemma4::hf_forward_scope`.)
    pub fn default_for(model_type: ModelType) -> Self {
        match model_type {
            ModelType::Gemma4Unified => Self::AllLayers,
            ModelType::Gemma4 => Self::SlidingWindowed,
            ModelType::Gemma4Text | ModelType::Gemma4UnifiedText => Self::None,
        }
    }

    /// The name used in case files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllLayers => "all-layers",
            Self::SlidingWindowed => "sliding-windowed",
            Self::None => "none",
        }
    }

    /// All scopes, in the documented order.
    pub const ALL: [BidirectionalScope; 3] = [Self::AllLayers, Self::SlidingWindowed, Self::None];
}

impl FromStr for BidirectionalScope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "all-layers" => Ok(Self::AllLayers),
            "sliding-windowed" => Ok(Self::SlidingWindowed),
            "none" => Ok(Self::None),
            other => Err(Error::UnknownScope(other.to_string())),
        }
    }
}

impl fmt::Display for BidirectionalScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// HF `get_block_sequence_ids_for_mask`: block index per position, −1 outside vision runs.
pub fn block_ids(mm_token_type_ids: &[i64]) -> Vec<i64> {
    let mut out = Vec::with_capacity(mm_token_type_ids.len());
    let mut group = -1i64;
    let mut prev_vision = false;
    for &t in mm_token_type_ids {
        let vision = t == 1 || t == 2;
        if vision && !prev_vision {
            group += 1;
        }
        out.push(if vision { group } else { -1 });
        prev_vision = vision;
    }
    out
}

/// Everything that decides visibility, for one sequence.
#[derive(Debug, Clone)]
pub struct MaskRule {
    pub scope: BidirectionalScope,
    pub sliding_window: usize,
    /// Block id per absolute position of the prompt; later positions are in no block.
    pub block_ids: Vec<i64>,
}

impl MaskRule {
    fn block(&self, pos: usize) -> i64 {
        self.block_ids.get(pos).copied().unwrap_or(-1)
    }

    /// Whether query position `q` may attend key position `k` in a layer of type `lt`.
    pub fn visible(&self, lt: LayerType, q: usize, k: usize) -> bool {
        let causal = k <= q;
        // `kv_idx > q_idx - sliding_window`, in signed arithmetic.
        let window = (k as i64) > (q as i64) - (self.sliding_window as i64);
        let bq = self.block(q);
        let block = bq >= 0 && bq == self.block(k);
        match (self.scope, lt) {
            (BidirectionalScope::AllLayers, LayerType::Full) => causal || block,
            (BidirectionalScope::AllLayers, LayerType::Sliding) => (causal && window) || block,
            (BidirectionalScope::SlidingWindowed, LayerType::Full) => causal,
            (BidirectionalScope::SlidingWindowed, LayerType::Sliding) => (causal || block) && window,
            (BidirectionalScope::None, LayerType::Full) => causal,
            (BidirectionalScope::None, LayerType::Sliding) => causal && window,
        }
    }

    /// Additive mask `[q_len, kv_len]` for queries at positions `q_start..q_start+q_len` over
    /// keys at positions `0..kv_len`: 0 where visible, the dtype's lowest finite value
    /// elsewhere (`torch.finfo(dtype).min`). `None` when every key is visible (nothing to add).
    pub fn bias(
        &self,
        lt: LayerType,
        q_start: usize,
        q_len: usize,
        kv_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let mut data = Vec::with_capacity(q_len * kv_len);
        let mut any_masked = false;
        for q in q_start..q_start + q_len {
            for k in 0..kv_len {
                let v = self.visible(lt, q, k);
                any_masked |= !v;
                data.push(v);
            }
        }
        if !any_masked {
            return Ok(None);
        }
        // `torch.finfo(dtype).min`: f32's would round to -inf in a half dtype.
        let min = match dtype {
            DType::F64 => f64::MIN,
            DType::F16 => half::f16::MIN.to_f64(),
            DType::BF16 => half::bf16::MIN.to_f64(),
            _ => f32::MIN as f64,
        };
        let vals: Vec<f64> = data.into_iter().map(|v| if v { 0.0 } else { min }).collect();
        Ok(Some(Tensor::from_vec(vals, (q_len, kv_len), device)?.to_dtype(dtype)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LayerType::{Full, Sliding};

    /// Renders the visibility matrix as rows of '1'/'.' for readable expectations.
    fn grid(rule: &MaskRule, lt: LayerType, n: usize) -> Vec<String> {
        (0..n).map(|q| (0..n).map(|k| if rule.visible(lt, q, k) { '1' } else { '.' }).collect()).collect()
    }

    fn rule(scope: BidirectionalScope, w: usize, types: &[i64]) -> MaskRule {
        MaskRule { scope, sliding_window: w, block_ids: block_ids(types) }
    }

    /// Guards block numbering: each maximal run of types 1/2 is one block, others −1.
    #[test]
    fn block_ids_runs() {
        assert_eq!(block_ids(&[0, 1, 1, 0, 2, 1, 3, 1]), vec![-1, 0, 0, -1, 1, 1, -1, 2]);
        assert_eq!(block_ids(&[]), Vec::<i64>::new());
    }

    /// Guards causality and the *exclusive* window: with w = 2 a query sees itself and one
    /// predecessor (`q − k < w`), never a future key.
    #[test]
    fn causal_and_exclusive_window() {
        let r = rule(BidirectionalScope::None, 2, &[0, 0, 0, 0]);
        assert_eq!(grid(&r, Full, 4), ["1...", "11..", "111.", "1111"]);
        assert_eq!(grid(&r, Sliding, 4), ["1...", "11..", ".11.", "..11"]);
    }

    /// Guards the all-layers overlay: the image block (positions 1..=3) is fully visible to
    /// itself on both layer types, even beyond the window on sliding layers; text stays causal.
    #[test]
    fn all_layers_overlay() {
        let r = rule(BidirectionalScope::AllLayers, 2, &[0, 1, 1, 1, 0]);
        assert_eq!(grid(&r, Full, 5), ["1....", "1111.", "1111.", "1111.", "11111"]);
        // Query 3 sees key 1 (same block, distance 2 = w) although the window excludes it.
        assert_eq!(grid(&r, Sliding, 5), ["1....", "1111.", ".111.", ".111.", "...11"]);
    }

    /// Guards the sliding-windowed overlay: full layers ignore the block; on sliding layers the
    /// block may look forward but the window still cuts keys ≥ w behind.
    #[test]
    fn sliding_windowed_overlay() {
        let r = rule(BidirectionalScope::SlidingWindowed, 2, &[0, 1, 1, 1, 0]);
        assert_eq!(grid(&r, Full, 5), ["1....", "11...", "111..", "1111.", "11111"]);
        assert_eq!(grid(&r, Sliding, 5), ["1....", "1111.", ".111.", "..11.", "...11"]);
        // Window smaller than the block: query 1 sees forward keys 2,3 but query 3 not key 1.
        let r = rule(BidirectionalScope::SlidingWindowed, 1, &[1, 1, 1]);
        assert_eq!(grid(&r, Sliding, 3), ["111", ".11", "..1"]);
    }

    /// Guards that two separate images are separate blocks (no cross-image look-ahead).
    #[test]
    fn separate_blocks() {
        let r = rule(BidirectionalScope::AllLayers, 8, &[1, 1, 0, 1, 1]);
        assert_eq!(grid(&r, Full, 5), ["11...", "11...", "111..", "11111", "11111"]);
    }

    /// Guards that positions past the prompt (decode steps) are in no block.
    #[test]
    fn decode_positions_are_text() {
        let r = rule(BidirectionalScope::AllLayers, 8, &[1, 1]);
        assert!(!r.visible(Full, 1, 2));
        assert!(r.visible(Full, 2, 1));
        assert!(!r.visible(Full, 2, 3));
    }

    /// Guards the additive form: 0 / f32::MIN, and `None` when nothing is masked.
    #[test]
    fn bias_values() -> Result<()> {
        let r = rule(BidirectionalScope::None, 4, &[]);
        let b = r.bias(Full, 0, 2, 2, DType::F32, &Device::Cpu)?.map(|t| t.to_vec2::<f32>());
        assert_eq!(b.transpose()?, Some(vec![vec![0.0, f32::MIN], vec![0.0, 0.0]]));
        assert!(r.bias(Full, 1, 1, 2, DType::F32, &Device::Cpu)?.is_none());
        Ok(())
    }

    /// Guards scope parsing and the per-model-type defaults.
    #[test]
    fn scope_names() -> Result<()> {
        for s in BidirectionalScope::ALL {
            assert_eq!(s.as_str().parse::<BidirectionalScope>()?, s);
        }
        assert!(matches!("both".parse::<BidirectionalScope>(), Err(Error::UnknownScope(_))));
        assert_eq!(BidirectionalScope::default_for(ModelType::Gemma4Unified), BidirectionalScope::AllLayers);
        assert_eq!(BidirectionalScope::default_for(ModelType::Gemma4), BidirectionalScope::SlidingWindowed);
        assert_eq!(BidirectionalScope::default_for(ModelType::Gemma4UnifiedText), BidirectionalScope::None);
        assert_eq!(BidirectionalScope::default_for(ModelType::Gemma4Text), BidirectionalScope::None);
        Ok(())
    }
}
