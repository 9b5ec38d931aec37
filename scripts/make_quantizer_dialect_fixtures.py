"""Quantized builds in other quantizers' dialects (issue 38): what a user brings besides
ONNX Runtime's default MatMulNBits path (scripts/make_quantized_fixtures.py), on the committed
mobius f32 export of gemma4-text-ple (fixtures/gemma4-text-ple/onnx/), each a correct build and a
mutant with one layer's scales x1.25:

  build               quantizer (ONNX Runtime 1.31.1 MatMulNBitsQuantizer)      names it writes
  rtn                 RTNWeightOnlyQuantConfig, block 32, symmetric, acc 0     `…weight_t_Q4G32`, `…weight_t_scale`
  rtn-acc4            the same at accuracy_level 4 (int8 activations on CPU)   (the same)
  rtn-mutant-scales   rtn with model.layers.1.mlp.gate_proj.weight_t_scale x1.25
  qdq                 DefaultWeightOnlyQuantConfig, QuantFormat.QDQ, block 32   `…weight_t_DQ_Q4`, `…weight_t_DQ_scales`
                      symmetric (int4 DequantizeLinear(block_size 32) -> MatMul)
  qdq-mutant-scales   qdq with model.layers.1.mlp.gate_proj.weight_t_DQ_scales x1.25

RTN quantizes MatMul only (the token tables stay float); the RoPE caches are never quantized. Each
build is written to fixtures/gemma4-text-ple/variants/<build>/ (model.onnx + model.onnx.data, saved as
make_quantized_fixtures.py saves), fixtures/gemma4-text-ple/quantizer-dialects.json records the
quantizer, its parameters and op counts. Each mutant is checked to differ from its build in that one
initializer's bytes and (onnxruntime) to leave the present KV of layers 0..1 bit-identical.

    $(scripts/fixture-venv.sh) scripts/make_quantizer_dialect_fixtures.py

Needs onnxruntime 1.31.1 with onnx-ir (its quantizer imports it); reruns are byte-identical.
"""

