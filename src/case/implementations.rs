//! `implementations:` which implementations of the model function a case judges against the
//! reference: `onnx` (the case's export and its variants in the harness's pipeline; the
//! default), `candle-transformers` (its own gemma4 on the checkpoint), `ort-genai` (each build
//! in onnxruntime-genai) — whatever the registry holds (`crate::evaluation::implementations`).
//! Each entry is a name, or a one-key map giving that implementation its own expected failures
//! (its divergences are not the export's); a variant may list entries too, for its build:
//!
//! ```yaml
//! implementations:
//!   - onnx
//!   - candle-transformers:
//!       xfail: {L3: {reason: "...", first_divergence: logits, metrics: {max_abs_diff: 18.6}}}
//! ```

use std::fmt;

use std::borrow::Cow;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::xfail::Xfail;

/// An implementation's name as a case lists it (`onnx`, `candle-transformers`, `ort-genai`).
/// Which names exist is the registry's to say (`crate::evaluation::implementations::REGISTRY`,
/// each entry owning its name, above the case format): the trial plan checks every name a case
/// lists against it, and an unknown one is a failing trial naming the file and the names known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImplementationName(Cow<'static, str>);

impl ImplementationName {
    /// The harness's own pipeline on the case's export(s).
    pub const ONNX: ImplementationName = ImplementationName::from_static("onnx");

    /// A name known when the program is written (a registry entry's).
    pub const fn from_static(name: &'static str) -> ImplementationName {
        ImplementationName(Cow::Borrowed(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the harness's pipeline (`onnx`), whose expected failures are the case's own.
    pub fn is_onnx(&self) -> bool {
        *self == ImplementationName::ONNX
    }
}

impl fmt::Display for ImplementationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ImplementationName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(de::Error::custom(format!("{name:?} is not an implementation name")));
        }
        Ok(ImplementationName(Cow::Owned(name)))
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
                f.write_str("an implementation name (onnx, candle-transformers, ...) or a one-key map `<name>: {xfail, notes}`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImplementationEntry, E> {
                let name = ImplementationName::deserialize(de::value::StrDeserializer::<E>::new(v))?;
                Ok(ImplementationEntry { name, xfail: None, notes: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ImplementationEntry, A::Error> {
                let Some((name, settings)) = map.next_entry::<ImplementationName, EntrySettings>()? else {
                    return Err(de::Error::custom("an empty map names no implementation"));
                };
                if map.next_key::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("one implementation per list entry"));
                }
                if name.is_onnx() && settings.xfail.is_some() {
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
    vec![ImplementationEntry { name: ImplementationName::ONNX, xfail: None, notes: None }]
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
        assert_eq!(list[0].name, ImplementationName::ONNX);
        assert_eq!(list[1].name.as_str(), "candle-transformers");
        assert!(list[1].xfail.is_some() && list[1].notes.as_deref() == Some("n"));
        // Whether a name exists is the registry's to say (checked when trials are planned).
        assert_eq!(parse("- candle\n").expect("any name parses")[0].name.as_str(), "candle");
        let e = parse("- \"\"\n").unwrap_err().to_string();
        assert!(e.contains("not an implementation name"), "{e}");
        let e = parse("- {onnx: {}, candle-transformers: {}}\n").unwrap_err().to_string();
        assert!(e.contains("one implementation per list entry"), "{e}");
        let e = parse("- candle-transformers: {xfial: x}\n").unwrap_err().to_string();
        assert!(e.contains("xfial"), "{e}");
        let e = parse("- onnx: {xfail: x}\n").unwrap_err().to_string();
        assert!(e.contains("case's own"), "{e}");
    }
}
