//! What a case asks of each run: how many tokens, which ones end it, and what to keep.

use crate::backend::GenerationRequest;
use crate::case::{Case, Level};

/// Default number of new tokens when neither the case nor a golden says.
pub const DEFAULT_MAX_NEW_TOKENS: usize = 20;

/// Number of tokens to generate: the case's `max_new_tokens`, else the default.
pub fn max_new_tokens(case: &Case) -> usize {
    case.generation.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS)
}

/// EOS ids: the case's `eos_token_id`, else Gemma's `<eos>` (1).
pub fn eos_ids(case: &Case) -> Vec<i64> {
    case.generation.eos_token_id.clone().unwrap_or_else(|| vec![1])
}

/// The generation a case asks for; all-position logits and layer outputs only when it has an L3
/// tier.
pub(crate) fn request<'a>(case: &Case, eos: &'a [i64], forced: Option<&'a [i64]>) -> GenerationRequest<'a> {
    let l3 = case.levels.contains(&Level::L3);
    GenerationRequest { max_new_tokens: max_new_tokens(case), eos, forced, all_position_logits: l3, layer_outputs: l3 }
}
