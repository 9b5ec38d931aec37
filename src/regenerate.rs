//! Golden regeneration (`onnx-parity golden`): L4 and L5 goldens computed by the reference, in
//! mobius's format, written atomically. An existing golden that differs is only replaced with
//! `force`, and every change is described.

use std::path::{Path, PathBuf};

use crate::case::Case;
use crate::evaluation::CaseEvaluation;
use crate::golden::{golden_paths, GenerationGolden, Golden};

/// What happened to one golden file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoldenChange {
    Created(PathBuf),
    Unchanged(PathBuf),
    Replaced {
        path: PathBuf,
        what: String,
    },
    /// Differs, not written (no `force`).
    Refused {
        path: PathBuf,
        what: String,
    },
}

impl std::fmt::Display for GoldenChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoldenChange::Created(p) => write!(f, "created   {}", p.display()),
            GoldenChange::Unchanged(p) => write!(f, "unchanged {}", p.display()),
            GoldenChange::Replaced { path, what } => write!(f, "replaced  {} ({what})", path.display()),
            GoldenChange::Refused { path, what } => {
                write!(f, "REFUSED   {} differs ({what}); rerun with --force to replace it", path.display())
            }
        }
    }
}

/// Why goldens could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error("{case}: {message}")]
    Case { case: String, message: String },
    #[error(transparent)]
    Golden(#[from] crate::golden::GoldenError),
}

/// Decodes generated tokens to text with the checkpoint's `tokenizer.json`, when there is one
/// (HF `decode(..., skip_special_tokens=True)`); mobius omits the text when it has no tokenizer.
pub fn decode_text(case: &Case, tokens: &[i64]) -> Option<String> {
    let path = case.tokenizer.clone().or_else(|| crate::artifacts::Artifacts::of(case).checkpoint.map(|c| c.join("tokenizer.json")))?;
    if !path.is_file() {
        return None;
    }
    let tok = tokenizers::Tokenizer::from_file(&path).ok()?;
    let ids: Vec<u32> = tokens.iter().map(|&t| u32::try_from(t).ok()).collect::<Option<_>>()?;
    tok.decode(&ids, true).ok()
}

/// Computes both goldens of `case` with the reference and writes them under `goldens_root`.
pub fn regenerate(case: &Case, goldens_root: &Path, force: bool) -> Result<Vec<GoldenChange>, RegenerateError> {
    let err = |message: String| RegenerateError::Case { case: case.path.display().to_string(), message };
    let eval = CaseEvaluation::default();
    let inputs = eval.inputs(case).map_err(|e| err(e.to_string()))?.clone();
    let run = &eval.reference(case).map_err(|e| err(e.to_string()))?.run;
    let last = run.prefill.last_logits().ok_or_else(|| err(format!("reference logits have shape {:?}", run.prefill.logits.shape)))?;
    let golden = Golden::from_logits(last, &inputs.input_ids)?;
    let tokens = &run.generation.tokens;
    let generation = GenerationGolden {
        model_id: case.model_id.clone(),
        prompt: case.inputs.prompts.first().cloned().unwrap_or_default(),
        generated_tokens: tokens.clone(),
        generated_text: decode_text(case, tokens),
    };
    let (json_path, gen_path) = golden_paths(goldens_root, &case.category, &case.name);
    let mut changes = Vec::new();

    let old = Golden::load(&json_path)?;
    let what = old.as_ref().map(|o| describe_golden(o, &golden));
    changes
        .push(apply(&json_path, old.map(|o| o.to_json_string()), golden.to_json_string(), what, force, || golden.save_atomic(&json_path))?);

    let old = GenerationGolden::load(&gen_path)?;
    let what = old.as_ref().map(|o| format!("tokens {:?} → {:?}", o.generated_tokens, generation.generated_tokens));
    changes.push(apply(&gen_path, old.map(|o| o.to_json_string()), generation.to_json_string(), what, force, || {
        generation.save_atomic(&gen_path)
    })?);
    Ok(changes)
}

fn describe_golden(old: &Golden, new: &Golden) -> String {
    let mut parts = Vec::new();
    if old.top1_id != new.top1_id {
        parts.push(format!("top1 {} → {}", old.top1_id, new.top1_id));
    }
    if old.top10_ids != new.top10_ids {
        parts.push("top-10 ids changed".to_string());
    }
    if old.input_ids != new.input_ids {
        parts.push(format!("input_ids changed ({} → {} tokens)", old.input_ids.len(), new.input_ids.len()));
    }
    let d = (old.logits_summary.max - new.logits_summary.max).abs();
    parts.push(format!("max logit moved by {d:.3e}"));
    parts.join(", ")
}

fn apply(
    path: &Path,
    old: Option<String>,
    new: String,
    what: Option<String>,
    force: bool,
    save: impl FnOnce() -> Result<(), crate::golden::GoldenError>,
) -> Result<GoldenChange, RegenerateError> {
    match old {
        None => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| RegenerateError::Case { case: path.display().to_string(), message: e.to_string() })?;
            }
            save()?;
            Ok(GoldenChange::Created(path.into()))
        }
        Some(o) if o == new => Ok(GoldenChange::Unchanged(path.into())),
        Some(_) if force => {
            save()?;
            Ok(GoldenChange::Replaced { path: path.into(), what: what.unwrap_or_default() })
        }
        Some(_) => Ok(GoldenChange::Refused { path: path.into(), what: what.unwrap_or_default() }),
    }
}
