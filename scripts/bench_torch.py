#!/usr/bin/env python
"""HF transformers eager f32 prefill benchmark, the torch side of reference/examples/bench_prefill.rs.

Same checkpoint (scripts/make_bench_checkpoint.py, either family), same prompt (256 deterministic
text tokens), same work (logits for every position), 2 threads, eager attention and (MoE) eager
experts — the implementation the reference reproduces. Prints median wall time of the timed runs
and the process's peak RSS.

    ~/.cache/onnx-parity/fixture-venv/bin/python scripts/bench_torch.py [/tmp/gemma4-bench] [runs]
"""

import resource
import statistics
import sys
import time

import torch
import json
from pathlib import Path

from transformers import Gemma4ForCausalLM, Gemma4UnifiedForConditionalGeneration

CKPT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gemma4-bench"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SEQ = 256

torch.set_num_threads(2)
torch.set_num_interop_threads(1)


def prompt_ids() -> list[int]:
    # Same formula as bench_prefill.rs: BOS then ids in the text range (no placeholders).
    return [2] + [16 + (i * 7919) % 32000 for i in range(1, SEQ)]


def main() -> None:
    t0 = time.perf_counter()
    model_type = json.loads((Path(CKPT) / "config.json").read_text())["model_type"]
    if model_type == "gemma4_text":
        model = Gemma4ForCausalLM.from_pretrained(
            CKPT, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
        ).eval()
    else:
        model = Gemma4UnifiedForConditionalGeneration.from_pretrained(
            CKPT, dtype=torch.float32, attn_implementation="eager"
        ).eval()
    load_s = time.perf_counter() - t0
    ids = torch.tensor([prompt_ids()], dtype=torch.long)
    times = []
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)  # warm-up
        for _ in range(RUNS):
            t = time.perf_counter()
            out = model(input_ids=ids, use_cache=False)
            times.append(time.perf_counter() - t)
    assert out.logits.shape == (1, SEQ, model.config.get_text_config().vocab_size)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    weights_mib = sum(p.numel() * 4 for p in model.parameters()) / 2**20
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} load {load_s:.2f}s")
    print(f"prefill {SEQ} tokens: median {statistics.median(times) * 1e3:.1f} ms "
          f"(runs: {', '.join(f'{t * 1e3:.1f}' for t in times)})")
    print(f"peak RSS {rss_mib:.0f} MiB, f32 weights {weights_mib:.0f} MiB, ratio {rss_mib / weights_mib:.2f}")
    print(f"last-token top1 {int(out.logits[0, -1].argmax())} max {float(out.logits[0, -1].max()):.4f}")


if __name__ == "__main__":
    main()
