"""Weight-only quantized builds of committed mobius f32 exports, and two int4 mutants (expected failures).

Each build is ONNX Runtime 1.31.1's `MatMulNBitsQuantizer` (onnxruntime.quantization.matmul_nbits_quantizer)
run on a fixture's f32 export (mobius-onnx 0.1.0, fixtures/<fixture>/onnx/), written to
fixtures/<fixture>/variants/<build>/ with the source's layout (model.onnx + model.onnx.data, saved like
mobius saves: `onnx_ir.save(..., external_data="model.onnx.data")`, tensors over 256 bytes external).

The quantizer runs with `DefaultWeightOnlyQuantConfig` (its "default" method: round-to-nearest per block,
through ORT's C++ kernels, QOperator format). `RTNWeightOnlyQuantConfig` is not used: it goes through the
neural-compressor path, which quantizes MatMul only and always to 4 bits. Each build's config:

  build      bits  block  symmetric  accuracy_level  ops quantized
  int4       4     32     yes        0 (unset)       MatMul -> MatMulNBits, Gather -> GatherBlockQuantized
  int4-acc4  4     32     yes        4 (int8 A)      MatMul -> MatMulNBits, Gather -> GatherBlockQuantized
  int4-asym  4     32     no (uint4 zero points)  0  MatMul -> MatMulNBits, Gather -> GatherBlockQuantized
  int8       8     32     yes        0               MatMul -> MatMulNBits (ORT quantizes Gather to 4 bits only)

Every MatMul whose B is a constant 2-D initializer is quantized (K is padded up to a whole block: K 16 or
48 is fine); a MatMul left float has a computed B. Gather is quantized only where its data is a token
embedding table (`*embed_tokens.weight`, `*embed_tokens_per_layer.weight`: quantize_axis 1, i.e. blocks of
32 along the hidden dimension, gather_axis 0); the RoPE cos/sin cache Gathers are excluded (nodes_to_exclude).
With accuracy_level 0 the quantizer writes no accuracy_level attribute.

Fixtures: gemma4-text-dense and gemma4-text-ple (one model.onnx each), unified-vision (decoder/ quantized;
embedding/ and vision_encoder/ copied byte for byte, so the build has the same three subfolders).
fixtures/<fixture>/quantized.json records, per build, the quantizer, its parameters, the excluded nodes and
the op counts (a separate file: make_variant_fixtures.py rewrites variants.json whole).

Mutants of gemma4-text-dense's int4 build (fixtures/gemma4-text-dense/variants/<mutant>/), each a copy of
variants/int4 with ONE initializer's bytes rewritten in place in model.onnx.data (model.onnx byte for byte):
  int4-mutant-scales   model.layers.1.mlp.gate_proj.weight_t_scales x1.25 (f32)
(down_proj's scales were the first choice: a uniform scale of down_proj is cancelled by the
post_feedforward_layernorm right after it, 6.4e-6 on the logits: no output can see it.)
  int4-mutant-nibbles  model.layers.2.self_attn.o_proj.weight_t_Q4: the two nibbles of every byte swapped
  int4-acc4-mutant-scales  the scales mutant of the int4-acc4 build (accuracy_level 4)
The script asserts each differs from int4 only in that initializer, and (onnxruntime) that the present
KV of layers up to the mutated one is bit-identical to int4's and the next layer's differs.

For each build it prints op counts, sizes and, from one onnxruntime CPU prefill (input_ids of
inputs.safetensors, or for unified-vision's decoder the HF oracle's inputs_embeds; empty past), the max abs
difference of the logits against the f32 source's and against the HF oracle's.

    $(scripts/fixture-venv.sh) scripts/make_quantized_fixtures.py [fixture ...]

Run by scripts/make-fixtures.sh (family `quantized`) after the unified and gemma4 families; reruns are
byte-identical.
"""

import collections
import hashlib
import json
import logging
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
# One copy of the tree copy, the single-threaded CPU session and the mutant check for every fixture
# script that makes mutants.
from make_mutant_fixtures import copy_tree, require_mutated_from, session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

