//! `xfail:` a measured, known divergence of a case (or of one of its variants or other
//! implementations), per tier.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::expectation::Expectation;
use crate::level::Level;

/// `xfail:` a measured, known divergence. A string applies to every tier of the case; a map
/// (`{L3: ..., L5: ...}`) to the tiers it names, each a reason string or a reason with the
/// measured signature (see [`crate::expectation`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Xfail {
    All(Expectation),
    PerLevel(BTreeMap<Level, Expectation>),
}

impl<'de> Deserialize<'de> for Xfail {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Xfail;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reason string, or a map from level (L1..L5) to a reason or {reason, <signature>}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Xfail, E> {
                Ok(Xfail::All(Expectation::reason(v)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Xfail, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((level, expectation)) = map.next_entry::<Level, Expectation>()? {
                    if out.insert(level, expectation).is_some() {
                        return Err(de::Error::custom(format!("{level} is listed twice")));
                    }
                }
                Ok(Xfail::PerLevel(out))
            }
        }
        d.deserialize_any(V)
    }
}
