#!/usr/bin/env python3
"""candle-transformers' gemma4 against HF transformers on a checkpoint that is not in the repository.

Makes a fresh random plain gemma4_text (Gemma4ForCausalLM: no PLE, KV sharing, MoE or k_eq_v; sizes,
seed and prompt unlike fixtures/gemma4-text-dense) in a temporary folder, runs HF eager f32 on it, and
compares `onnx-parity logits --implementation candle-transformers` (and the reference) with HF's logits
with `onnx-parity compare`. Then the neutralisation of tests/candle_transformers.rs, against HF itself:
candle-transformers on weights with RMSNorm w-1, q_norm w*sqrt(d)-1 and layer_scalar 1, HF on the same
model with layer_scalar 1 and sliding window W+1.

Run with the fixture venv (scripts/fixture-venv.sh) after `cargo build`:
  PY=$(scripts/fixture-venv.sh | tail -n 1); $PY scripts/check_candle_transformers_vs_hf.py [--seed N]
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "debug" / "onnx-parity"


def config(window: int) -> dict:
    S, F = "sliding_attention", "full_attention"
    return dict(
        model_type="gemma4_text", architectures=["Gemma4ForCausalLM"], vocab_size=320, hidden_size=96,
        intermediate_size=80, num_hidden_layers=4, layer_types=[S, S, S, F], num_attention_heads=6,
        num_key_value_heads=3, num_global_key_value_heads=None, head_dim=16, global_head_dim=32,
        sliding_window=window, final_logit_softcapping=30.0, max_position_embeddings=128,
        rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                         F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
        attention_k_eq_v=False, num_kv_shared_layers=0, use_double_wide_mlp=False, hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=320, enable_moe_block=False, use_bidirectional_attention=None,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def build(cfg: dict, seed: int):
    c = transformers.Gemma4TextConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})
    c._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.Gemma4ForCausalLM(c).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n.endswith("layer_scalar")]:
            if t.ndim == 2:
                t.copy_(torch.randn(t.shape, generator=g) * t.shape[1] ** -0.5)
            elif name.endswith("layer_scalar"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            else:  # RMSNorm weights
                t.copy_(1.0 + 0.2 * torch.randn(t.shape, generator=g))
    return model


def state(model) -> dict:
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return sd


def save(dir_: Path, cfg: dict, sd: dict) -> None:
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(sd, str(dir_ / "model.safetensors"))


def hf_outputs(cfg: dict, sd: dict, ids: torch.Tensor) -> dict:
    """HF's `logits` [1,S,V] and `inputs_embeds` (the scaled embedding module's output)."""
    model = build(cfg, 0)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()
    with torch.no_grad():
        return {"logits": model(input_ids=ids).logits.float().contiguous(),
                "inputs_embeds": model.model.embed_tokens(ids).float().contiguous()}


def onnx_parity(*args: str) -> str:
    out = subprocess.run([str(BIN), *args], capture_output=True, text=True)
    text = (out.stdout + out.stderr).strip()
    lines = [l for l in text.splitlines() if "INFO" not in l]
    return f"[exit {out.returncode}] " + "\n    ".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--prompt-len", type=int, default=20)
    args = ap.parse_args()
    if not BIN.exists():
        print(f"{BIN} is missing: run `cargo build` first", file=sys.stderr)
        return 2
    window = 6
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; seed {args.seed}, S={args.prompt_len}, W={window}")
    cfg = config(window)
    model = build(cfg, args.seed)
    sd = state(model)
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.cat([torch.tensor([[2]]), torch.randint(3, cfg["vocab_size"], (1, args.prompt_len - 1), generator=g)], dim=1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save(tmp / "hf", cfg, sd)
        save_file({"input_ids": ids.contiguous()}, str(tmp / "inputs.safetensors"))
        save_file(hf_outputs(cfg, sd, ids), str(tmp / "hf-logits.safetensors"))
        for impl in ("reference", "candle-transformers"):
            out = tmp / f"{impl}.safetensors"
            print(f"{impl}: {onnx_parity('logits', '--implementation', impl, '--checkpoint', str(tmp / 'hf'), '--inputs', str(tmp / 'inputs.safetensors'), '--out', str(out))}")
            print(f"  vs HF: {onnx_parity('compare', str(out), str(tmp / 'hf-logits.safetensors'), '--max-abs', '1e-4')}")

        # Neutralised: candle-transformers' arithmetic made HF's in the weights; HF with W+1.
        ct = {}
        for k, v in sd.items():
            if k.endswith("self_attn.q_norm.weight"):
                layer = int(k.split("layers.")[1].split(".")[0])
                d = cfg["global_head_dim"] if cfg["layer_types"][layer] == "full_attention" else cfg["head_dim"]
                ct[k] = v * math.sqrt(d) - 1.0
            elif k.endswith("norm.weight") or k.endswith("layernorm.weight"):
                ct[k] = v - 1.0
            elif k.endswith("layer_scalar"):
                ct[k] = torch.ones_like(v)
            else:
                ct[k] = v
        save(tmp / "ct-neutral", cfg, ct)
        unit = {k: (torch.ones_like(v) if k.endswith("layer_scalar") else v) for k, v in sd.items()}
        for w in (window, window + 1):
            save_file(hf_outputs(config(w), unit, ids), str(tmp / f"hf-w{w}.safetensors"))
        out = tmp / "ct-neutral.safetensors"
        print(f"candle-transformers, neutralised: {onnx_parity('logits', '--implementation', 'candle-transformers', '--checkpoint', str(tmp / 'ct-neutral'), '--inputs', str(tmp / 'inputs.safetensors'), '--out', str(out))}")
        for w in (window, window + 1):
            print(f"  vs HF (layer_scalar 1, sliding window {w}): {onnx_parity('compare', str(out), str(tmp / f'hf-w{w}.safetensors'), '--max-abs', '1e-4')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