BLOCK_SIZE = 32

# build -> (bits, is_symmetric, accuracy_level, op types)
BUILDS = {
    "int4": (4, True, 0, ("Gather", "MatMul")),
    "int4-acc4": (4, True, 4, ("Gather", "MatMul")),
    "int4-asym": (4, False, 0, ("Gather", "MatMul")),
    "int8": (8, True, 0, ("MatMul",)),
}

# fixture -> the model quantized, relative to onnx/ (the other subfolders, if any, are copied)
FIXTURE_MODELS = {
    "gemma4-text-dense": ".",
    "gemma4-text-ple": ".",
    "unified-vision": "decoder",
}

# (mutant build, fixture, source build, initializer, decoder layer, kind)
MUTANTS = [
    ("int4-mutant-scales", "gemma4-text-dense", "int4", "model.layers.1.mlp.gate_proj.weight_t_scales", 1, "scales"),
    ("int4-mutant-nibbles", "gemma4-text-dense", "int4", "model.layers.2.self_attn.o_proj.weight_t_Q4", 2, "nibbles"),
    # The scales mutant again at accuracy_level 4: the weights check does not depend on how the
    # activations are rounded, and L3 must fail on the same layer there too.
    ("int4-acc4-mutant-scales", "gemma4-text-dense", "int4-acc4", "model.layers.1.mlp.gate_proj.weight_t_scales", 1, "scales"),
]
SCALE_FACTOR = 1.25

EMBEDDING_SUFFIXES = ("embed_tokens.weight", "embed_tokens_per_layer.weight")


def initializers(graph):
    return {t.name: t for t in graph.initializer}


def gather_exclusions(model):
    """Gather nodes with constant data other than a token embedding table (the RoPE cos/sin caches)."""
    inits = initializers(model.graph)
    return sorted(n.name for n in model.graph.node
                  if n.op_type == "Gather" and n.input[0] in inits and not n.input[0].endswith(EMBEDDING_SUFFIXES))


def float_matmul_reasons(model):
    """MatMuls the quantizer leaves float, with why (it quantizes every MatMul with a constant 2-D B)."""
    inits = initializers(model.graph)
    left = []
    for n in model.graph.node:
        if n.op_type != "MatMul":
            continue
        if n.input[1] not in inits:
            left.append((n.name, "B is computed, not an initializer"))
        elif len(inits[n.input[1]].dims) != 2:
            left.append((n.name, f"B is {len(inits[n.input[1]].dims)}-D"))
    return left


def quantize(src_path, bits, symmetric, accuracy_level, op_types):
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from onnxruntime.quantization.quant_utils import QuantFormat

    model = onnx.load(str(src_path))  # external data read into raw_data
    exclude = gather_exclusions(model) if "Gather" in op_types else []
    config = DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level,
        quant_format=QuantFormat.QOperator,
        op_types_to_quantize=op_types,
        quant_axes=(("MatMul", 0), ("Gather", 1)),
        bits=bits,
    )
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=BLOCK_SIZE,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level,
        nodes_to_exclude=exclude,
        algo_config=config,
    )
    quantizer.process()
    return quantizer.model.model, exclude


def save(model, path):
    import onnx_ir as ir

    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_name(path.name + ".data")):
        if p.exists():
            p.unlink()
    ir.save(ir.from_proto(model), str(path), external_data="model.onnx.data")


def op_counts(model):
    return collections.Counter(n.op_type for n in model.graph.node)


def tree_size(path):
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def sha256_tree(path):
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


# --- onnxruntime checks -------------------------------------------------------------------------------------------


