//! `implementations:` which implementations of the model function a case judges against the
//! reference: `onnx` (the case's export and its variants; the default) and candle-transformers'
//! own gemma4. Each entry is a name, or a one-key map giving that implementation its own
//! expected failures (its divergences are not the export's):
//!
//! ```yaml
//! implementations:
//!   - onnx
//!   - candle-transformers:
//!       xfail: {L3: {reason: "...", first_divergence: logits, metrics: {max_abs_diff: 18.6}}}
//! ```

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::xfail::Xfail;
use crate::names::named_enum;

named_enum! {
    /// An implementation a case can judge.
    #[derive(PartialOrd, Ord)]
    pub enum ImplementationName("implementation") {
        /// The case's ONNX export(s) in ONNX Runtime.
        Onnx = "onnx",
        /// candle-transformers' `models::gemma4` (src/backend/candle_transformers.rs).
        CandleTransformers = "candle-transformers",
        /// The export in onnxruntime-genai, through its genai_config.json (src/backend/ort_genai.rs).
        OrtGenai = "ort-genai",
    }
}

/// One `implementations:` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ImplementationEntry {
    pub name: ImplementationName,
    /// Its expected failures (for `onnx`, the case's own `xfail:` applies instead).
    pub xfail: Option<Xfail>,
    pub notes: Option<String>,
}

/// The settings of a one-key entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntrySettings {
    #[serde(default)]
    xfail: Option<Xfail>,
    #[serde(default)]
    notes: Option<String>,
}

impl<'de> Deserialize<'de> for ImplementationEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ImplementationEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let names: Vec<_> = ImplementationName::ALL.iter().map(|n| n.as_str()).collect();
                write!(f, "an implementation name ({}) or a one-key map `<name>: {{xfail, notes}}`", names.join(", "))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImplementationEntry, E> {
                let name = v.parse::<ImplementationName>().map_err(E::custom)?;
                Ok(ImplementationEntry { name, xfail: None, notes: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ImplementationEntry, A::Error> {
                let Some((name, settings)) = map.next_entry::<ImplementationName, EntrySettings>()? else {
                    return Err(de::Error::custom("an empty map names no implementation"));
                };
                if map.next_key::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("one implementation per list entry"));
                }
                if name == ImplementationName::Onnx && settings.xfail.is_some() {
                    return Err(de::Error::custom("the onnx implementation's expected failures are the case's own `xfail:`"));
                }
                Ok(ImplementationEntry { name, xfail: settings.xfail, notes: settings.notes })
            }
        }
        d.deserialize_any(V)
    }
}

/// The default list: the export alone.
pub fn default_implementations() -> Vec<ImplementationEntry> {
    vec![ImplementationEntry { name: ImplementationName::Onnx, xfail: None, notes: None }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Vec<ImplementationEntry>, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    /// Guards: names and one-key maps parse; unknown names, two keys, unknown settings and an
    /// onnx xfail are errors that say what is accepted.
    #[test]
    fn entries_parse_and_bad_ones_are_named() {
        let list = parse("- onnx\n- candle-transformers: {xfail: {L3: bug}, notes: n}\n").expect("parses");
        assert_eq!(list[0].name, ImplementationName::Onnx);
        assert_eq!(list[1].name, ImplementationName::CandleTransformers);
        assert!(list[1].xfail.is_some() && list[1].notes.as_deref() == Some("n"));
        let e = parse("- candle\n").unwrap_err().to_string();
        assert!(e.contains("candle-transformers") && e.contains("\"candle\""), "{e}");
        let e = parse("- {onnx: {}, candle-transformers: {}}\n").unwrap_err().to_string();
        assert!(e.contains("one implementation per list entry"), "{e}");
        let e = parse("- candle-transformers: {xfial: x}\n").unwrap_err().to_string();
        assert!(e.contains("xfial"), "{e}");
        let e = parse("- onnx: {xfail: x}\n").unwrap_err().to_string();
        assert!(e.contains("case's own"), "{e}");
    }
}