import json
import logging
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_mutant_fixtures import copy_tree, require_mutated_from  # noqa: E402
from make_quantized_fixtures import (  # noqa: E402
    BLOCK_SIZE,
    SCALE_FACTOR,
    external_location,
    initializers,
    max_abs,
    op_counts,
    oracle_logits,
    run,
    save,
    sha256_tree,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "gemma4-text-ple"
SRC = ROOT / "fixtures" / FIXTURE / "onnx" / "model.onnx"

# build -> (config name, accuracy_level)
BUILDS = {"rtn": ("rtn", 0), "rtn-acc4": ("rtn", 4), "qdq": ("qdq", 0)}
# mutant -> (source build, initializer, decoder layer)
MUTANTS = {
    "rtn-mutant-scales": ("rtn", "model.layers.1.mlp.gate_proj.weight_t_scale", 1),
    "qdq-mutant-scales": ("qdq", "model.layers.1.mlp.gate_proj.weight_t_DQ_scales", 1),
}


def quantize(kind, accuracy_level):
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq

    model = onnx.load(str(SRC))
    if kind == "rtn":
        config = mnq.RTNWeightOnlyQuantConfig()
    else:
        config = mnq.DefaultWeightOnlyQuantConfig(
            block_size=BLOCK_SIZE, is_symmetric=True, quant_format=QuantFormat.QDQ, op_types_to_quantize=("MatMul",)
        )
    q = mnq.MatMulNBitsQuantizer(
        model, block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=accuracy_level or None, algo_config=config
    )
    q.process()
    return q.model.model


def mutate(name, source, tensor_name, layer, outs):
    src = ROOT / "fixtures" / FIXTURE / "variants" / source
    dst = ROOT / "fixtures" / FIXTURE / "variants" / name
    return scale_initializer(src, dst, tensor_name, FIXTURE, layer, outs[source], f"{FIXTURE}@{name}", source)


def scale_initializer(src, dst, tensor_name, fixture, layer, source_out, label, source, unchanged_through=None):
    """`dst`: the build at `src` with its float32 initializer `tensor_name` (a quantized weight's
    scales, in decoder layer `layer`) x SCALE_FACTOR, every other byte as built; checked to change only
    that tensor's bytes and (onnxruntime on `fixture`'s inputs) to leave the present KV of layers
    0..`unchanged_through` (default `layer`: an MLP weight; `layer - 1` for an attention projection)
    bit-identical and the next layer's changed."""
    copy_tree(src, dst)
    model = onnx.load(str(dst / "model.onnx"), load_external_data=False)
    tensor = initializers(model.graph).get(tensor_name)
    if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
        raise SystemExit(f"{label}: {tensor_name}: expected a float32 initializer")
    users = [n for n in model.graph.node if tensor_name in n.input]
    if len(users) != 1 or users[0].op_type not in ("MatMulNBits", "DequantizeLinear"):
        raise SystemExit(f"{label}: {tensor_name}: expected one MatMulNBits/DequantizeLinear consumer, found {[u.name for u in users]}")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        location, offset, length = external_location(tensor)
        data = bytearray((dst / location).read_bytes())
        old = np.frombuffer(bytes(data[offset:offset + length]), dtype="<f4")
        data[offset:offset + length] = (old * np.float32(SCALE_FACTOR)).astype("<f4").tobytes()
        (dst / location).write_bytes(bytes(data))
        a = np.frombuffer((src / location).read_bytes(), np.uint8)
        b = np.frombuffer((dst / location).read_bytes(), np.uint8)
        diff = np.flatnonzero(a != b)
        if diff.size == 0 or diff.min() < offset or diff.max() >= offset + length:
            raise SystemExit(f"{label}: external data differs outside {tensor_name}'s bytes")
    else:
        # Small scales are stored in model.onnx itself (raw_data): rewritten there, the external
        # data (every other weight) left byte for byte.
        old = np.frombuffer(tensor.raw_data, dtype="<f4")
        tensor.raw_data = (old * np.float32(SCALE_FACTOR)).astype("<f4").tobytes()
        onnx.save(model, str(dst / "model.onnx"))
        ia, ib = initializers(onnx.load(str(src / "model.onnx")).graph), initializers(onnx.load(str(dst / "model.onnx")).graph)
        changed = sorted(k for k in ia if ia[k].SerializeToString() != ib[k].SerializeToString())
        if sorted(ia) != sorted(ib) or changed != [tensor_name]:
            raise SystemExit(f"{label}: initializers changed {changed}, expected only {tensor_name}")
    if source_out is None:
        # A package this script cannot feed (ORT GenAI's windowed KV cache): the byte check only.
        effect = "not run here"
    else:
        out = run(dst / "model.onnx", fixture)
        require_mutated_from(layer if unchanged_through is None else unchanged_through, source_out, out, label=f"{label}: ")
        effect = f"logits max abs diff vs {source} {max_abs(out['logits'], source_out['logits']):.3e}"
    print(f"{label}: {source} with {tensor_name} x{SCALE_FACTOR} (consumer {users[0].op_type} {users[0].name}); "
          f"{effect}; sha256(tree) {sha256_tree(dst)}")
    return {"mutant_of": source, "initializer": tensor_name, "consumer": users[0].name, "change": f"x{SCALE_FACTOR} (float32)",
            "decoder_layer": layer}


def main():
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    f32_out = run(SRC, FIXTURE)
    record = {"onnxruntime": version("onnxruntime"), "onnx": version("onnx"), "onnx-ir": version("onnx-ir"),
              "source_export": "mobius-onnx 0.1.0 f32 (onnx/)", "builds": {}}
    outs = {}
    for build, (kind, acc) in BUILDS.items():
        dst = ROOT / "fixtures" / FIXTURE / "variants" / build
        if dst.exists():
            shutil.rmtree(dst)
        model = quantize(kind, acc)
        save(model, dst / "model.onnx")
        onnx.checker.check_model(str(dst / "model.onnx"))
        saved = onnx.load(str(dst / "model.onnx"), load_external_data=False)
        counts = op_counts(saved)
        outs[build] = run(dst / "model.onnx", FIXTURE)
        names = sorted(t.name for t in saved.graph.initializer if "layers.0.self_attn.q_proj" in t.name)
        print(f"{FIXTURE}@{build}: {kind}, block {BLOCK_SIZE}, symmetric, accuracy_level {acc}: MatMulNBits "
              f"{counts['MatMulNBits']}, DequantizeLinear {counts['DequantizeLinear']}, MatMul {counts['MatMul']}; "
              f"layer 0 q_proj initializers {names}; logits vs f32 {max_abs(outs[build]['logits'], f32_out['logits']):.3e}, "
              f"vs HF {max_abs(outs[build]['logits'], oracle_logits(FIXTURE)):.3e}; sha256(tree) {sha256_tree(dst)}")
        record["builds"][build] = {
            "quantizer": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "algo_config": "RTNWeightOnlyQuantConfig" if kind == "rtn" else "DefaultWeightOnlyQuantConfig",
            "quant_format": "QOperator" if kind == "rtn" else "QDQ",
            "bits": 4, "block_size": BLOCK_SIZE, "is_symmetric": True, "accuracy_level": acc,
            "ops": {k: counts[k] for k in ("MatMulNBits", "DequantizeLinear", "MatMul", "Gather")},
            "initializer_names": names,
        }
    for name, (source, tensor_name, layer) in MUTANTS.items():
        record["builds"][name] = mutate(name, source, tensor_name, layer, outs)
    (ROOT / "fixtures" / FIXTURE / "quantizer-dialects.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
