//! A case file's YAML as written: mobius's fields unchanged plus this project's additions, each
//! key checked (`deny_unknown_fields`), each value validated while parsing so an error carries
//! the key and the line. [`super::definition::Case`] is what they become.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

pub use super::xfail::Xfail;
use crate::eps::Ep;
use crate::level::{Dtype, Level, LevelExpr};
use crate::tolerance::{token_ratio, ToleranceOverrides};
use onnx_parity_reference::BidirectionalScope;

/// `inputs:`. mobius's `prompts`, `images`, `audio` plus our explicit ids and tensors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    #[serde(default)]
    pub prompts: Vec<String>,
    /// As written (mobius resolves these against its `testdata/`); not resolved here.
    #[serde(default)]
    pub images: Vec<String>,
    /// As written (mobius speech cases); not resolved here.
    #[serde(default)]
    pub audio: Vec<String>,
    /// Explicit token ids, bypassing the tokenizer.
    #[serde(default)]
    pub input_ids: Option<Vec<i64>>,
    /// safetensors with `input_ids`, `pixel_values`, `image_position_ids`, `mm_token_type_ids`
    /// (the HF processor layout); resolved against the YAML's folder.
    #[serde(default)]
    pub tensors: Option<PathBuf>,
}

/// `generation:` (mobius). Greedy decoding parameters for L5 and golden generation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationSettings {
    #[serde(default)]
    pub max_new_tokens: Option<usize>,
    #[serde(default)]
    pub do_sample: bool,
    /// `eos_token_id: 1` or `eos_token_id: [1, 106]`, always held as a list.
    #[serde(default, deserialize_with = "de_one_or_many")]
    pub eos_token_id: Option<Vec<i64>>,
}

fn de_one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i64>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<i64>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a token id or a list of token ids")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(vec![v]))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v).map(|v| Some(vec![v])).map_err(|_| E::custom(format!("token id {v} is too large")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(id) = seq.next_element::<i64>()? {
                out.push(id);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_any(V)
}

/// The file as written; turned into a [`Case`] by [`Case::load`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCase {
    pub(crate) model_id: String,
    pub(crate) model_type: String,
    #[serde(default)]
    pub(crate) revision: Option<String>,
    #[serde(default)]
    pub(crate) task_type: Option<String>,
    pub(crate) dtype: Dtype,
    #[serde(default)]
    pub(crate) inputs: Option<Inputs>,
    #[serde(default)]
    pub(crate) level: Option<LevelExpr>,
    #[serde(default)]
    pub(crate) levels: Option<Vec<Level>>,
    #[serde(default)]
    pub(crate) generation: Option<GenerationSettings>,
    #[serde(default)]
    pub(crate) skip_reason: Option<String>,
    #[serde(default)]
    pub(crate) ci_skip_reason: Option<String>,
    #[serde(default, deserialize_with = "token_ratio")]
    pub(crate) min_token_match_ratio: Option<f64>,
    #[serde(default)]
    pub(crate) notes: Option<String>,
    #[serde(default)]
    pub(crate) checkpoint: Option<PathBuf>,
    #[serde(default)]
    pub(crate) onnx: Option<PathBuf>,
    #[serde(default)]
    pub(crate) tokenizer: Option<PathBuf>,
    #[serde(default)]
    pub(crate) chat_template: Option<bool>,
    #[serde(default)]
    pub(crate) xfail: Option<Xfail>,
    #[serde(default)]
    pub(crate) tolerance_overrides: Option<ToleranceOverrides>,
    #[serde(default)]
    pub(crate) bidirectional: Option<BidirectionalScope>,
    #[serde(default)]
    pub(crate) l3_rule: Option<crate::level::L3Rule>,
    #[serde(default)]
    pub(crate) config: Option<PathBuf>,
    #[serde(default)]
    pub(crate) published_parameters: Option<u64>,
    #[serde(default)]
    pub(crate) synthetic: Option<RawSynthetic>,
    #[serde(default)]
    pub(crate) export: Option<ExportPin>,
    #[serde(default)]
    pub(crate) variants: BTreeMap<String, RawVariant>,
    #[serde(default)]
    pub(crate) implementations: Option<Vec<super::implementations::ImplementationEntry>>,
}

/// `export:` what a case says its export is — mobius's `--ep`, `--dtype` and `--static-cache` —
/// which L1 holds the export to (and which selects the EP's contract checks).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportPin {
    #[serde(default)]
    pub ep: Option<Ep>,
    #[serde(default)]
    pub dtype: Option<Dtype>,
    #[serde(default)]
    pub static_cache: Option<bool>,
}

/// One `variants:` entry as written: another build of the case's model (an EP's, a dtype's, a
/// static-cache one), judged against the same reference run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVariant {
    #[serde(default)]
    pub(crate) onnx: Option<PathBuf>,
    #[serde(default)]
    pub(crate) export: Option<ExportPin>,
    #[serde(default)]
    pub(crate) xfail: Option<Xfail>,
    /// The expected failures of the case's other runtimes on this build (`- ort-genai: {xfail:
    /// ...}`); an implementation listed here and not by the case judges this build too.
    #[serde(default)]
    pub(crate) implementations: Vec<super::implementations::ImplementationEntry>,
    #[serde(default)]
    pub(crate) notes: Option<String>,
}

/// `synthetic:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSynthetic {
    pub(crate) checkpoint: PathBuf,
    pub(crate) onnx: PathBuf,
    #[serde(default)]
    pub(crate) inputs: Option<Inputs>,
    #[serde(default)]
    pub(crate) notes: Option<String>,
}
