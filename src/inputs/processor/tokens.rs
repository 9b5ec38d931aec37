//! The tokenizer side shared by `Gemma4Processor` and `Gemma4UnifiedProcessor` (their text
//! code is identical in transformers 5.14.1): what `from_pretrained` and the processor's
//! `__init__` do to `tokenizer.json`, and which special tokens the prompt expansion uses.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tokenizers::{AddedToken, Tokenizer};

use crate::inputs::error::InputsError;

/// The processor adds this token itself (`tokenizer.add_special_tokens` in its `__init__`).
pub const VIDEO_TOKEN: &str = "<|video|>";

/// Token strings and ids the processor needs.
#[derive(Debug, Clone)]
pub struct SpecialTokens {
    pub image: String,
    pub boi: String,
    pub eoi: String,
    pub image_id: u32,
    pub video_id: Option<u32>,
    pub audio: Option<(String, u32)>,
}

/// A special-token entry of `tokenizer_config.json`: a string or a serialised `AddedToken`.
fn token_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Named special tokens of `tokenizer_config.json`: top-level `*_token` keys and a dict-style
/// `extra_special_tokens` (also the chat template's context, as HF's `special_tokens_map`).
pub(super) fn named_tokens(config: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(map) = config.as_object() {
        for (k, v) in map {
            if k.ends_with("_token") {
                if let Some(s) = token_str(v) {
                    out.insert(k.clone(), s);
                }
            }
        }
        if let Some(Value::Object(extra)) = map.get("extra_special_tokens") {
            for (k, v) in extra {
                if let Some(s) = token_str(v) {
                    out.insert(k.clone(), s);
                }
            }
        }
    }
    out
}

/// What `TokenizersBackend.from_pretrained` and the processor's `__init__` do to the raw
/// Why the tokenizer could not be set up as HF's processor sets it up.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("adding special token: {0}")]
    AddSpecial(#[source] tokenizers::Error),
    #[error("disabling truncation: {0}")]
    Truncation(#[source] tokenizers::Error),
}

/// `tokenizer.json` before encoding:
/// - special tokens named in `tokenizer_config.json` (and the processor's `<|video|>`) that are
///   not yet added tokens are added as special tokens, so they are never split;
/// - truncation and padding stored in `tokenizer.json` are dropped (the processor calls the
///   tokenizer with `padding=True` and no truncation, which for one sequence is neither).
///
/// The post-processor is left as `tokenizer.json` has it: `from_pretrained` discards
/// `add_bos_token`/`add_eos_token` from `tokenizer_config.json` whenever a `tokenizer.json`
/// exists, and a tokenizer.json without post-processor gets `$A` only — no BOS (both measured
/// with transformers 5.14.1).
pub fn prepare_tokenizer(tok: &mut Tokenizer, config: &Value) -> Result<(), PrepareError> {
    let named = named_tokens(config);
    const CORE: [&str; 7] = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];
    let mut wanted: Vec<String> = CORE.iter().filter_map(|k| named.get(*k).cloned()).collect();
    wanted.extend(named.iter().filter(|(k, _)| !CORE.contains(&k.as_str())).map(|(_, s)| s.clone()));
    if let Some(Value::Array(list)) = config.get("extra_special_tokens").or_else(|| config.get("additional_special_tokens")) {
        wanted.extend(list.iter().filter_map(token_str));
    }
    wanted.push(VIDEO_TOKEN.to_string());
    for s in wanted {
        let added = tok.get_added_tokens_decoder().values().any(|t| t.content == s);
        if !added && !s.is_empty() {
            tok.add_special_tokens([AddedToken::from(s, true)]).map_err(PrepareError::AddSpecial)?;
        }
    }
    tok.with_truncation(None).map_err(PrepareError::Truncation)?;
    tok.with_padding(None);
    Ok(())
}

/// Finds the image/boi/eoi (and optional video/audio) tokens: strings from
/// `tokenizer_config.json` (`image_token`, `boi_token`, `eoi_token`, `audio_token`), ids from the
/// tokenizer (as HF's `tokenizer.image_token_id`), cross-checked against `config.json`'s
/// `image_token_id`/`boi_token_id`/`eoi_token_id` — a mismatch means the model would not see
/// the image tokens the processor writes. Without a string in the tokenizer config, the token
/// with `config.json`'s id is used.
pub fn special_tokens(
    tok: &Tokenizer,
    tok_config: &Value,
    config: &Value,
    tok_path: &Path,
    config_path: &Path,
) -> Result<SpecialTokens, InputsError> {
    let named = named_tokens(tok_config);
    let config_id = |key: &str| config.get(key).and_then(Value::as_u64).map(|v| v as u32);
    let resolve = |name: &str, id_key: &str| -> Result<(String, u32), InputsError> {
        let s = match named.get(name) {
            Some(s) => s.clone(),
            None => config_id(id_key).and_then(|id| tok.id_to_token(id)).ok_or_else(|| InputsError::Tokenizer {
                path: tok_path.into(),
                message: format!("no `{name}` in tokenizer_config.json and no `{id_key}` in config.json naming a token of the vocabulary"),
            })?,
        };
        let id = tok
            .token_to_id(&s)
            .ok_or_else(|| InputsError::Tokenizer { path: tok_path.into(), message: format!("`{name}` {s:?} is not in the vocabulary") })?;
        if let Some(cid) = config_id(id_key) {
            if cid != id {
                return Err(InputsError::Config {
                    path: config_path.into(),
                    message: format!("`{id_key}` is {cid} but the tokenizer gives {s:?} id {id}"),
                });
            }
        }
        Ok((s, id))
    };
    let (image, image_id) = resolve("image_token", "image_token_id")?;
    let (boi, _) = resolve("boi_token", "boi_token_id")?;
    let (eoi, _) = resolve("eoi_token", "eoi_token_id")?;
    let audio = named.get("audio_token").and_then(|s| tok.token_to_id(s).map(|id| (s.clone(), id)));
    Ok(SpecialTokens { image, boi, eoi, image_id, video_id: tok.token_to_id(VIDEO_TOKEN), audio })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the named tokens (the chat template's context) are the `*_token` strings and
    /// `AddedToken` contents, and a dict-style `extra_special_tokens`; flags and nulls are not.
    #[test]
    fn named_tokens_are_the_token_strings() {
        let cfg = serde_json::json!({"bos_token": "<bos>", "pad_token": {"content": "<pad>"}, "add_bos_token": true, "image_token": "<|image|>", "unk_token": null});
        let got = named_tokens(&cfg);
        assert_eq!(got.len(), 3);
        assert_eq!(got["pad_token"], "<pad>");
        let extra = named_tokens(&serde_json::json!({"extra_special_tokens": {"video_token": "<|video|>"}, "eos_token": "<eos>"}));
        assert_eq!(extra.len(), 2);
        assert_eq!(extra["video_token"], "<|video|>");
    }
}
