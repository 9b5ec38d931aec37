#!/usr/bin/env python
"""Measured evidence for the calibrated L3 rule's f16 and bf16 rows (cases/default_tolerances.yaml,
L3_calibrated): how far a *correct* implementation computing in half precision lands from the f64 arbiter,
relative to the reference at that precision (the rule's floor).

No bf16 build runs on ONNX Runtime's CPU EP (no bf16 MatMul or Mul in 1.31.1), so the bf16 row cannot be
measured on ORT builds without a GPU. HF transformers at bf16 (and f16) on the CPU is an independent,
correct half-precision implementation of the same function: PyTorch rounds each op's output to the dtype
and accumulates matmuls in f32, as ORT's CUDA kernels and cuBLAS do. Its f16 ratios, set beside the
committed ORT f16 builds' (0.5-1.7), say whether it is a fair stand-in; its bf16 ratios are the bf16 row's
evidence until a GPU measures ORT's bf16 builds (scripts/gpu-check.sh).

For every fixture with a text checkpoint (gemma4_text, gemma4_unified_text) and each of f16, bf16:
  HF     Gemma4*ForCausalLM (eager attention, as the fixtures' oracles) cast to the dtype, prompt logits
  floor  onnx-parity logits --checkpoint --dtype <dtype>       (the reference at that precision)
  truth  onnx-parity logits --checkpoint --dtype f64           (the arbiter)
  onnx-parity compare floor HF --arbiter truth --precision <dtype>   -> the logits ratio (pass iff <= k)
and prints one table row per fixture and dtype. Logits only: HF's decode and layer outputs are not dumped.

    PY=$(scripts/fixture-venv.sh); cargo build --release
    $PY scripts/measure_half_precision.py [--out /tmp/half] [FIXTURE ...]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def text_fixtures() -> list[str]:
    out = []
    for cfg in sorted((ROOT / "fixtures").glob("*/checkpoint/config.json")):
        if json.loads(cfg.read_text())["model_type"] in ("gemma4_text", "gemma4_unified_text"):
            out.append(cfg.parent.parent.name)
    return out


def hf_model(ckpt: Path, model_type: str):
    if model_type == "gemma4_text":
        from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM as cls
        extra = {"experts_implementation": "eager"}
    else:
        from transformers.models.gemma4_unified.modeling_gemma4_unified import Gemma4UnifiedForCausalLM as cls
        extra = {}
    return cls.from_pretrained(str(ckpt), attn_implementation="eager", dtype=torch.float32, **extra).eval()


def hf_logits(fixture: str, dtype: str, dest: Path) -> None:
    fdir = ROOT / "fixtures" / fixture
    model_type = json.loads((fdir / "checkpoint" / "config.json").read_text())["model_type"]
    model = hf_model(fdir / "checkpoint", model_type).to(DTYPES[dtype])
    ids = load_file(str(fdir / "inputs.safetensors"))["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    save_file({"logits": logits.float().contiguous()}, str(dest))


def harness(bin_: Path, *args: str) -> str:
    r = subprocess.run([str(bin_), *args], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"{bin_} {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="*", help="fixture names (default: every text fixture)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/half-precision"))
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/onnx-parity")
    args = ap.parse_args()
    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for fixture in args.fixtures or text_fixtures():
        fdir = ROOT / "fixtures" / fixture
        ckpt, inputs = fdir / "checkpoint", fdir / "inputs.safetensors"
        truth = args.out / f"{fixture}.f64.safetensors"
        harness(args.bin, "logits", "--checkpoint", str(ckpt), "--inputs", str(inputs), "--out", str(truth), "--dtype", "f64")
        for dtype in DTYPES:
            floor = args.out / f"{fixture}.reference-{dtype}.safetensors"
            hf = args.out / f"{fixture}.hf-{dtype}.safetensors"
            harness(args.bin, "logits", "--checkpoint", str(ckpt), "--inputs", str(inputs), "--out", str(floor), "--dtype", dtype)
            hf_logits(fixture, dtype, hf)
            out = harness(args.bin, "compare", str(floor), str(hf), "--arbiter", str(truth), "--precision", dtype)
            m = re.search(r"^logits\s+(\S+)\s+ratio ([0-9.]+|inf|NaN) \(k ([0-9.]+)\) e_gpu max (\S+) rms (\S+), floor max (\S+) rms (\S+)",
                          out, re.M)
            if not m:
                sys.exit(f"{fixture} {dtype}: no logits row in\n{out}")
            verdict, ratio, k, e_max, e_rms, f_max, f_rms = m.groups()
            rows.append((fixture, dtype, ratio, k, verdict, e_max, f_max, e_rms, f_rms))
            print(f"{fixture} {dtype}: ratio {ratio} (k {k}) {verdict}", file=sys.stderr, flush=True)
    print("| fixture | dtype | ratio (HF vs floor) | k | verdict | HF max err | floor max err | HF rms err | floor rms err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    (args.out / "table.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
