//! L2 architecture tier: at full size and without loading a weight, does the real config build a
//! consistent reference, does the checkpoint (when present) hold exactly the tensors it implies,
//! and does a full-size export (when present) honour the config's contract?
//!
//! From the config alone: the reference is built on placeholders (`Gemma4::dry`), giving every
//! tensor it reads; the audio tower, which the reference does not run, is listed from its config
//! (`audio_manifest`); together they are every tensor HF's `save_pretrained` writes, whose
//! element count is the model's parameter count. A config field that changes the numbers and
//! that the reference does not implement fails here by name (the config's own validation).

use std::collections::BTreeMap;
use std::path::Path;

use onnx_parity_reference::audio_manifest::{audio_manifest, element_count};
use onnx_parity_reference::{Gemma4, ModelConfig};

use super::outcome::{Status, TierOutcome};
use crate::case::ExportPin;
use crate::tier_metrics::Metrics;

/// What L2 looks at.
#[derive(Debug, Clone, Copy)]
pub struct L2Inputs<'a> {
    /// The real `config.json`.
    pub config: &'a Path,
    /// The real checkpoint folder, when present (only its safetensors headers are read).
    pub checkpoint: Option<&'a Path>,
    /// A full-size export, when present (its L1 contract is checked).
    pub export: Option<&'a Path>,
    /// The hub's published parameter count, when known.
    pub published_parameters: Option<u64>,
    /// ONNX element type of the export's activations.
    pub float_dtype: &'a str,
    /// What the case says the export is (its EP's buffer limit is checked at full size).
    pub pin: Option<&'a ExportPin>,
}

/// `11959730224` → `11,959,730,224`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn elements(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// Whether `name` is a K/V projection or norm of a KV-shared layer: HF builds none for those
/// layers and drops them from a checkpoint on load (`_keys_to_ignore_on_load_unexpected`).
fn ignored_by_hf(name: &str, prefix: &str, first_shared: usize) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix(".layers.")) else { return false };
    let Some((idx, tail)) = rest.split_once('.') else { return false };
    let shared = idx.parse::<usize>().is_ok_and(|i| i >= first_shared);
    shared && ["k_proj", "v_proj", "k_norm", "v_norm"].iter().any(|p| tail.starts_with(&format!("self_attn.{p}.")))
}

