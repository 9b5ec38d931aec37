//! The reference cache (`src/reference_cache`): what a key is made of (a changed weight byte,
//! input token, config field, precision or reference build misses), entries that read back
//! exactly, corrupt and truncated entries that are misses (never values), the size bound's
//! least-recently-used eviction, and verdicts identical with and without the cache on every
//! committed case.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onnx_parity::case::Case;
use onnx_parity::evaluation::cached::{entry_key, identity};
use onnx_parity::inputs::ModelInputs;
use onnx_parity::onnx::proto::{AttributeProto, NodeProto};
use onnx_parity::onnx::wire;
use onnx_parity::outputs::{Component, Dense, GeneratedTokens, LayerOutputs, LocalLayers, Prefill, Run};
use onnx_parity::reference_cache::{Key, KeyBuilder, Store};
use onnx_parity::runtime::kernels::MatMulNBitsModel;
use prost::Message;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A copy of gemma4-text-ple's case whose checkpoint is a copy of the fixture's (to be altered).
fn case_on_copy(dir: &Path, extra: &str) -> Case {
    let checkpoint = dir.join("checkpoint");
    if !checkpoint.is_dir() {
        copy_dir(&root().join("fixtures/gemma4-text-ple/checkpoint"), &checkpoint);
    }
    let yaml = format!(
        "model_id: x/y\nmodel_type: gemma4_text\ndtype: float32\ncheckpoint: {}\nonnx: {}\nlevels: [L1, L3]\n\
         generation: {{max_new_tokens: 4, eos_token_id: 1}}\n{extra}",
        checkpoint.display(),
        root().join("fixtures/gemma4-text-ple/onnx").display()
    );
    let path = dir.join(format!("case-{}.yaml", extra.len()));
    std::fs::write(&path, yaml).unwrap();
    Case::load(&path).unwrap()
}

fn key_of(store: &Store, case: &Case, inputs: &ModelInputs, code: &str) -> Key {
    let id = identity(store, case, inputs, MatMulNBitsModel::Mlas, code).expect("an identity");
    entry_key(&id, "reference", |_| {})
}

/// Guards the key: every part that decides the reference's results changes it, and nothing
/// else does (the same content under another path is the same key).
#[test]
fn every_part_that_decides_a_result_changes_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().join("cache"), 1 << 30);
    let inputs = ModelInputs::from_ids(vec![2, 10, 11, 12]);
    let case = case_on_copy(&tmp.path().join("a"), "");
    let base = key_of(&store, &case, &inputs, "v1");
    assert_eq!(key_of(&store, &case, &inputs, "v1"), base, "a key is a function of its parts");

    // The same files elsewhere: the same key (a fresh clone reuses the entries).
    let elsewhere = case_on_copy(&tmp.path().join("b"), "");
    assert_eq!(key_of(&store, &elsewhere, &inputs, "v1"), base);

    // A reference build of other code.
    assert_ne!(key_of(&store, &case, &inputs, "v2"), base, "a changed reference build must miss");
    // One input token.
    assert_ne!(key_of(&store, &case, &ModelInputs::from_ids(vec![2, 10, 11, 13]), "v1"), base, "a changed input token must miss");
    // The precision: the case's dtype, and each result's compute dtype.
    let id = identity(&store, &case, &inputs, MatMulNBitsModel::Mlas, "v1").unwrap();
    let floor = |dtype: &str| {
        entry_key(&id, "floor", |k| {
            k.text("compute", dtype);
        })
    };
    assert_ne!(floor("F32"), floor("F16"), "a changed precision must miss");
    // One weight byte (the file rewritten: its size is the same, its change time is not).
    let weights = tmp.path().join("a/checkpoint/model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&weights, &bytes).unwrap();
    let changed_weight = key_of(&store, &case, &inputs, "v1");
    assert_ne!(changed_weight, base, "a changed weight byte must miss");
    // One config field.
    let config = tmp.path().join("a/checkpoint/config.json");
    let text = std::fs::read_to_string(&config).unwrap().replace("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e-05");
    std::fs::write(&config, text).unwrap();
    assert_ne!(key_of(&store, &case, &inputs, "v1"), changed_weight, "a changed config field must miss");
}