def feeds_for(sess, fixture):
    from safetensors.numpy import load_file

    ids = load_file(str(FIXTURES / fixture / "inputs.safetensors"))["input_ids"]
    batch, seq = ids.shape
    feeds = {
        "input_ids": ids,
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
        "position_ids": np.arange(seq, dtype=np.int64)[None, :].repeat(batch, 0),
    }
    names = [i.name for i in sess.get_inputs()]
    if "inputs_embeds" in names:
        feeds["inputs_embeds"] = load_file(str(FIXTURES / fixture / "oracle.safetensors"))["inputs_embeds"]
    for inp in sess.get_inputs():
        if inp.name.startswith("past_key_values."):
            dims = [d if isinstance(d, int) else 0 for d in inp.shape]
            dims[0] = batch
            feeds[inp.name] = np.zeros(dims, dtype=np.float32)
    feeds = {k: v for k, v in feeds.items() if k in names}
    missing = [n for n in names if n not in feeds]
    if missing:
        raise SystemExit(f"inputs not fed: {missing}")
    return feeds


def run(path, fixture):
    sess = session(path)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds_for(sess, fixture))))


def oracle_logits(fixture):
    from safetensors.numpy import load_file

    return load_file(str(FIXTURES / fixture / "oracle.safetensors"))["logits"].astype(np.float64)


def max_abs(a, b):
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


# --- builds -------------------------------------------------------------------------------------------------------


def describe(model):
    """Op counts and one example of each quantized node (inputs with shapes/dtypes, attributes)."""
    inits = initializers(model.graph)
    examples = {}
    for n in model.graph.node:
        if n.op_type == "GatherBlockQuantized" or (n.op_type == "MatMulNBits" and n.op_type not in examples):
            ins = []
            for i in n.input:
                t = inits.get(i)
                ins.append(f"{i}" + (f" {onnx.TensorProto.DataType.Name(t.data_type)}{list(t.dims)}" if t is not None else ""))
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            examples[n.op_type if n.op_type == "MatMulNBits" else n.name] = f"{n.name}: inputs [{', '.join(ins)}] attrs {attrs}"
    return examples


def fresh_variant(fixture, build, sub):
    """An empty fixtures/<fixture>/variants/<build>/ holding copies of the export's other sub-models
    (those but `sub`, the one quantized): the source's and the build's roots and model paths."""
    src_root = FIXTURES / fixture / "onnx"
    dst_root = FIXTURES / fixture / "variants" / build
    if dst_root.exists():
        shutil.rmtree(dst_root)
    if sub != ".":
        for d in sorted(p for p in src_root.iterdir() if p.is_dir() and p.name != sub):
            copy_tree(d, dst_root / d.name)
    return src_root, dst_root, src_root / sub / "model.onnx", dst_root / sub / "model.onnx"