/// The L2 verdict.
pub fn check(inputs: L2Inputs<'_>) -> TierOutcome {
    let config = match ModelConfig::from_file(inputs.config) {
        Ok(c) => c,
        // The error names the file.
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let audio = match config.audio_config() {
        None => Vec::new(),
        Some(a) => match audio_manifest(config.family().into(), a, config.text().hidden_size) {
            Ok(m) => m,
            Err(e) => return TierOutcome::fail(format!("{}: {e}", inputs.config.display())),
        },
    };
    let (model, problems, unread) = match inputs.checkpoint {
        Some(dir) => match Gemma4::check_headers(config.clone(), dir) {
            Ok(h) => (h.model, h.problems, Some(h.unread)),
            Err(e) => return TierOutcome::fail(format!("checkpoint {}: {e}", dir.display())),
        },
        None => match Gemma4::dry(config.clone()) {
            Ok(m) => (m, Vec::new(), None),
            Err(e) => return TierOutcome::fail(format!("{}: {e}", inputs.config.display())),
        },
    };
    let manifest = model.weight_manifest();
    let reference_parameters: u64 = manifest.values().map(|s| elements(s)).sum();
    let audio_parameters = element_count(&audio);
    let checkpoint_parameters = reference_parameters + audio_parameters;
    let row_elements: u64 = model.row_tables().iter().filter_map(|n| manifest.get(n)).map(|s| elements(s)).sum();
    let resident_f32 = (reference_parameters - row_elements) * 4;
    let (memory_f32, memory_bf16) = (resident_f32 + row_elements * 4, resident_f32 + row_elements * 2);

    let mut failures = Vec::new();
    let mut notes = Vec::new();
    notes.push(format!(
        "{}: {} tensors the reference runs ({} elements) + {} audio tensors ({}, listed, not run) = {} parameters",
        config.model_type(),
        manifest.len(),
        thousands(reference_parameters),
        audio.len(),
        thousands(audio_parameters),
        thousands(checkpoint_parameters)
    ));
    notes.push(format!(
        "reference memory: {} resident (f32){}",
        gib(resident_f32),
        if row_elements > 0 {
            format!(" + the PLE table read through the mapping ({} bf16 / {} f32 checkpoint)", gib(row_elements * 2), gib(row_elements * 4))
        } else {
            String::new()
        }
    ));
    if let Some(p) = inputs.published_parameters {
        if p != checkpoint_parameters {
            failures.push(format!(
                "the config implies {} parameters, the published count is {} (differs by {})",
                thousands(checkpoint_parameters),
                thousands(p),
                thousands(p.abs_diff(checkpoint_parameters))
            ));
        } else {
            notes.push("equal to the published count".into());
        }
    }
    let mut unexpected = Vec::new();
    if let (Some(dir), Some(unread)) = (inputs.checkpoint, &unread) {
        failures.extend(problems.iter().map(|p| format!("checkpoint {}: {p}", dir.display())));
        let audio_names: BTreeMap<&str, &Vec<usize>> = audio.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let first_shared = config.text().first_kv_shared_layer();
        let (mut audio_present, mut ignored) = (0, 0);
        for (name, shape) in unread {
            match audio_names.get(name.as_str()) {
                Some(want) if *want == shape => audio_present += 1,
                Some(want) => failures.push(format!("checkpoint: audio tensor `{name}` has shape {shape:?}, the config implies {want:?}")),
                None if ignored_by_hf(name, config.text_prefix(), first_shared) => ignored += 1,
                None => unexpected.push(name.clone()),
            }
        }
        for (name, _) in &audio {
            if !unread.contains_key(name) {
                failures.push(format!("checkpoint: audio tensor `{name}` is missing"));
            }
        }
        if !unexpected.is_empty() {
            let shown: Vec<_> = unexpected.iter().take(5).cloned().collect();
            failures.push(format!("checkpoint: {} tensors no Gemma 4 module reads (e.g. {})", unexpected.len(), shown.join(", ")));
        }
        notes.push(format!(
            "headers of {}: every tensor present with its shape{}{}",
            dir.display(),
            if audio_present > 0 { format!("; {audio_present} audio tensors present (not run)") } else { String::new() },
            if ignored > 0 { format!("; {ignored} K/V tensors of KV-shared layers that HF ignores") } else { String::new() }
        ));
    }
    let mut metrics = Metrics::default();
    if let Some(plan) = inputs.pin.and_then(|pin| buffer_plan(pin, manifest, inputs.float_dtype)) {
        notes.push(plan.note);
        metrics.l2.ep_oversize_tensors = Some(plan.oversize);
    }
    if let Some(export) = inputs.export {
        // The interface only: loading a full-size export is not L2's business.
        let l1 = super::l1::check_interface(super::l1::L1Inputs {
            config: inputs.config,
            export,
            float_dtype: inputs.float_dtype,
            pin: inputs.pin,
        });
        if l1.status != Status::Pass {
            failures.push(format!("full-size export {}: {}", export.display(), l1.message));
        } else {
            notes.push(format!("full-size export {} honours the contract", export.display()));
        }
        metrics.l2.export_violations = l1.metrics.l1.violations;
    }
    let l2 = &mut metrics.l2;
    l2.checkpoint_parameters = Some(checkpoint_parameters);
    l2.reference_parameters = Some(reference_parameters);
    l2.audio_parameters = Some(audio_parameters);
    l2.reference_tensors = Some(manifest.len());
    l2.audio_tensors = Some(audio.len());
    l2.reference_resident_bytes = Some(resident_f32);
    l2.reference_memory_f32_checkpoint_bytes = Some(memory_f32);
    l2.reference_memory_bf16_checkpoint_bytes = Some(memory_bf16);
    l2.checked = Some(if inputs.checkpoint.is_some() { "config + checkpoint headers" } else { "config" }.to_string());
    let status = if failures.is_empty() { Status::Pass } else { Status::Fail };
    let message = if failures.is_empty() { notes.join("; ") } else { format!("{}; {}", failures.join("; "), notes.join("; ")) };
    TierOutcome::decided(status, message, metrics)
}

/// What an EP with a per-buffer limit (WebGPU's 256 MiB) needs of a full-size build.
struct BufferPlan {
    note: String,
    oversize: usize,
}

/// The weights that exceed the pinned EP's buffer limit at the pinned dtype, from the config
/// alone (the same arithmetic mobius makes for `split_per_layer_embedding`,
/// `mobius/tasks/_gemma4.py:428-441`).
fn buffer_plan(pin: &ExportPin, manifest: &BTreeMap<String, Vec<usize>>, float_dtype: &str) -> Option<BufferPlan> {
    let ep = pin.ep?;
    let limit = ep.build().max_buffer_size?;
    let dtype: &str = match pin.dtype {
        Some(d) => d.onnx_elem_type(),
        None => float_dtype,
    };
    let bytes_per = match dtype {
        "float32" => 4,
        _ => 2,
    };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut over: Vec<(&String, &Vec<usize>, u64)> =
        manifest.iter().map(|(n, s)| (n, s, elements(s) * bytes_per)).filter(|(_, _, b)| *b > limit).collect();
    over.sort_by_key(|o| std::cmp::Reverse(o.2));
    let lines: Vec<String> = over
        .iter()
        .map(|(name, shape, bytes)| {
            let what = if name.contains("embed_tokens_per_layer") {
                "must be split: mobius splits the fused per-layer table into one [vocab, hidden_size_per_layer_input] table per \
                 layer (split_per_layer_embedding; the decoder then takes input_ids)"
                    .to_string()
            } else {
                "over the limit: the build must split it or the device must grant a larger maxBufferSize".to_string()
            };
            format!("`{name}` {shape:?} is {} ({} bytes at {dtype}): {what}", gib(*bytes), thousands(*bytes))
        })
        .collect();
    let note = if lines.is_empty() {
        format!("{ep} ({:.0} MiB buffers): every weight fits at {dtype}", mib(limit))
    } else {
        format!("{ep} ({:.0} MiB buffers) at {dtype}: {}", mib(limit), lines.join("; "))
    };
    Some(BufferPlan { note, oversize: over.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the digit grouping used in messages.
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(11_959_730_224), "11,959,730,224");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }

    /// Guards which checkpoint tensors count as "HF ignores them" (only K/V of shared layers).
    #[test]
    fn shared_layer_kv_is_ignored_by_hf() {
        let p = "model.language_model";
        assert!(ignored_by_hf("model.language_model.layers.20.self_attn.k_proj.weight", p, 15));
        assert!(!ignored_by_hf("model.language_model.layers.14.self_attn.k_proj.weight", p, 15));
        assert!(!ignored_by_hf("model.language_model.layers.20.self_attn.q_proj.weight", p, 15));
        assert!(!ignored_by_hf("model.layers.20.self_attn.k_proj.weight", p, 15));
    }
}
