"""Builds that quantize activations too (issue 43), made with ONNX Runtime 1.31.1's own tools from the
committed mobius f32 exports of gemma4-text-ple (model.onnx) and unified-vision (decoder/ quantized;
embedding/ and vision_encoder/ copied byte for byte), each with mutants committed as expected failures:

  build       tool (onnxruntime.quantization)                               graph
  dynamic     quantize_dynamic, int8 weights per tensor, MatMul + Gather    DynamicQuantizeLinear -> MatMulInteger
              (the RoPE cos/sin Gathers excluded: nodes_to_exclude)         -> Cast -> Mul; tables: Gather -> DequantizeLinear
  dynamic-pc  the same, per_channel=True                                    (weight scales per output column)
  qdq-w8a8    quantize_static, QDQ, uint8 activations, int8 per-channel     QuantizeLinear -> DequantizeLinear around every
              weights, MinMax calibration, op_types_to_quantize MatMul      MatMul (ORT fuses them into QLinearMatMul)
  qdq-w8a16   the same with uint16 activations (the QNN NPU recipe)         (ORT fuses no 16-bit unit: float MatMuls)
  qop-w8a8    quantize_static, QOperator, uint8 activations, int8 weights   QuantizeLinear -> QLinearMatMul -> DequantizeLinear

quantize_dynamic's default op types include `Attention`, which it turns into a QAttention ONNX Runtime
cannot load for mobius's opset-24 Attention (output 3 of QAttention): MatMul and Gather are asked for.
Calibration (static builds): 4 random token sequences (seed 7; lengths 12, 20, 31, 24, with bos), not
the fixture's prompt, run through the f32 export (unified-vision: through its embedding model into the
decoder), empty KV caches.

Mutants (fixtures/<fixture>/variants/<build>-mutant-*):
  <build>-mutant-weight-scale      layer 1's gate_proj weight scale x1.25 (the one initializer rewritten)
  <build>-mutant-activation-scale  (static builds) layer 1's MLP input dequantized with a scale x1.25 of the
                                   one it was quantized with: QDQ, the DequantizeLinear on the
                                   pre_feedforward_layernorm output reads a copy of the scale x1.25; QOperator,
                                   gate_proj's QLinearMatMul reads a copy of its a_scale x1.25 (the QuantizeLinear
                                   in front keeps the calibrated one). A scale Q and DQ share, rescaled for both,
                                   is another (coarser) grid, not a wrong function: such a build is judged on
                                   its arithmetic and passes, its cost reported.
Each mutant is checked (onnxruntime) to leave the present KV of layers 0..1 bit-identical to its build's
and layer 2's changed.

fixtures/<fixture>/activation-quantized.json records each build's tool, parameters, op counts before and
after ONNX Runtime's optimizer (what the CPU EP runs), logits against the f32 export, and each mutant's change.

    $(scripts/fixture-venv.sh) scripts/make_activation_quant_fixtures.py [fixture ...]

Run by scripts/make-fixtures.sh (family `quantized`); reruns on one machine are byte-identical.
"""

