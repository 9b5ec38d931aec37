//! Enums that are spelled as strings (in YAML, JSON, trial names, reports): each variant's text is
//! written once, in `named_enum!`, and `as_str`, `Display`, `FromStr`, `ALL` and serde's string
//! form all come from it, so a spelling cannot drift between the parser and the printer.

/// A string that names no variant: which enum, what was given, what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {given:?}, expected one of {}", expected.join(", "))]
pub struct UnknownName {
    /// What the enum names (`level`, `dtype`, …).
    pub kind: &'static str,
    pub given: String,
    pub expected: Vec<&'static str>,
}

/// Declares an enum whose variants are spelled as the given strings:
///
/// ```ignore
/// named_enum! {
///     /// A tier.
///     #[derive(PartialOrd, Ord)]
///     pub enum Level("level") { L1 = "L1", L2 = "L2" }
/// }
/// ```
///
/// The enum derives `Debug, Clone, Copy, PartialEq, Eq, Hash` (more through its attributes) and
/// gets `ALL` (declaration order), `as_str`, `from_name`, `Display`, `FromStr` (an
/// [`UnknownName`] error) and string `Serialize`/`Deserialize`. Deserialising an unknown string
/// reports the [`UnknownName`]; `("kind", serde_variant_error)` reports it as serde's derive does
/// (`` `kind`: unknown variant `x`, expected one of `a`, `b` ``), for enums whose files were
/// always read that way (`dtype:`).
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) { $($body:tt)* }
    ) => {
        $crate::names::named_enum! { @define false, $(#[$meta])* $vis enum $name ($kind) { $($body)* } }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal, serde_variant_error) { $($body:tt)* }
    ) => {
        $crate::names::named_enum! { @define true, $(#[$meta])* $vis enum $name ($kind) { $($body)* } }
    };
    (
        @define $serde_style:literal,
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The spelling (YAML, JSON, reports).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text ),+
                }
            }

            /// The variant spelled `s`.
            pub fn from_name(s: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::from_name(s).ok_or_else(|| $crate::names::UnknownName {
                    kind: $kind,
                    given: s.to_string(),
                    expected: Self::ALL.iter().map(|v| v.as_str()).collect(),
                })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                match s.parse::<Self>() {
                    Ok(v) => Ok(v),
                    // serde_yaml names no key for an error raised inside a field: the kind does.
                    Err(_) if $serde_style => {
                        let e = <serde::de::value::Error as serde::de::Error>::unknown_variant(&s, &[$($text),+]);
                        Err(serde::de::Error::custom(format!("`{}`: {e}", $kind)))
                    }
                    Err(e) => Err(serde::de::Error::custom(e)),
                }
            }
        }
    };
}

pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    named_enum! {
        /// A test enum.
        #[derive(PartialOrd, Ord)]
        pub enum Colour("colour") { Red = "red", DeepBlue = "deep-blue" }
    }

    /// Guards: the one spelling round-trips through `as_str`, `FromStr`, `Display` and serde; an
    /// unknown spelling is an error naming the enum, the text and every accepted spelling.
    #[test]
    fn one_spelling_everywhere() {
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DeepBlue]);
        for c in Colour::ALL {
            assert_eq!(c.as_str().parse::<Colour>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(serde_json::to_string(&c).expect("serialise"), format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Colour>(&format!("\"{c}\"")).expect("deserialise"), c);
        }
        let e = "green".parse::<Colour>().unwrap_err();
        assert_eq!(e.to_string(), "unknown colour \"green\", expected one of red, deep-blue");
        let e = serde_yaml::from_str::<Colour>("Red").unwrap_err().to_string();
        assert!(e.contains("unknown colour \"Red\""), "{e}");
        assert!(Colour::Red < Colour::DeepBlue);
    }

    named_enum! {
        /// Read as serde's derive reads an enum.
        pub enum Size("size", serde_variant_error) { Small = "small", Large = "large" }
    }

    /// Guards the serde-style variant: unknown strings read as serde's derive reports them;
    /// `FromStr` still names the enum.
    #[test]
    fn serde_variant_style() {
        let e = serde_yaml::from_str::<Size>("huge").unwrap_err().to_string();
        assert!(e.contains("`size`: unknown variant `huge`, expected `small` or `large`"), "{e}");
        assert_eq!("huge".parse::<Size>().unwrap_err().kind, "size");
        assert_eq!(serde_yaml::from_str::<Size>("large").expect("reads"), Size::Large);
    }
}