/// Guards: the case's dtype and generation are part of the identity.
#[test]
fn the_generation_and_dtype_asked_for_are_part_of_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().join("cache"), 1 << 30);
    let inputs = ModelInputs::from_ids(vec![2, 10, 11, 12]);
    let case = case_on_copy(tmp.path(), "");
    let mut other = case.clone();
    other.generation.max_new_tokens = Some(5);
    assert_ne!(key_of(&store, &case, &inputs, "v"), key_of(&store, &other, &inputs, "v"));
    let mut other = case.clone();
    other.dtype = onnx_parity::case::Dtype::Float16;
    assert_ne!(key_of(&store, &case, &inputs, "v"), key_of(&store, &other, &inputs, "v"));
}

/// A copy of gemma4-text-ple's int4 build (MatMulNBits at accuracy_level 4, external data) and
/// a case judging it on the fixture's checkpoint.
fn quantized_case(dir: &Path) -> Case {
    let build = dir.join("build");
    copy_dir(&root().join("fixtures/gemma4-text-ple/variants/int4-acc4"), &build);
    let yaml = format!(
        "model_id: x/y\nmodel_type: gemma4_text\ndtype: int4\ncheckpoint: {}\nonnx: {}\nlevels: [L1, L3]\n\
         generation: {{max_new_tokens: 4, eos_token_id: 1}}\n",
        root().join("fixtures/gemma4-text-ple/checkpoint").display(),
        build.display()
    );
    let path = dir.join("case.yaml");
    std::fs::write(&path, yaml).unwrap();
    Case::load(&path).unwrap()
}

/// `message` with the fields `edit` returns new bytes for replaced by those (whole fields, key
/// included) and every other field kept byte for byte.
fn edit_fields(message: &[u8], mut edit: impl FnMut(&wire::Field, &[u8]) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len());
    for f in wire::fields(message).unwrap() {
        match edit(&f, &message[f.payload.clone()]) {
            Some(bytes) => out.extend_from_slice(&bytes),
            None => out.extend_from_slice(&message[f.all.clone()]),
        }
    }
    out
}

fn len_field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    wire::put_len_field(&mut out, number, payload);
    out
}

/// Rewrites the build's graph at `model`, node by node: `edit(node)` returns a node's new bytes.
fn edit_nodes(model: &Path, mut edit: impl FnMut(&NodeProto, &[u8]) -> Option<Vec<u8>>) {
    const GRAPH_NODE: u64 = 1;
    let bytes = std::fs::read(model).unwrap();
    let (_, payload) = wire::graph_field(&bytes).unwrap();
    let graph = edit_fields(&bytes[payload], |f, node| {
        (f.number == GRAPH_NODE).then(|| edit(&NodeProto::decode(node).unwrap(), node)).flatten().map(|n| len_field(GRAPH_NODE, &n))
    });
    std::fs::write(model, wire::with_graph(&bytes, &graph).unwrap()).unwrap();
}