def make_build(fixture, build, f32_out):
    bits, symmetric, accuracy_level, op_types = BUILDS[build]
    sub = FIXTURE_MODELS[fixture]
    src_root, dst_root, src_path, dst_path = fresh_variant(fixture, build, sub)
    source = onnx.load(str(src_path), load_external_data=False)
    model, excluded = quantize(src_path, bits, symmetric, accuracy_level, op_types)
    save(model, dst_path)

    saved = onnx.load(str(dst_path), load_external_data=False)
    onnx.checker.check_model(str(dst_path))
    counts = op_counts(saved)
    left = float_matmul_reasons(saved)
    if counts["MatMul"] != len(left):
        raise SystemExit(f"{fixture}@{build}: MatMul count {counts['MatMul']} != {len(left)} explained")
    saved_inits = initializers(saved.graph)
    gathers = [n for n in saved.graph.node if n.op_type == "Gather"]
    const_gathers = [g.input[0] for g in gathers if g.input[0] in saved_inits]
    n_mm = op_counts(source)["MatMul"]
    if counts["MatMulNBits"] + counts["MatMul"] != n_mm:
        raise SystemExit(f"{fixture}@{build}: {counts['MatMulNBits']} MatMulNBits + {counts['MatMul']} MatMul != {n_mm}")

    out = run(dst_path, fixture)
    vs_f32 = max_abs(out["logits"], f32_out["logits"])
    vs_hf = max_abs(out["logits"], oracle_logits(fixture))
    top_f32 = f32_out["logits"][0].argmax(-1)
    agree = int((out["logits"][0].argmax(-1) == top_f32).sum())
    print(f"{fixture}@{build}: bits {bits}, block {BLOCK_SIZE}, {'symmetric' if symmetric else 'asymmetric'}, "
          f"accuracy_level {accuracy_level}, op types {list(op_types)}")
    print(f"  MatMulNBits {counts['MatMulNBits']}, GatherBlockQuantized {counts['GatherBlockQuantized']}, "
          f"MatMul left float {counts['MatMul']}" + (f" ({'; '.join(f'{a}: {b}' for a, b in left)})" if left else "")
          + f", Gather left float {len(gathers)} (constant data: {', '.join(const_gathers)}; "
          f"{len(gathers) - len(const_gathers)} with computed data)")
    print(f"  size {tree_size(dst_root)} bytes (f32 source {tree_size(src_root)}); "
          f"{sub}/model.onnx {dst_path.stat().st_size}, .data {dst_path.with_name('model.onnx.data').stat().st_size}; "
          f"sha256(tree) {sha256_tree(dst_root)}")
    print(f"  prefill logits max abs diff: vs f32 build {vs_f32:.3e}, vs HF oracle {vs_hf:.3e}; "
          f"argmax agrees with f32 at {agree}/{top_f32.size} positions")
    for op, text in describe(saved).items():
        print(f"  e.g. {text}")
    record = {
        "quantizer": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
        "algo_config": "DefaultWeightOnlyQuantConfig",
        "source": f"onnx/{sub}/model.onnx" if sub != "." else "onnx/model.onnx",
        "bits": bits,
        "block_size": BLOCK_SIZE,
        "is_symmetric": symmetric,
        "accuracy_level": accuracy_level,
        "quant_format": "QOperator",
        "op_types_to_quantize": sorted(op_types),
        "quant_axes": {"Gather": 1, "MatMul": 0},
        "nodes_to_exclude": excluded,
        "ops": {"MatMulNBits": counts["MatMulNBits"], "GatherBlockQuantized": counts["GatherBlockQuantized"],
                "MatMul": counts["MatMul"], "Gather": len(gathers)},
    }
    if sub != ".":
        record["copied"] = sorted(d.name for d in src_root.iterdir() if d.is_dir() and d.name != sub)
    return record, out


# --- mutants ------------------------------------------------------------------------------------------------------


def external_location(tensor):
    entries = {e.key: e.value for e in tensor.external_data}
    return entries["location"], int(entries.get("offset", 0)), int(entries["length"])


