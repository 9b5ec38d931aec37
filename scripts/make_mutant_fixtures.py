"""One-layer mutant exports: committed expected failures for the calibrated L3 rule.

Each is a copy of a committed unified-vision export (every file byte for byte) except
decoder/model.onnx, in which ONE decoder layer's `layer_scalar` is multiplied by 1.01 (a 1 % error
in one layer). mobius-onnx 0.1.0 stores `decoder.model.layers.N.layer_scalar` as a [1]-shaped
initializer embedded in model.onnx (raw_data, below the external-data threshold; float32 in the f32
export, float16 in the f16 one), used by one Mul on the layer's residual output. The new value is
float64(old) * 1.01 rounded to the stored dtype; the script prints old, new and the effective factor
(in float16 the rounding moves it visibly off 1.01). The re-serialised model.onnx is asserted to
differ from the original only inside that initializer's raw bytes.

The script then runs the original and the mutant decoder (onnxruntime, CPU) on the fixture's HF
`inputs_embeds` (oracle.safetensors; cast to the export's dtype) and `input_ids`, empty cache, and
asserts that present.0..N (layers up to the mutated one) are bit-identical and present.N+1 differs;
it prints the logits' max abs difference between the two and each one's against the HF oracle logits.

    $(scripts/fixture-venv.sh) scripts/make_mutant_fixtures.py [name ...]

Run by scripts/make-fixtures.sh (family `mutant`) after the unified family; reruns are byte-identical.
"""

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

FACTOR = 1.01

# (fixture made here, source export, fixture holding inputs.safetensors/oracle.safetensors, layer)
MUTANTS = [
    ("unified-vision-f16-mutant", "unified-vision-f16", "unified-vision", 2),
    ("unified-vision-mutant", "unified-vision", "unified-vision", 2),
]

DTYPES = {onnx.TensorProto.FLOAT: np.dtype("<f4"), onnx.TensorProto.FLOAT16: np.dtype("<f2")}


def copy_tree(src, dst):
    if dst.exists():
        shutil.rmtree(dst)
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def mutate_decoder(path, layer):
    """Multiplies layer `layer`'s layer_scalar in `path` (a model.onnx) by FACTOR in place."""
    original = path.read_bytes()
    model = onnx.load_from_string(original)
    if model.SerializeToString() != original:
        raise SystemExit(f"{path}: protobuf round trip is not byte-identical; refusing to re-serialise")
    name = f"decoder.model.layers.{layer}.layer_scalar"
    tensor = next((t for t in model.graph.initializer if t.name == name), None)
    if tensor is None:
        raise SystemExit(f"{path}: no initializer {name}")
    if tensor.data_location != onnx.TensorProto.DEFAULT or not tensor.raw_data:
        raise SystemExit(f"{name}: expected an embedded raw_data initializer")
    if tensor.data_type not in DTYPES:
        raise SystemExit(f"{name}: unexpected data type {tensor.data_type}")
    users = [n.name for n in model.graph.node if name in n.input]
    if len(users) != 1:
        raise SystemExit(f"{name}: expected one consumer, found {users}")
    dtype = DTYPES[tensor.data_type]
    old = numpy_helper.to_array(tensor).astype(dtype)
    new = (old.astype(np.float64) * FACTOR).astype(dtype)
    old_raw = tensor.raw_data
    if original.count(old_raw) != 1:
        raise SystemExit(f"{name}: raw bytes {old_raw.hex()} not unique in {path}")
    tensor.raw_data = new.tobytes()
    mutated = model.SerializeToString()
    start = original.index(old_raw)
    diff = [i for i, (a, b) in enumerate(zip(original, mutated)) if a != b]
    if len(mutated) != len(original) or not diff or not all(start <= i < start + len(old_raw) for i in diff):
        raise SystemExit(f"{path}: re-serialised model differs outside {name}'s raw bytes")
    path.write_bytes(mutated)
    return name, dtype, old, new, users[0]