/// Guards the key of a quantized build: what the reference reads of it (its quantized weights'
/// codes, scales and attributes, the inputs their nodes read) changes it; a fix elsewhere in its
/// graph (every other node renamed, a norm's epsilon changed) and the same build in another
/// folder do not, so an exporter's next export is judged without paying the reference side again.
#[test]
fn a_quantized_build_is_keyed_by_what_the_reference_reads_of_it() {
    const NODE_NAME: u64 = 3;
    const NODE_INPUT: u64 = 1;
    const NODE_ATTRIBUTE: u64 = 5;
    const ATTRIBUTE_F: u64 = 2;
    const ATTRIBUTE_I: u64 = 3;
    let quantized = |n: &NodeProto| n.op_type == "MatMulNBits" || n.op_type == "GatherBlockQuantized";
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().join("cache"), 1 << 30);
    let inputs = ModelInputs::from_ids(vec![2, 10, 11, 12]);
    let case = quantized_case(&tmp.path().join("a"));
    let base = key_of(&store, &case, &inputs, "v1");
    assert_eq!(key_of(&store, &quantized_case(&tmp.path().join("b")), &inputs, "v1"), base, "the same build elsewhere");
    let model = tmp.path().join("a/build/model.onnx");
    let original = std::fs::read(&model).unwrap();

    // A fix elsewhere: every other node renamed, every float attribute (a norm's epsilon) changed.
    let (mut renamed, mut floats) = (0, 0);
    edit_nodes(&model, |n, bytes| {
        if quantized(n) {
            return None;
        }
        renamed += 1;
        Some(edit_fields(bytes, |f, payload| match f.number {
            NODE_NAME => Some(len_field(NODE_NAME, format!("{}_fixed", String::from_utf8_lossy(payload)).as_bytes())),
            NODE_ATTRIBUTE => Some(len_field(
                NODE_ATTRIBUTE,
                &edit_fields(payload, |a, value| {
                    (a.number == ATTRIBUTE_F && a.wire_type == 5).then(|| {
                        floats += 1;
                        let mut out = Vec::new();
                        wire::put_varint(&mut out, (ATTRIBUTE_F << 3) | 5);
                        out.extend_from_slice(&(f32::from_le_bytes(value.try_into().unwrap()) * 10.0).to_le_bytes());
                        out
                    })
                }),
            )),
            _ => None,
        }))
    });
    assert!(renamed > 50 && floats > 0, "{renamed} nodes renamed, {floats} float attributes changed");
    assert_ne!(std::fs::read(&model).unwrap(), original);
    assert_eq!(key_of(&store, &case, &inputs, "v1"), base, "a fix elsewhere in the graph keeps the reference side");

    // An attribute of a quantized node: one MatMulNBits at accuracy_level 0 instead of 4.
    std::fs::write(&model, &original).unwrap();
    let mut done = false;
    edit_nodes(&model, |n, bytes| {
        (!done && n.op_type == "MatMulNBits").then(|| {
            done = true;
            edit_fields(bytes, |f, payload| {
                let level = f.number == NODE_ATTRIBUTE && AttributeProto::decode(payload).unwrap().name == "accuracy_level";
                level.then(|| {
                    let attribute = edit_fields(payload, |a, _| {
                        (a.number == ATTRIBUTE_I).then(|| {
                            let mut out = Vec::new();
                            wire::put_varint(&mut out, ATTRIBUTE_I << 3);
                            wire::put_varint(&mut out, 0);
                            out
                        })
                    });
                    len_field(NODE_ATTRIBUTE, &attribute)
                })
            })
        })
    });
    assert!(done);
    assert_ne!(key_of(&store, &case, &inputs, "v1"), base, "a quantized node's changed attribute must miss");

    // A rewired quantized node: a MatMulNBits reads another one's scales of the same shape.
    std::fs::write(&model, &original).unwrap();
    let graph = onnx_parity::onnx::proto::ModelProto::decode(&original[..]).unwrap().graph.unwrap();
    let dims = |name: &str| graph.initializer.iter().find(|t| t.name == name).map(|t| t.dims.clone());
    let nbits: Vec<&NodeProto> = graph.node.iter().filter(|n| n.op_type == "MatMulNBits").collect();
    let (first, other) = nbits
        .iter()
        .enumerate()
        .find_map(|(i, a)| nbits[i + 1..].iter().find(|b| dims(&b.input[2]) == dims(&a.input[2])).map(|b| (*a, *b)))
        .expect("two MatMulNBits whose scales have one shape");
    let (from, to) = (first.input[2].clone(), other.input[2].clone());
    edit_nodes(&model, |n, bytes| {
        (n.name == first.name).then(|| {
            edit_fields(bytes, |f, payload| {
                (f.number == NODE_INPUT && payload == from.as_bytes()).then(|| len_field(NODE_INPUT, to.as_bytes()))
            })
        })
    });
    assert_ne!(key_of(&store, &case, &inputs, "v1"), base, "a rewired quantized node must miss");

    // One code byte of a quantized weight in the external data.
    std::fs::write(&model, &original).unwrap();
    assert_eq!(key_of(&store, &case, &inputs, "v1"), base);
    let b = graph.initializer.iter().find(|t| t.name == first.input[1]).unwrap();
    let offset: usize = b.external_data.iter().find(|e| e.key == "offset").map_or(0, |e| e.value.parse().unwrap());
    let data = tmp.path().join("a/build/model.onnx.data");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[offset] ^= 1;
    std::fs::write(&data, &bytes).unwrap();
    assert_ne!(key_of(&store, &case, &inputs, "v1"), base, "a changed code byte must miss");
}