def make_mutant(name, fixture, source, tensor_name, layer, kind, source_out):
    src = FIXTURES / fixture / "variants" / source
    dst = FIXTURES / fixture / "variants" / name
    if dst.exists():
        shutil.rmtree(dst)
    copy_tree(src, dst)
    model = onnx.load(str(dst / "model.onnx"), load_external_data=False)
    tensor = initializers(model.graph).get(tensor_name)
    if tensor is None:
        raise SystemExit(f"{name}: no initializer {tensor_name}")
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        raise SystemExit(f"{name}: {tensor_name} is not in external data")
    users = [n for n in model.graph.node if tensor_name in n.input]
    if len(users) != 1 or users[0].op_type != "MatMulNBits":
        raise SystemExit(f"{name}: {tensor_name}: expected one MatMulNBits consumer, found {[u.name for u in users]}")
    location, offset, length = external_location(tensor)
    data_path = dst / location
    data = bytearray(data_path.read_bytes())
    old = bytes(data[offset:offset + length])
    if kind == "scales":
        if tensor.data_type != onnx.TensorProto.FLOAT:
            raise SystemExit(f"{name}: {tensor_name} is not float32")
        values = np.frombuffer(old, dtype="<f4")
        new = (values * np.float32(SCALE_FACTOR)).astype("<f4").tobytes()
        what = f"x{SCALE_FACTOR} ({values.size} f32 scales, |old| max {float(np.abs(values).max()):.4g})"
    elif kind == "nibbles":
        if tensor.data_type != onnx.TensorProto.UINT8:
            raise SystemExit(f"{name}: {tensor_name} is not uint8")
        raw = np.frombuffer(old, dtype=np.uint8)
        new = (((raw & 0x0F) << 4) | (raw >> 4)).astype(np.uint8).tobytes()
        what = f"nibbles swapped ({raw.size} bytes, {int((raw & 0x0F != raw >> 4).sum())} changed)"
    else:
        raise SystemExit(f"unknown mutation {kind}")
    if new == old:
        raise SystemExit(f"{name}: mutation left {tensor_name} unchanged")
    data[offset:offset + length] = new
    data_path.write_bytes(bytes(data))

    # Only that initializer differs: same model.onnx, .data differing only inside its byte range, and
    # (loaded) every other initializer equal.
    if (dst / "model.onnx").read_bytes() != (src / "model.onnx").read_bytes():
        raise SystemExit(f"{name}: model.onnx differs from {source}'s")
    a, b = (src / location).read_bytes(), data_path.read_bytes()
    diff = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    if len(a) != len(b) or diff.size == 0 or diff.min() < offset or diff.max() >= offset + length:
        raise SystemExit(f"{name}: external data differs outside {tensor_name}'s bytes")
    ia = initializers(onnx.load(str(src / "model.onnx")).graph)
    ib = initializers(onnx.load(str(dst / "model.onnx")).graph)
    changed = sorted(k for k in ia if ia[k].SerializeToString() != ib[k].SerializeToString())
    if sorted(ia) != sorted(ib) or changed != [tensor_name]:
        raise SystemExit(f"{name}: initializers changed {changed}, expected only {tensor_name}")

    out = run(dst / "model.onnx", fixture)
    require_mutated_from(layer, source_out, out, label=f"{name}: ")
    next_diff = max(max_abs(out[k], source_out[k]) for k in out if k.startswith(f"present.{layer + 1}."))
    print(f"{fixture}@{name}: {source} with {tensor_name} ({onnx.TensorProto.DataType.Name(tensor.data_type)}"
          f"{list(tensor.dims)}, consumer {users[0].name}) {what}")
    print(f"  differs from {source} only in that initializer ({diff.size} bytes at data offset {offset}..{offset + length}); "
          f"present.0..{layer} bit-identical, present.{layer + 1} differs (max abs {next_diff:.3e}); logits max abs diff vs {source} "
          f"{max_abs(out['logits'], source_out['logits']):.3e}, vs HF oracle {max_abs(out['logits'], oracle_logits(fixture)):.3e}; "
          f"sha256(tree) {sha256_tree(dst)}")
    return {"mutant_of": source, "initializer": tensor_name, "consumer": users[0].name,
            "change": f"x{SCALE_FACTOR} (float32)" if kind == "scales" else "low and high nibble of every byte swapped",
            "decoder_layer": layer}


def selected(models):
    """The (fixture, quantized sub-model) pairs of `models` the command line names (all without
    arguments); an unknown name stops the script."""
    only = sys.argv[1:]
    unknown = [n for n in only if n not in models]
    if unknown:
        raise SystemExit(f"unknown fixtures: {unknown} (known: {list(models)})")
    return [(fixture, sub) for fixture, sub in models.items() if not only or fixture in only]


def main():
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    for fixture, sub in selected(FIXTURE_MODELS):
        f32_out = run(FIXTURES / fixture / "onnx" / sub / "model.onnx", fixture)
        print(f"{fixture}: f32 source prefill logits max abs diff vs HF oracle "
              f"{max_abs(f32_out['logits'], oracle_logits(fixture)):.3e}")
        builds, outs = {}, {}
        for build in BUILDS:
            builds[build], outs[build] = make_build(fixture, build, f32_out)
        for name, mfixture, source, tensor_name, layer, kind in MUTANTS:
            if mfixture == fixture:
                builds[name] = make_mutant(name, fixture, source, tensor_name, layer, kind, outs[source])
        record = {
            "onnxruntime": version("onnxruntime"),
            "onnx": version("onnx"),
            "onnx-ir": version("onnx-ir"),
            "source_export": "mobius-onnx 0.1.0 f32 (onnx/)",
            "builds": builds,
        }
        (FIXTURES / fixture / "quantized.json").write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
