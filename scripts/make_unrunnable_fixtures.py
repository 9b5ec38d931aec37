#!/usr/bin/env python
"""Builds ONNX Runtime accepts as graphs but cannot run on the CPU EP, as the harness must report
them: an ignored trial naming the kernel and the EP that has it, never a failure, never a pass.

  gemma4-text-moe/variants/geglu   the committed mobius f32 export (fixtures/gemma4-text-moe/onnx/) with
                                   every com.microsoft.MoE node's activation_type set to "geglu", what
                                   onnxruntime-genai's model builder writes for Gemma 4's experts
                                   (gelu_pytorch_tanh gating). ONNX Runtime 1.31.1's CPU MoE kernel
                                   (contrib_ops/cpu/moe/moe_base_cpu.h, MoEBaseCPU's constructor) refuses
                                   it at session creation: "Unsupported MoE activation type: geglu"; CUDA's
                                   MoE (cutlass ActivationType::Geglu) runs it.

The script asserts the CPU EP refuses the build with that message and that nothing but the attribute
changed (the external data is copied byte for byte).

Run in the pinned fixture venv (scripts/fixture-venv.sh):
    $(scripts/fixture-venv.sh) scripts/make_unrunnable_fixtures.py
"""
from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
EXPECTED = "Unsupported MoE activation type: geglu"


def geglu_moe() -> None:
    src = FIXTURES / "gemma4-text-moe" / "onnx"
    dst = FIXTURES / "gemma4-text-moe" / "variants" / "geglu"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    model = onnx.load(str(src / "model.onnx"), load_external_data=False)
    changed = 0
    for node in model.graph.node:
        if node.domain == "com.microsoft" and node.op_type == "MoE":
            for a in node.attribute:
                if a.name == "activation_type":
                    a.s = b"geglu"
                    changed += 1
    if changed == 0:
        raise SystemExit(f"{src}: no com.microsoft.MoE node with an activation_type")
    onnx.save(model, str(dst / "model.onnx"))
    for f in src.iterdir():
        if f.name != "model.onnx":
            shutil.copyfile(f, dst / f.name)
    try:
        ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - the refusal is the point
        if EXPECTED not in str(e):
            raise SystemExit(f"{dst}: ONNX Runtime {ort.__version__} refused it for another reason: {e}")
        print(f"gemma4-text-moe@geglu: {changed} MoE nodes set to geglu; ONNX Runtime {ort.__version__} CPU EP: {EXPECTED}")
        return
    raise SystemExit(f"{dst}: ONNX Runtime {ort.__version__} runs it on the CPU EP; the fixture shows nothing")


if __name__ == "__main__":
    geglu_moe()