import collections
import json
import logging
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_mutant_fixtures import copy_tree, require_mutated_from, session  # noqa: E402
from make_quantized_fixtures import (  # noqa: E402
    SCALE_FACTOR,
    fresh_variant,
    gather_exclusions,
    initializers,
    max_abs,
    oracle_logits,
    run,
    save,
    selected,
    sha256_tree,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# fixture -> the model quantized, relative to onnx/ (the other subfolders are copied)
FIXTURE_MODELS = {"gemma4-text-ple": ".", "unified-vision": "decoder"}
BUILDS = ["dynamic", "dynamic-pc", "qdq-w8a8", "qdq-w8a16", "qop-w8a8"]
STATIC = {"qdq-w8a8", "qdq-w8a16", "qop-w8a8"}
MUTANT_LAYER = 1
CALIBRATION_SEED = 7
CALIBRATION_LENGTHS = (12, 20, 31, 24)


def calibration_feeds(fixture, model_path):
    """Feeds of the model at `model_path` for random token sequences (a text-only model: the ids; a
    decoder: the embedding model's inputs_embeds of the ids)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    sess = session(model_path)
    names = {i.name: i for i in sess.get_inputs()}
    embed = None
    if "inputs_embeds" in names:
        embed = session(FIXTURES / fixture / "onnx" / "embedding" / "model.onnx")
    feeds = []
    for n in CALIBRATION_LENGTHS:
        ids = np.array([[2] + list(rng.integers(4, 500, size=n - 1))], dtype=np.int64)
        f = {"input_ids": ids, "attention_mask": np.ones((1, n), np.int64), "position_ids": np.arange(n, dtype=np.int64)[None]}
        if embed is not None:
            hidden = [d for d in names["inputs_embeds"].shape if isinstance(d, int)][-1]
            f["inputs_embeds"] = embed.run(["inputs_embeds"], {"input_ids": ids, "image_features": np.zeros((0, hidden), np.float32)})[0]
        for name, inp in names.items():
            if name.startswith("past_key_values."):
                dims = [d if isinstance(d, int) else 0 for d in inp.shape]
                dims[0] = 1
                f[name] = np.zeros(dims, np.float32)
        feeds.append({k: v for k, v in f.items() if k in names})
    return feeds


class Reader:
    """onnxruntime.quantization's CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds):
        self.items = iter(feeds)

    def get_next(self):
        return next(self.items, None)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item


def quantize(build, fixture, src, tmp):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    out = tmp / build / "model.onnx"
    out.parent.mkdir(parents=True)
    source = onnx.load(str(src), load_external_data=False)
    if build.startswith("dynamic"):
        params = {"weight_type": "QInt8", "per_channel": build == "dynamic-pc", "op_types_to_quantize": ["MatMul", "Gather"],
                  "nodes_to_exclude": gather_exclusions(source)}
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=params["per_channel"],
                         op_types_to_quantize=params["op_types_to_quantize"], nodes_to_exclude=params["nodes_to_exclude"],
                         use_external_data_format=True)
        params["tool"] = "quantize_dynamic"
    else:
        activation = QuantType.QUInt16 if build == "qdq-w8a16" else QuantType.QUInt8
        fmt = QuantFormat.QOperator if build.startswith("qop") else QuantFormat.QDQ
        params = {"tool": "quantize_static", "quant_format": fmt.name, "activation_type": activation.name, "weight_type": "QInt8",
                  "per_channel": True, "op_types_to_quantize": ["MatMul"], "calibrate_method": "MinMax",
                  "calibration": f"{len(CALIBRATION_LENGTHS)} random token sequences, seed {CALIBRATION_SEED}, lengths {list(CALIBRATION_LENGTHS)}"}
        quantize_static(str(src), str(out), Reader(calibration_feeds(fixture, src)), quant_format=fmt, activation_type=activation,
                        weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                        calibrate_method=CalibrationMethod.MinMax, use_external_data_format=True)
    return onnx.load(str(out)), params


def op_counts(model):
    return dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items()))


