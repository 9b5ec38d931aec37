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
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point():
                continue
            if p.ndim >= 2:
                # Row chunks: one f32 temporary of a 2.35 G-element table would not fit.
                flat = p.view(-1, p.shape[-1])
                for start in range(0, flat.shape[0], 4096):
                    rows = flat[start:start + 4096]
                    rows.copy_((torch.randn(rows.shape, generator=g, dtype=torch.float32) * p.shape[-1] ** -0.5).to(p.dtype))
            elif name.endswith(("input_min", "output_min")):
                p.fill_(-float("inf"))
            elif name.endswith(("input_max", "output_max")):
                p.fill_(float("inf"))
            else:
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32)).to(p.dtype))
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT, max_shard_size="2GB")
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {OUT}: {n / 1e9:.2f} B parameters (bf16)")


if __name__ == "__main__":
    main()
