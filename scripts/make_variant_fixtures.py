#!/usr/bin/env python
"""The export variants mobius ships, built from the committed fixture checkpoints: one export per
(fixture, variant) under fixtures/<fixture>/variants/<variant>/, and fixtures/<fixture>/variants.json
recording each build's command and outcome (a build mobius refuses is recorded, not fatal).

Variants (mobius-onnx 0.1.0 `python -m mobius build` flags):
  gqa        --ep cpu                      GroupQueryAttention (f32), positions from attention_mask
  cuda-f16   --ep cuda --dtype f16         GroupQueryAttention (f16)
  cuda-bf16  --ep cuda --dtype bf16        GroupQueryAttention (bf16): no CPU kernels
  webgpu     --ep webgpu                   GQA (f32) built for WebGPU graph capture
  webgpu-f16 --ep webgpu --dtype f16       the same in f16 (where mobius's StaticEmptyKV rewrite fires)
  static     --static-cache --max-seq-len 64   pre-allocated KV buffers written by TensorScatter
  bf16       --dtype bf16                  the portable graph in bf16

Run in the pinned fixture venv (scripts/fixture-venv.sh):
    $(scripts/fixture-venv.sh) scripts/make_variant_fixtures.py
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

VARIANTS = {
    "gqa": ["--ep", "cpu"],
    "cuda-f16": ["--ep", "cuda", "--dtype", "f16"],
    "cuda-bf16": ["--ep", "cuda", "--dtype", "bf16"],
    "webgpu": ["--ep", "webgpu"],
    "webgpu-f16": ["--ep", "webgpu", "--dtype", "f16"],
    "static": ["--static-cache", "--max-seq-len", "64"],
    "bf16": ["--dtype", "bf16"],
}

BUILDS = {
    "unified-text-kvshare": ["gqa", "cuda-f16", "cuda-bf16", "webgpu", "webgpu-f16", "static", "bf16"],
    "gemma4-text-ple": ["gqa", "webgpu", "static", "bf16"],
    "unified-vision": ["gqa", "webgpu", "cuda-f16", "static"],
    # gemma4_text without KV sharing: --static-cache builds the hybrid layout (sliding layers
    # dynamic, full layers static), the one static build that loads.
    "gemma4-text-moe": ["gqa", "static"],
}


def mobius_version() -> str:
    from importlib.metadata import version

    return version("mobius-onnx")


def build(fixture: str, variant: str) -> dict:
    out = FIXTURES / fixture / "variants" / variant
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "mobius", "build", "--config", f"fixtures/{fixture}/checkpoint", f"fixtures/{fixture}/variants/{variant}", *VARIANTS[variant]]
    print(f"[{fixture}@{variant}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    record = {"flags": VARIANTS[variant], "exit": r.returncode}
    if r.returncode != 0:
        # The last line of the traceback says why; nothing half-written is kept.
        last = [line for line in r.stderr.strip().splitlines() if line.strip()][-1:] or ["(no message)"]
        record["refused"] = last[0].strip()
        if out.exists():
            shutil.rmtree(out)
        print(f"  refused: {record['refused']}", file=sys.stderr)
    return record


def main() -> None:
    for fixture, variants in BUILDS.items():
        records = {"mobius-onnx": mobius_version(), "builds": {v: build(fixture, v) for v in variants}}
        (FIXTURES / fixture / "variants.json").write_text(json.dumps(records, indent=2) + "\n")


if __name__ == "__main__":
    main()