fn dense(shape: &[usize], seed: f32) -> Dense<f32> {
    let n = shape.iter().product::<usize>();
    Dense::new(shape.to_vec(), (0..n).map(|i| seed + i as f32 * 0.25 - 3.0).collect())
}

fn sample_run() -> Run {
    let mut components = BTreeMap::new();
    components.insert(Component::InputsEmbeds, dense(&[1, 3, 4], 1.0));
    let mut module = BTreeMap::new();
    module.insert("mlp".to_string(), dense(&[1, 3, 4], 7.0));
    let prefill = Prefill {
        logits: dense(&[1, 3, 5], 0.5),
        streamed: None,
        components,
        layers: LayerOutputs::Tensors(vec![dense(&[1, 3, 4], 2.0), dense(&[1, 3, 4], f32::MIN_POSITIVE)]),
        modules: vec![module],
        activations: BTreeMap::new(),
    };
    let mut step_inputs = BTreeMap::new();
    step_inputs.insert(Component::PerLayerInputs, dense(&[1, 1, 6], -1.0));
    Run {
        prefill,
        generation: GeneratedTokens { tokens: vec![5, 1], step_logits: vec![vec![0.1, -0.0, 3.5], vec![1e-30, 2.0, 4.0]] },
        step_inputs,
    }
}

fn key(n: u8) -> Key {
    let mut b = KeyBuilder::new("test", "v");
    b.add("n", &[n]);
    b.finish()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir.join("entries")).into_iter().flatten().flatten() {
        out.extend(std::fs::read_dir(sub.path()).unwrap().flatten().map(|e| e.path()));
    }
    out
}

/// Guards: an entry reads back bit for bit (negative zero and subnormals included), under its
/// own key and kind only.
#[test]
fn entries_read_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().to_path_buf(), 1 << 30);
    let run = sample_run();
    assert!(store.put("arbiter", "t", &key(1), &run));
    let back: Run = store.get("arbiter", "t", &key(1)).expect("stored");
    assert_eq!(back, run);
    assert_eq!(back.generation.step_logits[0][1].to_bits(), (-0.0f32).to_bits());
    assert!(store.get::<Run>("arbiter", "t", &key(2)).is_none(), "another key");
    let local = LocalLayers { layers: vec![dense(&[1, 2, 2], 3.0)], modules: vec![BTreeMap::new()] };
    assert!(store.put("floor", "t", &key(3), &local));
    assert_eq!(store.get::<LocalLayers>("floor", "t", &key(3)), Some(local));
}

