//! Shape checks of the tensors an export's sessions declare and return (logits, `present.*`,
//! `image_features`, `inputs_embeds`, `per_layer_inputs`, `past_key_values.*`), so that an export
//! of the wrong rank or with an empty vocabulary is an error naming the session, the tensor, the
//! expected shape and the one found, not an index out of bounds or a silent empty comparison.

use std::fmt;

/// One axis of an expected shape, with its name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Exactly this size (`batch = 1`). In a declared shape, a dynamic axis is accepted too.
    Is(&'static str, usize),
    /// Any size above zero (`vocab > 0`). In a declared shape, a dynamic axis is accepted too.
    Positive(&'static str),
    /// A size the graph must fix, above zero (`heads`, `head_dim`: the harness builds empty
    /// caches from them). At run time, any size above zero.
    Static(&'static str),
    /// Any size (`sequence`), dynamic included.
    Any(&'static str),
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Axis::Is(name, n) => write!(f, "{name} = {n}"),
            Axis::Positive(name) => write!(f, "{name} > 0"),
            Axis::Static(name) => write!(f, "{name} (static, > 0)"),
            Axis::Any(name) => write!(f, "{name}"),
        }
    }
}

/// `rank 3 [batch = 1, sequence = 3, vocab > 0]`.
pub fn describe(axes: &[Axis]) -> String {
    format!("rank {} [{}]", axes.len(), axes.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))
}

/// Where the shape came from: the graph's declaration (dynamic axes are -1) or a value the
/// session returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Declared,
    Returned,
}

/// A tensor of a session whose shape is not what the protocol needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{role}: {kind} `{name}` {} {} (rank {}), expected {expected}", if *origin == Source::Declared { "is declared with shape" } else { "has shape" }, shape_string(found), found.len())]
pub struct ShapeError {
    /// The session (`decoder`, `model`, `embedding`, `vision_encoder`).
    pub role: &'static str,
    /// `output` or `input`.
    pub kind: &'static str,
    pub name: String,
    /// [`describe`] of the expected axes.
    pub expected: String,
    /// The shape found; -1 is a dynamic axis of a declared shape.
    pub found: Vec<i64>,
    pub origin: Source,
}

/// `[1, 3, ?]` (`?` for a dynamic axis).
fn shape_string(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(|&d| if d < 0 { "?".to_string() } else { d.to_string() }).collect();
    format!("[{}]", dims.join(", "))
}

/// Whether `found` fits `axes` (`Source::Declared`: -1 is dynamic).
pub fn fits(axes: &[Axis], found: &[i64], source: Source) -> bool {
    let declared = source == Source::Declared;
    axes.len() == found.len()
        && axes.iter().zip(found).all(|(axis, &d)| match *axis {
            Axis::Is(_, n) => (declared && d < 0) || d == n as i64,
            Axis::Positive(_) => (declared && d < 0) || d > 0,
            Axis::Static(_) => d > 0,
            Axis::Any(_) => true,
        })
}

/// `Ok` when `found` fits `axes`, else the error naming `role`, the tensor and both shapes.
pub fn check(role: &'static str, kind: &'static str, name: &str, axes: &[Axis], found: &[i64], source: Source) -> Result<(), ShapeError> {
    if fits(axes, found, source) {
        return Ok(());
    }
    Err(ShapeError { role, kind, name: name.to_string(), expected: describe(axes), found: found.to_vec(), origin: source })
}

/// [`check`] of a shape a session returned (sizes, never dynamic).
pub fn check_returned(role: &'static str, name: &str, axes: &[Axis], found: &[usize]) -> Result<(), ShapeError> {
    let found: Vec<i64> = found.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect();
    check(role, "output", name, axes, &found, Source::Returned)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGITS: [Axis; 3] = [Axis::Is("batch", 1), Axis::Is("sequence", 3), Axis::Positive("vocab")];

    /// Guards the shape-check helper: rank, exact sizes, an empty vocabulary, dynamic axes of a
    /// declared shape, static-only axes, and a message naming the session, the tensor, the
    /// expected and the found shape.
    #[test]
    fn shape_checks_name_session_tensor_expected_and_found() {
        assert!(check_returned("decoder", "logits", &LOGITS, &[1, 3, 512]).is_ok());
        let rank = check_returned("model", "logits", &LOGITS, &[1, 3]).unwrap_err().to_string();
        assert_eq!(rank, "model: output `logits` has shape [1, 3] (rank 2), expected rank 3 [batch = 1, sequence = 3, vocab > 0]");
        let empty = check_returned("decoder", "logits", &LOGITS, &[1, 3, 0]).unwrap_err().to_string();
        assert!(empty.contains("[1, 3, 0]") && empty.contains("vocab > 0") && empty.starts_with("decoder: "), "{empty}");
        assert!(check_returned("decoder", "logits", &LOGITS, &[2, 3, 8]).is_err(), "batch 2");
        assert!(check_returned("decoder", "logits", &LOGITS, &[1, 4, 8]).is_err(), "sequence 4");

        // Declared shapes: -1 is dynamic, fine for Is/Positive/Any, not for Static.
        let kv = [Axis::Is("batch", 1), Axis::Static("kv_heads"), Axis::Any("past_sequence"), Axis::Static("head_dim")];
        assert!(check("decoder", "input", "past_key_values.0.key", &kv, &[-1, 2, -1, 16], Source::Declared).is_ok());
        let dynamic = check("decoder", "input", "past_key_values.0.key", &kv, &[-1, -1, -1, 16], Source::Declared).unwrap_err();
        assert_eq!(
            dynamic.to_string(),
            "decoder: input `past_key_values.0.key` is declared with shape [?, ?, ?, 16] (rank 4), \
             expected rank 4 [batch = 1, kv_heads (static, > 0), past_sequence, head_dim (static, > 0)]"
        );
        assert!(check("decoder", "input", "past_key_values.0.key", &kv, &[1, 2, 16], Source::Declared).is_err(), "rank 3");
        assert!(check("decoder", "output", "logits", &LOGITS, &[-1, -1, -1], Source::Declared).is_ok());
        assert!(check("decoder", "output", "logits", &LOGITS, &[-1, -1, 0], Source::Declared).is_err(), "declared vocab 0");
        // Returned shapes never have dynamic axes: a -1 there is not "any".
        assert!(!fits(&LOGITS, &[-1, 3, 8], Source::Returned));

        // Components: image_features [tokens, hidden], inputs_embeds [1, S, hidden].
        let features = [Axis::Any("image tokens"), Axis::Is("hidden", 64)];
        assert!(check_returned("vision_encoder", "image_features", &features, &[0, 64]).is_ok(), "no image tokens is a shape");
        let e = check_returned("vision_encoder", "image_features", &features, &[1, 7, 64]).unwrap_err().to_string();
        assert!(e.starts_with("vision_encoder: output `image_features`") && e.contains("rank 2 [image tokens, hidden = 64]"), "{e}");
    }
}
