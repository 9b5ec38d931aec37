//! Python's `json.dumps` string encoding, shared by the golden writer (`ensure_ascii=True`, so
//! goldens are byte-identical with mobius's) and chat templates' `tojson` filter
//! (`ensure_ascii=False` by default, as transformers calls it).

/// Writes `s` as a JSON string the way CPython's `json` does: the short escapes
/// `\" \\ \b \f \n \r \t`; the other control characters U+0000–U+001F as `\u00XX`; with
/// `ensure_ascii` also U+007F and everything non-ASCII as `\uXXXX` (lower-case hex, characters
/// above U+FFFF as a UTF-16 surrogate pair), without it those as they are.
pub fn write_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            c if !ensure_ascii && c >= ' ' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: both encodings as CPython 3.11 writes them
    /// (`json.dumps("t\"\\\x01\x7fé😀\n", ensure_ascii=...)`).
    #[test]
    fn strings_like_cpython() {
        let s = "t\"\\\u{1}\u{7f}é😀\n";
        let mut ascii = String::new();
        write_string(s, true, &mut ascii);
        assert_eq!(ascii, r#""t\"\\\u0001\u007f\u00e9\ud83d\ude00\n""#);
        let mut utf8 = String::new();
        write_string(s, false, &mut utf8);
        assert_eq!(utf8, "\"t\\\"\\\\\\u0001\u{7f}é😀\\n\"");
    }
}
