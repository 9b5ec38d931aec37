"""Deliberately broken exports for the first-divergent-layer check (L3 `first_divergent_layer`).

Each is a copy of a committed fixture export (model.onnx byte for byte) whose external data has one
decoder layer's MLP `down_proj` weight multiplied element-wise by 1 + 0.5·u, u ~ U(-1, 1) (seeded).
A uniform scale would be undone by the RMSNorm that follows the MLP; an element-wise one is not.
Everything before that layer is untouched, so the first decoder layer whose output differs from
the reference is that one. The cases use the source fixture's checkpoint and inputs.

Run by scripts/make-fixtures.sh (family `broken`) after the unified and gemma4 families; reruns are
byte-identical.
"""

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# (fixture made here, source fixture, decoder layer, seed)
BROKEN = [
    ("broken-mlp-layer", "unified-text-kvshare", 3, 1103),
    ("gemma4-broken-mlp-layer", "gemma4-text-ple", 6, 1106),
]


def external_location(tensor):
    entries = {e.key: e.value for e in tensor.external_data}
    return entries["location"], int(entries.get("offset", 0)), int(entries["length"])


def make(name, source, layer, seed):
    src = FIXTURES / source / "onnx"
    dst = FIXTURES / name / "onnx"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    model = onnx.load(str(src / "model.onnx"), load_external_data=False)
    weight = f"model.layers.{layer}.mlp.down_proj.weight_t"
    tensor = next((t for t in model.graph.initializer if t.name == weight), None)
    if tensor is None:
        raise SystemExit(f"{src / 'model.onnx'}: no initializer {weight}")
    if tensor.data_type != onnx.TensorProto.FLOAT:
        raise SystemExit(f"{weight}: expected float32, found data type {tensor.data_type}")
    location, offset, length = external_location(tensor)
    shutil.copyfile(src / "model.onnx", dst / "model.onnx")
    data = bytearray((src / location).read_bytes())
    w = np.frombuffer(bytes(data[offset : offset + length]), dtype="<f4").copy()
    u = np.random.RandomState(seed).uniform(-1.0, 1.0, size=w.shape).astype(np.float32)
    w *= np.float32(1.0) + np.float32(0.5) * u
    data[offset : offset + length] = w.astype("<f4").tobytes()
    (dst / location).write_bytes(bytes(data))
    for other in src.iterdir():
        if other.name not in ("model.onnx", location):
            shutil.copyfile(other, dst / other.name)
    digest = hashlib.sha256((dst / location).read_bytes()).hexdigest()[:16]
    print(f"{name}: {source} with {weight} ({w.size} values) scaled element-wise by 1 + 0.5·U(-1, 1), seed {seed}; data sha256 {digest}")


def main():
    only = sys.argv[1:]
    for name, source, layer, seed in BROKEN:
        if not only or name in only:
            make(name, source, layer, seed)


if __name__ == "__main__":
    main()
