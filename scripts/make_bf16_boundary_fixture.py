"""A bfloat16 build the CPU EP can run: the committed f32 text-only export of unified-text-kvshare
with bfloat16 at its boundary (every float input and output: the KV caches and the logits; a Cast
to float32 after each input, a Cast to bfloat16 before each output). ONNX Runtime 1.31.1's CPU EP
has no bfloat16 MatMul or Mul, so no real bf16 build runs on it; this one drives the harness's
bf16 feeds and reads (ids as the graph declares, KV caches fed and read back in bf16, logits read
back to f32) in CI. Made with onnx 1.19.0 (pip); deterministic, byte-identical on a rerun.

    python scripts/make_bf16_boundary_fixture.py   # writes fixtures/unified-text-kvshare/variants/bf16-boundary/
"""
import os
import shutil

import onnx
from onnx import TensorProto, helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "fixtures/unified-text-kvshare/onnx")
DST = os.path.join(ROOT, "fixtures/unified-text-kvshare/variants/bf16-boundary")


def main():
    m = onnx.load(os.path.join(SRC, "model.onnx"), load_external_data=False)
    g = m.graph
    casts_in, casts_out = [], []
    renamed = {}
    for inp in g.input:
        if inp.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        inner = inp.name + "__f32"
        renamed[inp.name] = inner
        casts_in.append(helper.make_node("Cast", [inp.name], [inner], name=f"bf16_boundary/in/{inp.name}", to=TensorProto.FLOAT))
        inp.type.tensor_type.elem_type = TensorProto.BFLOAT16
    for node in g.node:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
    outputs = {o.name for o in g.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    for node in g.node:
        for i, name in enumerate(node.output):
            if name in outputs:
                node.output[i] = name + "__f32"
        for i, name in enumerate(node.input):
            if name in outputs:
                node.input[i] = name + "__f32"
    for o in g.output:
        if o.name in outputs:
            casts_out.append(helper.make_node("Cast", [o.name + "__f32"], [o.name], name=f"bf16_boundary/out/{o.name}", to=TensorProto.BFLOAT16))
            o.type.tensor_type.elem_type = TensorProto.BFLOAT16
    for v in g.value_info:
        if v.name in outputs:
            v.name = v.name + "__f32"
    nodes = casts_in + list(g.node) + casts_out
    del g.node[:]
    g.node.extend(nodes)
    os.makedirs(DST, exist_ok=True)
    onnx.save(m, os.path.join(DST, "model.onnx"))
    shutil.copyfile(os.path.join(SRC, "model.onnx.data"), os.path.join(DST, "model.onnx.data"))
    onnx.checker.check_model(os.path.join(DST, "model.onnx"))
    print(f"wrote {DST}: {len(casts_in)} bf16 inputs, {len(casts_out)} bf16 outputs")


if __name__ == "__main__":
    main()
