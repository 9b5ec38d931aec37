//! Golden `input_ids` replay: L4/L5 feed a golden's own `input_ids` to both back ends (the
//! images still come from the processor), as mobius's L4 does — so a golden made with another
//! tokenizer, chat template or BOS policy is still judged on the inputs it was made for. The
//! case's own ids are compared with the golden's, and any difference is reported as an
//! [`IdsDrift`] naming the first differing position: tokenizer or template drift is visible,
//! never a silent change of inputs.

use std::fmt;

use super::ModelInputs;

/// Why a golden's `input_ids` cannot be fed with the case's images.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("the golden's input_ids are empty")]
    Empty,
    #[error(
        "the golden's input_ids hold {golden} {what} (mm_token_type {token_type}) but the case's images give {case}: \
         the golden was made for other images or image-processor settings ({drift})"
    )]
    TokenCount { what: &'static str, token_type: i64, golden: usize, case: usize, drift: IdsDrift },
}

/// Where the case's `input_ids` first differ from a golden's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdsDrift {
    /// The first index at which they differ (the shorter length when one is a prefix of the other).
    pub position: usize,
    /// The case's id there (`None`: the case's ids end before it).
    pub ours: Option<i64>,
    /// The golden's id there (`None`: the golden's ids end before it).
    pub golden: Option<i64>,
    pub ours_len: usize,
    pub golden_len: usize,
}

impl fmt::Display for IdsDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |x: Option<i64>| x.map_or_else(|| "end".to_string(), |x| x.to_string());
        write!(
            f,
            "the case's input_ids differ from the golden's at position {} (case {}, golden {}; {} vs {} ids): tokenizer, chat template or BOS drift",
            self.position,
            id(self.ours),
            id(self.golden),
            self.ours_len,
            self.golden_len
        )
    }
}

/// The first difference of two id sequences, `None` when they are equal.
pub fn first_difference(ours: &[i64], golden: &[i64]) -> Option<IdsDrift> {
    let position =
        ours.iter().zip(golden).position(|(a, b)| a != b).or((ours.len() != golden.len()).then(|| ours.len().min(golden.len())))?;
    Some(IdsDrift {
        position,
        ours: ours.get(position).copied(),
        golden: golden.get(position).copied(),
        ours_len: ours.len(),
        golden_len: golden.len(),
    })
}

/// `inputs` with the golden's ids in place of its own: `mm_token_type_ids` re-derived for the new
/// ids from the types the case's own inputs gave each token id (image soft token → 1, …). The
/// golden must hold as many image soft tokens as the images give, or the inputs would not fit
/// together (an error naming both counts). Returns the inputs unchanged when the ids are equal.
pub fn with_golden_ids(inputs: &ModelInputs, golden_ids: &[i64]) -> Result<(ModelInputs, Option<IdsDrift>), ReplayError> {
    if golden_ids.is_empty() {
        return Err(ReplayError::Empty);
    }
    let Some(drift) = first_difference(&inputs.input_ids, golden_ids) else {
        return Ok((inputs.clone(), None));
    };
    let mm_token_type_ids = match &inputs.mm_token_type_ids {
        None => None,
        Some(types) => {
            let mut type_of = std::collections::BTreeMap::new();
            for (&id, &t) in inputs.input_ids.iter().zip(types) {
                if t != 0 {
                    type_of.insert(id, t);
                }
            }
            let replayed: Vec<i64> = golden_ids.iter().map(|id| type_of.get(id).copied().unwrap_or(0)).collect();
            for t in type_of.values().copied().collect::<std::collections::BTreeSet<_>>() {
                let (ours, theirs) = (types.iter().filter(|&&x| x == t).count(), replayed.iter().filter(|&&x| x == t).count());
                if ours != theirs {
                    let what = if t == 1 { "image soft tokens" } else { "multimodal tokens" };
                    return Err(ReplayError::TokenCount { what, token_type: t, golden: theirs, case: ours, drift });
                }
            }
            Some(replayed)
        }
    };
    let replayed = ModelInputs { input_ids: golden_ids.to_vec(), mm_token_type_ids, ..inputs.clone() };
    Ok((replayed, Some(drift)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the first differing position, prefixes included; equal ids are no drift.
    #[test]
    fn first_difference_positions() {
        assert_eq!(first_difference(&[2, 5, 6], &[2, 5, 6]), None);
        let d = first_difference(&[2, 8291, 563], &[8291, 563]).unwrap();
        assert_eq!((d.position, d.ours, d.golden, d.ours_len, d.golden_len), (0, Some(2), Some(8291), 3, 2));
        let d = first_difference(&[1, 2], &[1, 2, 3]).unwrap();
        assert_eq!((d.position, d.ours, d.golden), (2, None, Some(3)));
        assert!(d.to_string().contains("position 2 (case end, golden 3; 2 vs 3 ids)"), "{d}");
    }

    /// Guards: token types follow the golden's ids; an image-token count that does not fit the
    /// images is an error, not a silently misaligned input.
    #[test]
    fn replayed_token_types_and_image_count() {
        let ours = ModelInputs {
            input_ids: vec![2, 9, 7, 7, 8, 5],
            mm_token_type_ids: Some(vec![0, 0, 1, 1, 0, 0]),
            ..ModelInputs::from_ids(vec![])
        };
        let (r, drift) = with_golden_ids(&ours, &[2, 100, 9, 7, 7, 8, 5, 6]).unwrap();
        assert_eq!(drift.unwrap().position, 1);
        assert_eq!(r.input_ids, vec![2, 100, 9, 7, 7, 8, 5, 6]);
        assert_eq!(r.mm_token_type_ids, Some(vec![0, 0, 0, 1, 1, 0, 0, 0]));
        let e = with_golden_ids(&ours, &[2, 9, 7, 8, 5]).unwrap_err().to_string();
        assert!(e.contains("hold 1 image soft tokens") && e.contains("give 2"), "{e}");
        let (same, none) = with_golden_ids(&ours, &ours.input_ids).unwrap();
        assert_eq!((same, none), (ours.clone(), None));
        assert!(with_golden_ids(&ours, &[]).is_err());
    }
}
