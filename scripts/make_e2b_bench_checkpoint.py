#!/usr/bin/env python
"""A random checkpoint with the exact gemma-4-E2B config (cases/configs/gemma-4-E2B-it.json), bf16,
sharded like the hub, for the real-size memory benchmark (reference/examples/bench_generate.rs).

~10 GB on disk; needs ~11 GB of RAM while writing. The weights are random (unit-variance outputs),
so only time and memory are meaningful, not the tokens.

    ~/.cache/onnx-parity/fixture-venv/bin/python scripts/make_e2b_bench_checkpoint.py [/tmp/gemma4-e2b-bench]
"""

import json
import sys
from pathlib import Path

import torch
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_width import fill_random  # noqa: E402  (the one random initialisation of the benchmarks)

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gemma4-e2b-bench")
SEED = 1234


def main() -> None:
    d = json.loads((ROOT / "cases/configs/gemma-4-E2B-it.json").read_text())
    cfg = Gemma4Config(**{k: v for k, v in d.items() if k not in ("architectures", "transformers_version", "model_type")})
    torch.set_default_dtype(torch.bfloat16)  # build in bf16: f32 would need 20 GB
    with torch.device("meta"):
        model = Gemma4ForConditionalGeneration(cfg)
    model = model.to_empty(device="cpu").eval()
    model.tie_weights()  # to_empty unties lm_head from embed_tokens; the hub checkpoint is tied
    fill_random(model, SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT, max_shard_size="2GB")
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {OUT}: {n / 1e9:.2f} B parameters (bf16)")


if __name__ == "__main__":
    main()
