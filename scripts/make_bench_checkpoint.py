#!/usr/bin/env python
"""Create the mid-size random checkpoints used by the prefill benchmark.

Default (gemma4_unified): hidden 1024, 8 layers (5:1 sliding/full pattern, last forced full),
vocab 32768, 8 heads, head_dim 128 / global_head_dim 256, k_eq_v full layers, 2 KV-shared layers
with double-wide MLP, final logit softcapping 30, a small encoder-free vision embedder.

`--family gemma4_text`: the same decoder geometry as a gemma4_text with per-layer embeddings
(P 256) and a MoE block of 16 experts, top-4 (moe_intermediate_size 512) beside the dense MLP.
f32 safetensors.

Run with the pinned fixture venv:
    ~/.cache/onnx-parity/fixture-venv/bin/python scripts/make_bench_checkpoint.py [--family gemma4_text] [DIR]
(DIR defaults to /tmp/gemma4-bench, or /tmp/gemma4-bench-text for gemma4_text). Both
`reference/examples/bench_prefill.rs` and `scripts/bench_torch.py` read that directory.
"""

import sys
from pathlib import Path

import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig, Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

ARGS = [a for a in sys.argv[1:] if not a.startswith("--family")]
FAMILY = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--family=")), None)
if "--family" in sys.argv:
    FAMILY = sys.argv[sys.argv.index("--family") + 1]
    ARGS = [a for a in ARGS if a != FAMILY]
FAMILY = FAMILY or "gemma4_unified"
OUT = Path(ARGS[0] if ARGS else ("/tmp/gemma4-bench-text" if FAMILY == "gemma4_text" else "/tmp/gemma4-bench"))
SEED = 1234


def config() -> Gemma4UnifiedConfig:
    text = dict(
        vocab_size=32768,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        global_head_dim=256,
        num_global_key_value_heads=2,
        attention_k_eq_v=True,
        num_kv_shared_layers=2,
        use_double_wide_mlp=True,
        sliding_window=128,
        final_logit_softcapping=30.0,
        max_position_embeddings=4096,
        use_bidirectional_attention="vision",
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    vision = dict(patch_size=16, pooling_kernel_size=3, mm_embed_dim=256, output_proj_dims=256,
                  mm_posemb_size=64)
    return Gemma4UnifiedConfig(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        image_token_id=32760,
        video_token_id=32761,
        audio_token_id=32762,
        boi_token_id=32763,
        eoi_token_id=32764,
    )


def text_config() -> Gemma4TextConfig:
    return Gemma4TextConfig(
        vocab_size=32768,
        hidden_size=1024,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        global_head_dim=256,
        num_global_key_value_heads=2,
        attention_k_eq_v=True,
        num_kv_shared_layers=2,
        use_double_wide_mlp=True,
        sliding_window=128,
        final_logit_softcapping=30.0,
        max_position_embeddings=4096,
        hidden_size_per_layer_input=256,
        vocab_size_per_layer_input=32768,
        enable_moe_block=True,
        num_experts=16,
        top_k_experts=4,
        moe_intermediate_size=512,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def main() -> None:
    torch.manual_seed(SEED)
    if FAMILY == "gemma4_text":
        model = Gemma4ForCausalLM(text_config()).eval()
    elif FAMILY == "gemma4_unified":
        model = Gemma4UnifiedForConditionalGeneration(config()).eval()
    else:
        raise SystemExit(f"--family must be gemma4_unified or gemma4_text, got {FAMILY!r}")
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:  # Linear [out, in] and the embedding: unit-variance outputs
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)
            elif p.ndim == 3:  # stacked experts [E, out, in]
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[2] ** -0.5)
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.fill_(0.8)
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {OUT}: {n / 1e6:.1f}M parameters, {n * 4 / 2**20:.0f} MiB f32")


if __name__ == "__main__":
    main()