/// Guards: a truncated, an altered or a foreign entry is a miss (and removed), never a value.
#[test]
fn corrupt_and_truncated_entries_are_misses() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().to_path_buf(), 1 << 30);
    let run = sample_run();
    for (n, damage) in [(1u8, "truncate"), (2, "flip"), (3, "empty"), (4, "append")] {
        assert!(store.put("reference", "t", &key(n), &run));
        let path = entries(tmp.path()).into_iter().find(|p| p.to_string_lossy().contains(&key(n).to_string())).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        match damage {
            "truncate" => bytes.truncate(bytes.len() / 2),
            "flip" => {
                let i = bytes.len() / 2;
                bytes[i] ^= 0x10;
            }
            "empty" => bytes.clear(),
            _ => bytes.extend_from_slice(b"more"),
        }
        std::fs::write(&path, bytes).unwrap();
        assert!(store.get::<Run>("reference", "t", &key(n)).is_none(), "{damage}: a miss");
        assert!(!path.exists(), "{damage}: the unusable entry is removed");
    }
    // An entry of another kind under the same key is not read as this one.
    assert!(store.put("floor", "t", &key(9), &run));
    assert!(store.get::<Run>("reference", "t", &key(9)).is_none());
}

/// Guards: a value held in its entry reads back bit for bit when first used, through the handle
/// opened when it was stored (the entry evicted meanwhile); one the bound leaves no entry for
/// stays in memory.
#[test]
fn a_held_value_is_read_back_from_its_entry_even_once_evicted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().to_path_buf(), 1 << 30);
    let run = sample_run();
    let held = store.put_held("conditioned prefill (floor)", "t", &key(1), run.clone());
    assert!(held.is_on_disk(), "held in its entry, not in memory");
    for path in entries(tmp.path()) {
        std::fs::remove_file(path).unwrap();
    }
    assert_eq!(held.get().expect("read back"), &run);
    assert!(!held.is_on_disk());
    let tiny = Store::new(tmp.path().join("tiny"), 1);
    let kept = tiny.put_held("conditioned prefill (floor)", "t", &key(2), run.clone());
    assert!(!kept.is_on_disk(), "no entry left by the bound: kept in memory");
    assert_eq!(kept.get().unwrap(), &run);
}

/// Guards: a candidate's runs spilled to a temporary file while other models run come back bit
/// for bit, every part of an isolation included.
#[test]
fn a_spilled_run_and_isolation_come_back_bit_for_bit() {
    use onnx_parity::outputs::{Isolated, Isolation};
    use onnx_parity::reference_cache::Held;
    let run = sample_run();
    let spilled = Held::spill("the candidate's forced run", run.clone());
    assert!(spilled.is_on_disk());
    assert_eq!(spilled.into_inner().unwrap(), run);
    let mut unidentified = BTreeMap::new();
    unidentified.insert((3, "mlp".to_string()), "no node named so".to_string());
    let isolated = Isolated {
        image_features: Some(dense(&[1, 2, 3], 1.0)),
        embedding: [(Component::InputsEmbeds, dense(&[1, 2, 4], 2.0))].into_iter().collect(),
        logits: None,
        step_logits: Some(vec![-0.0, f32::MIN_POSITIVE / 2.0, 7.5]),
        layers: LayerOutputs::Unavailable("not asked".into()),
        activations: BTreeMap::new(),
        local: LayerOutputs::Tensors(vec![dense(&[1, 2, 4], 3.0)]),
        modules: vec![[("attn".to_string(), dense(&[1, 2, 4], 4.0))].into_iter().collect()],
        unidentified,
        local_activations: [("a".to_string(), dense(&[2, 2], 5.0))].into_iter().collect(),
        text_only: true,
    };
    for isolation in [Isolation::NotRun, Isolation::Failed("the cut failed".into()), Isolation::Done(Box::new(isolated))] {
        let back = Held::spill("the candidate's isolation", isolation.clone()).into_inner().unwrap();
        assert_eq!(back, isolation);
    }
}

/// Guards: a held entry altered before it is read is an error naming it, never a value.
#[test]
fn an_altered_held_entry_is_an_error_not_a_value() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().to_path_buf(), 1 << 30);
    let held = store.put_held("conditioned local layers (f64)", "t", &key(1), sample_run());
    let path = entries(tmp.path()).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x10;
    // Rewritten in place: the held handle reads the altered bytes.
    std::fs::write(&path, bytes).unwrap();
    let err = held.get().expect_err("an altered entry is not a value").to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains("is corrupt"), "{err}");
}

