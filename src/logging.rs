//! The process's log: `tracing` to stderr, filtered by `ONNX_PARITY_LOG` (an `EnvFilter`
//! directive; each binary gives its default level).
//!
//! One warning of ONNX Runtime's is shown once, not once per tensor per session: "Error merging
//! shape info … Falling back to lenient merge". ONNX Runtime 1.31's quantization tools
//! (`quantize_dynamic`, `quantize_static`) write `value_info` of shape `[1]` for
//! `SkipSimplifiedLayerNormalization`'s extra outputs, whose shape is `[batch, seq, 1]`; ONNX
//! Runtime merges leniently and the graph runs as written. A `run cases` printed 898 of these
//! lines, burying everything else. With `ONNX_PARITY_LOG` at `debug` or `trace` every one is shown.

use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The variable holding the log filter.
pub const LOG_VARIABLE: &str = "ONNX_PARITY_LOG";

/// Installs the process's subscriber (a no-op when one is installed) with `directive` (the
/// driver reads `ONNX_PARITY_LOG`), or `default` when it is unset or invalid.
pub fn init(directive: Option<&str>, default: &str) {
    let verbose = directive.is_some_and(|d| d.contains("debug") || d.contains("trace"));
    let filter = directive.and_then(|d| EnvFilter::try_new(d).ok()).unwrap_or_else(|| default.into());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let once = (!verbose).then(LenientMergeOnce::default);
    let _ = tracing_subscriber::registry().with(filter).with(once).with(fmt).try_init();
}

/// Lets the first of ONNX Runtime's lenient-merge warnings through and vetoes the rest.
#[derive(Debug, Default)]
pub struct LenientMergeOnce {
    seen: AtomicUsize,
}

impl LenientMergeOnce {
    /// How many it has seen (shown or not).
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::Relaxed)
    }
}

/// Whether `event` is ONNX Runtime's lenient shape merge warning.
pub fn is_lenient_merge(event: &Event<'_>) -> bool {
    if event.metadata().target() != "onnxruntime" {
        return false;
    }
    let mut message = Message::default();
    event.record(&mut message);
    message.0.starts_with("Error merging shape info") && message.0.contains("Falling back to lenient merge")
}

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for LenientMergeOnce {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        !is_lenient_merge(event) || self.seen.fetch_add(1, Ordering::Relaxed) == 0
    }
}
