//! Case YAML: what to compare, with which inputs, at which tiers.
//!
//! mobius case files load unchanged; this project adds local artifact paths (`checkpoint`, `onnx`,
//! `tokenizer`, `inputs.tensors`), explicit `inputs.input_ids`, `chat_template`, `levels`, `xfail`,
//! `tolerance_overrides`, `bidirectional`, `config`, `published_parameters`, `synthetic`, `export`,
//! `variants` and `implementations`.
//! Unknown keys, wrong types and bad values are errors that name the file, the key and what was
//! expected, because a silently ignored typo (`tolerence_overrides:`) would change what a green
//! run means.
//!
//! [`schema`] is the file as written, [`definition`] the validated [`Case`], [`level`] the tiers
//! and dtypes, [`discovery`] the search for case files.

pub mod candidate;
pub mod definition;
pub mod discovery;
pub mod error;
pub mod implementations;
pub mod infer;
/// The tiers and dtypes a case names live below `case/` (the tolerance table reads them too).
pub use crate::level;
pub mod schema;
pub mod xfail;

pub use candidate::Candidate;
pub use definition::{Case, Synthetic, Variant};
pub use discovery::discover;
pub use error::CaseError;
pub use implementations::{ImplementationEntry, ImplementationName};
pub use level::{parse_level_expr, Dtype, L3Rule, Level, LevelExprError};
/// Which attention layers see an image block bidirectionally. HF itself is inconsistent here,
/// so the case says which behaviour the export is judged against (the reference's own enum:
/// `all-layers`, `sliding-windowed`, `none`).
pub use onnx_parity_reference::BidirectionalScope;
pub use schema::{ExportPin, GenerationSettings, Inputs, Xfail};