/// `run` with all-position logits streamed from a file of `rows` x `vocab` values
/// (`1000 + i`), as the f64 arbiter's are once stored.
fn with_streamed_logits(mut run: Run, dir: &Path, rows: usize, vocab: usize) -> Run {
    use onnx_parity::outputs::{StoredSlices, StreamedLogits};
    let path = dir.join("logits.bin");
    let bytes: Vec<u8> = (0..rows * vocab).flat_map(|i| (1000.0 + i as f32).to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let file = std::sync::Arc::new(std::sync::Mutex::new(std::fs::File::open(&path).unwrap()));
    let slices = StoredSlices { file, path, offset: 0, rows, vocab, slice: vocab };
    run.prefill.streamed = Some(std::sync::Arc::new(StreamedLogits::stored(slices)));
    run
}

fn streamed_values(run: &Run) -> Vec<f32> {
    let mut out = Vec::new();
    let s = run.prefill.streamed.as_ref().expect("streamed logits");
    s.for_each_slice::<onnx_parity_reference::Error>(|_, _, v| {
        out.extend_from_slice(v);
        Ok(())
    })
    .unwrap();
    out
}

/// Guards the one-pass read: the streamed logits block, passed over while decoding and read
/// later slice by slice, is covered by the digest too — a byte altered inside it is a miss,
/// and an intact entry gives the values back bit for bit.
#[test]
fn a_block_read_later_is_checked_with_its_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().join("cache"), 1 << 30);
    let run = with_streamed_logits(sample_run(), tmp.path(), 3, 5);
    let expected = streamed_values(&run);
    assert!(store.put("arbiter", "t", &key(1), &run));
    let back: Run = store.get("arbiter", "t", &key(1)).expect("stored");
    assert_eq!(
        streamed_values(&back).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    drop(back);
    let path = entries(&tmp.path().join("cache"))[0].clone();
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = 1007.0f32.to_le_bytes();
    let at = bytes.windows(4).position(|w| w == needle).expect("the block is in the entry");
    bytes[at] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    assert!(store.get::<Run>("arbiter", "t", &key(1)).is_none(), "an altered streamed block is a miss");
    assert!(!path.exists(), "the unusable entry is removed");
}

/// Guards the bound: beyond it the least recently used entries go (a read counts as a use).
#[test]
fn the_least_recently_used_entries_are_evicted_beyond_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let probe = Store::new(tmp.path().join("probe"), 1 << 30);
    let run = sample_run();
    assert!(probe.put("r", "t", &key(0), &run));
    let size = std::fs::metadata(&entries(&tmp.path().join("probe"))[0]).unwrap().len();
    let store = Store::new(tmp.path().join("bounded"), 3 * size);
    for n in 1..=3 {
        assert!(store.put("r", "t", &key(n), &run));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(store.get::<Run>("r", "t", &key(1)).is_some(), "entry 1 used again");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(store.put("r", "t", &key(4), &run));
    assert!(store.get::<Run>("r", "t", &key(2)).is_none(), "the least recently used went");
    for n in [1, 3, 4] {
        assert!(store.get::<Run>("r", "t", &key(n)).is_some(), "entry {n} kept");
    }
}

/// Sizes with units, as `ONNX_PARITY_REFERENCE_CACHE_MAX` takes them.
#[test]
fn cache_sizes_parse() {
    use onnx_parity::reference_cache::parse_size;
    assert_eq!(parse_size("20G"), Some(20 << 30));
    assert_eq!(parse_size("500 MiB"), Some(500 << 20));
    assert_eq!(parse_size("1.5k"), Some(1536));
    assert_eq!(parse_size("123"), Some(123));
    assert_eq!(parse_size("lots"), None);
    assert_eq!(parse_size("-1G"), None);
}
