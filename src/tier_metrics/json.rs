//! Reading a metric back from a report or trial record: JSON has no NaN or infinity (serde_json
//! writes them as `null`), so a float metric read back as `null` is NaN again, not an error and
//! not a missing value — a record of a NaN verdict merges into the same report it was written
//! from.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A metric's value type as read back from JSON.
pub trait Lenient: Sized {
    /// The value `v` stands for; `None` for a `null` that means "absent".
    fn from_json(v: Value) -> Result<Option<Self>, serde_json::Error>;
}

/// Implements [`Lenient`] as plain serde (a `null` is absent).
macro_rules! strict {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::tier_metrics::json::Lenient for $t {
            fn from_json(v: serde_json::Value) -> Result<Option<Self>, serde_json::Error> {
                if v.is_null() { Ok(None) } else { serde_json::from_value(v).map(Some) }
            }
        }
    )*};
}
pub(crate) use strict;

strict!(bool, i64, u64, usize, String, Vec<i64>, Vec<String>, Vec<[usize; 2]>);

impl Lenient for f64 {
    fn from_json(v: Value) -> Result<Option<Self>, serde_json::Error> {
        Ok(Some(if v.is_null() { f64::NAN } else { serde_json::from_value(v)? }))
    }
}

impl Lenient for Vec<f64> {
    fn from_json(v: Value) -> Result<Option<Self>, serde_json::Error> {
        if v.is_null() {
            return Ok(None);
        }
        let items: Vec<Option<f64>> = serde_json::from_value(v)?;
        Ok(Some(items.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect()))
    }
}

/// `deserialize_with` for an optional metric field ([`Lenient`]).
pub fn lenient<'de, D: Deserializer<'de>, T: Lenient>(d: D) -> Result<Option<T>, D::Error> {
    T::from_json(Value::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// `deserialize_with` for a float that a row always holds (NaN read back from `null`).
pub fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(f64::from_json(Value::deserialize(d)?).map_err(serde::de::Error::custom)?.unwrap_or(f64::NAN))
}

/// Declares a tier's metrics: every field optional (a tier records what it measured), left out of
/// the JSON when absent, read back leniently ([`lenient`]), named in JSON as in Rust.
macro_rules! metrics {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "crate::tier_metrics::json::lenient")]
                pub $field: Option<$ty>,
            )*
        }
    };
}
pub(crate) use metrics;