def runtime_ops(path):
    """The op counts of the graph ONNX Runtime's CPU EP runs (after its level-2 fusions)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.optimized_model_filepath = str(Path(d) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        counts = op_counts(onnx.load(options.optimized_model_filepath, load_external_data=False))
    keep = ("Quant", "MatMul", "Integer", "QLinear", "Gather")
    return {k: v for k, v in counts.items() if any(s in k for s in keep)}


def make_build(fixture, build, f32_out, tmp):
    sub = FIXTURE_MODELS[fixture]
    src_root, dst_root, src_path, dst_path = fresh_variant(fixture, build, sub)
    model, params = quantize(build, fixture, src_path, tmp)
    save(model, dst_path)
    onnx.checker.check_model(str(dst_path))
    saved = onnx.load(str(dst_path), load_external_data=False)
    out = run(dst_path, fixture)
    record = dict(params)
    record.update({
        "source": f"onnx/{sub}/model.onnx" if sub != "." else "onnx/model.onnx",
        "ops": {k: v for k, v in op_counts(saved).items() if any(s in k for s in ("Quant", "MatMul", "Integer", "QLinear", "Gather"))},
        "ops_after_ort_optimizer": runtime_ops(dst_path),
        "logits_max_abs_diff_vs_f32": round(max_abs(out["logits"], f32_out["logits"]), 6),
        "argmax_agrees_with_f32": f"{int((out['logits'][0].argmax(-1) == f32_out['logits'][0].argmax(-1)).sum())}/{out['logits'].shape[1]}",
    })
    if sub != ".":
        record["copied"] = sorted(d.name for d in src_root.iterdir() if d.is_dir() and d.name != sub)
    print(f"{fixture}@{build}: {params['tool']} {record['ops']} -> ORT runs {record['ops_after_ort_optimizer']}; logits vs f32 "
          f"{record['logits_max_abs_diff_vs_f32']:.3e} (argmax {record['argmax_agrees_with_f32']}), vs HF "
          f"{max_abs(out['logits'], oracle_logits(fixture)):.3e}; sha256(tree) {sha256_tree(dst_root)}")
    return record, out


def node_reading(model, prefix, op_types):
    """The node of `op_types` whose name starts with the module path `prefix`."""
    found = [n for n in model.graph.node if n.op_type in op_types and n.name.startswith(prefix)]
    if len(found) != 1:
        raise SystemExit(f"expected one {op_types} node under {prefix}, found {[n.name for n in found]}")
    return found[0]


def scaled_copy(model, name, new_name):
    """A copy of the float32 initializer `name` x SCALE_FACTOR, added to the graph as `new_name`."""
    from onnx import numpy_helper

    old = numpy_helper.to_array(initializers(model.graph)[name])
    model.graph.initializer.append(numpy_helper.from_array((old * np.float32(SCALE_FACTOR)).astype(np.float32), new_name))
    return old


def make_mutant(fixture, build, kind, source_out):
    sub = FIXTURE_MODELS[fixture]
    name = f"{build}-mutant-{kind}"
    src_root = FIXTURES / fixture / "variants" / build
    dst_root = FIXTURES / fixture / "variants" / name
    if dst_root.exists():
        shutil.rmtree(dst_root)
    copy_tree(src_root, dst_root)
    path = dst_root / sub / "model.onnx"
    model = onnx.load(str(path))
    prefix = ("decoder/" if sub == "decoder" else "") + f"model/layers.{MUTANT_LAYER}/mlp/gate_proj/"
    gate = node_reading(model, prefix, ("MatMul", "MatMulInteger", "QLinearMatMul"))
    if kind == "weight-scale":
        weight = gate.input[3] if gate.op_type == "QLinearMatMul" else gate.input[1]
        producer = {o: n for n in model.graph.node for o in n.output}
        if gate.op_type == "MatMul":  # QDQ: the weight's DequantizeLinear
            tensor = producer[weight].input[1]
        elif gate.op_type == "QLinearMatMul":
            tensor = gate.input[4]
        else:  # MatMulInteger: `<weight>_scale`, multiplied with the input's scale
            tensor = weight.replace("_quantized", "_scale")
        inits = initializers(model.graph)
        values = onnx.numpy_helper.to_array(inits[tensor])
        inits[tensor].CopyFrom(onnx.numpy_helper.from_array((values * np.float32(SCALE_FACTOR)).astype(np.float32), tensor))
        change = f"{tensor} ({list(values.shape)} float32) x{SCALE_FACTOR}"
    else:
        if gate.op_type == "QLinearMatMul":
            reader, at = gate, 1
        else:  # QDQ: the DequantizeLinear whose output the MatMul reads
            reader = next(n for n in model.graph.node if gate.input[0] in n.output)
            at = 1
        old_name = reader.input[at]
        new_name = f"{old_name}_x{SCALE_FACTOR}"
        scaled_copy(model, old_name, new_name)
        reader.input[at] = new_name
        change = f"{reader.op_type} `{reader.name}` reads {new_name} = {old_name} x{SCALE_FACTOR} (its quantization keeps {old_name})"
    save(model, path)
    onnx.checker.check_model(str(path))
    out = run(path, fixture)
    require_mutated_from(MUTANT_LAYER, source_out, out, label=f"{fixture}@{name}: ")
    print(f"{fixture}@{name}: {change}; logits vs {build} {max_abs(out['logits'], source_out['logits']):.3e}; "
          f"sha256(tree) {sha256_tree(dst_root)}")
    return {"mutant_of": build, "change": change, "decoder_layer": MUTANT_LAYER, "module": "mlp"}


def main():
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    logging.getLogger().setLevel(logging.ERROR)
    for fixture, sub in selected(FIXTURE_MODELS):
        f32_out = run(FIXTURES / fixture / "onnx" / sub / "model.onnx", fixture)
        record = {"onnxruntime": version("onnxruntime"), "onnx": version("onnx"), "onnx-ir": version("onnx-ir"),
                  "source_export": "mobius-onnx 0.1.0 f32 (onnx/)", "builds": {}}
        outs = {}
        with tempfile.TemporaryDirectory() as tmp:
            for build in BUILDS:
                record["builds"][build], outs[build] = make_build(fixture, build, f32_out, Path(tmp))
        for build in BUILDS:
            kinds = ["weight-scale"] + (["activation-scale"] if build in STATIC else [])
            for kind in kinds:
                record["builds"][f"{build}-mutant-{kind}"] = make_mutant(fixture, build, kind, outs[build])
        (FIXTURES / fixture / "activation-quantized.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
