//! L1's check of a package's `genai_config.json` against the model's config: the runtime sizes
//! and passes the KV buffers from it, so a window on the wrong layers, of the wrong size, or
//! shared buffers under a graph that cannot write in place compute something else than the
//! model, though the graph itself is right.

use crate::onnx::contract::ExportContract;
use crate::onnx::genai_config::GenAiConfig;
use crate::onnx::protocol::{AttentionOp, ExportProtocol};

/// What `runtime` says that the model's config (`contract`) and the graph (`protocol`) contradict.
pub fn violations(runtime: &GenAiConfig, contract: &ExportContract, protocol: &ExportProtocol) -> Vec<String> {
    let file = runtime.path.display();
    let mut out = Vec::new();
    // The KV pairs of sliding layers (shared layers have none).
    let sliding: Vec<usize> = contract.kv.iter().filter(|g| !g.full).map(|g| g.layer).collect();
    match (&runtime.window, contract.sliding_window) {
        (Some(w), Some(window)) => {
            if w.window_size as i64 != window {
                out.push(format!("{file}: sliding_window.window_size is {}, the config's sliding_window {window}", w.window_size));
            }
            if w.layers != sliding {
                out.push(format!(
                    "{file}: sliding_window.layers are {:?}, the config's sliding layers with a KV cache {sliding:?}",
                    w.layers
                ));
            }
            if w.slide_key_value_cache {
                out.push(format!(
                    "{file}: sliding_window.slide_key_value_cache is ORT GenAI's QNN ring cache, which this harness does not drive"
                ));
            }
        }
        (Some(w), None) => {
            out.push(format!("{file}: a sliding_window block (window {}) for a config without a sliding window", w.window_size))
        }
        (None, _) => {}
    }
    if runtime.share_buffer && protocol.attention != AttentionOp::GroupQuery {
        out.push(format!(
            "{file}: past_present_share_buffer is true, but the decoder has no GroupQueryAttention to write the shared buffers in place"
        ));
    }
    if runtime.max_length > runtime.context_length {
        out.push(format!("{file}: search.max_length {} exceeds model.context_length {}", runtime.max_length, runtime.context_length));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::graph::GraphSummary;
    use std::path::Path;

    fn fixture(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
    }

    /// Guards each finding: the builder's own file agrees with the config; a window moved to the
    /// full layers, resized, or shared buffers under decomposed attention are each named.
    #[test]
    fn runtime_config_against_the_model() {
        let dir = fixture("unified-vision/builder/fp32");
        let contract =
            ExportContract::from_config_file(&fixture("unified-vision/checkpoint/config.json")).expect("config").text_component();
        let graph = GraphSummary::load(&dir.join("model.onnx")).expect("graph");
        let runtime = GenAiConfig::read(&dir).expect("parses").expect("present");
        let protocol = ExportProtocol::read(&graph, None).with_runtime(Some(runtime.clone()));
        assert_eq!(violations(&runtime, &contract, &protocol), Vec::<String>::new());
        let mut wrong = runtime.clone();
        if let Some(w) = wrong.window.as_mut() {
            w.layers = vec![2, 5];
            w.window_size = 16;
        }
        let found = violations(&wrong, &contract, &protocol);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("window_size is 16") && found[1].contains("[2, 5]"), "{found:?}");
        let mut portable = protocol.clone();
        portable.attention = AttentionOp::Decomposed;
        assert!(violations(&runtime, &contract, &portable)[0].contains("past_present_share_buffer"));
    }
}