def session(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # f16 graphs: "can't constant fold Sqrt" warnings with timestamps
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def decoder_feeds(sess, data_fixture, dtype):
    from safetensors.numpy import load_file

    ids = load_file(str(FIXTURES / data_fixture / "inputs.safetensors"))["input_ids"]
    embeds = load_file(str(FIXTURES / data_fixture / "oracle.safetensors"))["inputs_embeds"]
    batch, seq = ids.shape
    feeds = {
        "inputs_embeds": embeds.astype(dtype),
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
        "position_ids": np.arange(seq, dtype=np.int64)[None, :].repeat(batch, 0),
        "input_ids": ids,
    }
    for inp in sess.get_inputs():
        if inp.name.startswith("past_key_values."):
            dims = [d if isinstance(d, int) else 0 for d in inp.shape]
            dims[0] = batch
            feeds[inp.name] = np.zeros(dims, dtype=dtype)
    missing = [i.name for i in sess.get_inputs() if i.name not in feeds]
    if missing:
        raise SystemExit(f"decoder inputs not fed: {missing}")
    return feeds


def require_mutated_from(layer, before, after, label=""):
    """The mutation starts at decoder layer `layer`: the present KV of every layer up to it is
    bit-identical in the two runs' outputs (`before`, `after`: name -> array), layer + 1's differs.
    Also used by make_quantized_fixtures.py for its mutants."""
    for key in before:
        if not key.startswith("present."):
            continue
        k = int(key.split(".")[1])
        same = np.array_equal(before[key], after[key])
        if k <= layer and not same:
            raise SystemExit(f"{label}{key} differs although layer {k} <= mutated layer {layer}")
        if k == layer + 1 and same:
            raise SystemExit(f"{label}{key} unchanged although layer {layer} was mutated")


def check(src, dst, data_fixture, layer, dtype):
    a, b = session(src / "decoder" / "model.onnx"), session(dst / "decoder" / "model.onnx")
    feeds = decoder_feeds(a, data_fixture, dtype)
    names = [o.name for o in a.get_outputs()]
    out_a = dict(zip(names, a.run(names, feeds)))
    out_b = dict(zip(names, b.run(names, feeds)))
    require_mutated_from(layer, out_a, out_b)
    from safetensors.numpy import load_file

    oracle = load_file(str(FIXTURES / data_fixture / "oracle.safetensors"))["logits"].astype(np.float64)
    a64, b64 = out_a["logits"].astype(np.float64), out_b["logits"].astype(np.float64)
    diff = np.abs(a64 - b64)
    vs_oracle = (float(np.abs(a64 - oracle).max()), float(np.abs(b64 - oracle).max()))
    return float(diff.max()), int((diff > 0).sum()), diff.size, vs_oracle


def make(name, source, data_fixture, layer):
    src = FIXTURES / source / "onnx"
    dst = FIXTURES / name / "onnx"
    copy_tree(src, dst)
    decoder = dst / "decoder" / "model.onnx"
    tensor, dtype, old, new, user = mutate_decoder(decoder, layer)
    changed = sorted(str(p.relative_to(dst)) for p in dst.rglob("*")
                     if p.is_file() and p.read_bytes() != (src / p.relative_to(dst)).read_bytes())
    if changed != ["decoder/model.onnx"]:
        raise SystemExit(f"{name}: unexpected changed files {changed}")
    print(f"{name}: {source} with {tensor} ({dtype.name}, embedded initializer, consumer {user}) "
          f"x{FACTOR}: {float(old[0]):.9g} (0x{old.tobytes()[::-1].hex()}) -> {float(new[0]):.9g} "
          f"(0x{new.tobytes()[::-1].hex()}), effective factor {float(new[0]) / float(old[0]):.7f}")
    max_diff, n_diff, n, (orig_hf, mut_hf) = check(src, dst, data_fixture, layer, dtype)
    print(f"  decoder on {data_fixture}'s HF inputs_embeds: present.0..{layer} bit-identical, present.{layer + 1} "
          f"differs; logits max abs diff vs original {max_diff:.3e} ({n_diff} of {n} values differ); "
          f"vs HF oracle logits: original {orig_hf:.3e}, mutant {mut_hf:.3e}")
    digest = hashlib.sha256(decoder.read_bytes()).hexdigest()[:16]
    print(f"  decoder/model.onnx sha256 {digest}; other files copied from fixtures/{source}/onnx")


def main():
    only = sys.argv[1:]
    unknown = [n for n in only if n not in [m[0] for m in MUTANTS]]
    if unknown:
        raise SystemExit(f"unknown mutant fixtures: {unknown}")
    for name, source, data_fixture, layer in MUTANTS:
        if not only or name in only:
            make(name, source, data_fixture, layer)


if __name__ == "__main__":
    main()
