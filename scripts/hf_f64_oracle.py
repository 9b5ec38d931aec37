#!/usr/bin/env python
"""Pure-float64 HF oracle for a fixture: proves the reference computes HF's *function*.

Why: the f32 fixtures are ill-conditioned (one ulp of noise on inputs_embeds moves HF's own logits
by 2.4e-4 / 4.5e-4), so f32-vs-f32 comparisons measure rounding order, not semantics. In float64
the rounding noise is ~1e-13, and any semantic difference shows up at full size.

HF's `model.double()` is not pure f64: three places force float32, patched here to stay in the
model dtype (nothing else changes):
  * Gemma4UnifiedRMSNorm.forward: `self._norm(hidden_states.float())` → `self._norm(hidden_states)`
  * Gemma4UnifiedTextRotaryEmbedding.forward: cos/sin forced to f32 → computed in f64 from the
    same f32 inverse frequencies
  * eager_attention_forward: `softmax(..., dtype=torch.float32)` → softmax in f64
Masks for the three bidirectional scopes come from the same HF functions the f32 fixture used.

    ~/.cache/onnx-parity/fixture-venv/bin/python scripts/hf_f64_oracle.py unified-vision
writes reference/tests/data/<fixture>-f64.safetensors (read by reference/tests/f64_semantics.rs).
"""

import hashlib
import json
import sys
from pathlib import Path

import torch
import transformers
import transformers.models.gemma4_unified.modeling_gemma4_unified as M
from safetensors.torch import load_file
from transformers import masking_utils

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def patch_pure_f64() -> None:
    def rms_forward(self, h):
        n = self._norm(h)
        return n * self.weight if self.with_scale else n

    def rope_forward(self, x, position_ids, layer_type=None):
        inv = getattr(self, f"{layer_type}_inv_freq").double()
        freqs = (inv[None, :, None] * position_ids[:, None, :].double()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    softmax = torch.nn.functional.softmax

    def softmax_keep_dtype(x, dim=None, dtype=None, **kw):
        return softmax(x, dim=dim)

    M.Gemma4UnifiedRMSNorm.forward = rms_forward
    M.Gemma4UnifiedTextRotaryEmbedding.forward = rope_forward
    M.nn.functional.softmax = softmax_keep_dtype


def restore_f32_inv_freq(model) -> None:
    """`.double()` keeps the f32-computed inverse frequencies (as f64 values); recompute them in
    f32 anyway so that nothing depends on buffer-cast order."""
    for mod in model.modules():
        if isinstance(mod, M.Gemma4UnifiedTextRotaryEmbedding):
            for lt, fn in mod.rope_init_fns.items():
                kw = {"layer_type": lt}
                if lt == "full_attention" and mod.rope_type[lt] == "proportional":
                    kw["head_dim_key"] = "global_head_dim"
                inv, _ = fn(mod.config, **kw)
                setattr(mod, f"{lt}_inv_freq", inv.double())


def main() -> None:
    name = sys.argv[1]
    fdir = ROOT / "fixtures" / name
    cfg = json.loads((fdir / "checkpoint" / "config.json").read_text())
    vision = cfg["model_type"] == "gemma4_unified"
    cls = M.Gemma4UnifiedForConditionalGeneration if vision else M.Gemma4UnifiedForCausalLM
    patch_pure_f64()
    model = cls.from_pretrained(str(fdir / "checkpoint"), dtype=torch.float32, attn_implementation="eager")
    model = model.eval().double()
    restore_f32_inv_freq(model)

    inp = load_file(str(fdir / "inputs.safetensors"))
    oracle32 = load_file(str(fdir / "oracle.safetensors"))
    n_new = oracle32["greedy_tokens"].shape[1]
    inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inp.items()}
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        out["logits"] = model(**inputs, use_cache=False).logits
        if vision:
            out["image_features"] = model.model.get_image_features(
                inputs["pixel_values"], inputs["image_position_ids"]
            ).pooler_output
            seen = {}
            def grab(_mod, _args, kwargs):
                seen["e"] = kwargs["inputs_embeds"]

            hook = model.model.language_model.register_forward_pre_hook(grab, with_kwargs=True)
            model(**inputs, use_cache=False)
            hook.remove()
            embeds = seen["e"]
            seq = embeds.shape[1]
            pos = torch.arange(seq).unsqueeze(0)
            attn = torch.ones(1, seq, dtype=torch.long)
            mm = inputs["mm_token_type_ids"]
            text_cfg = model.config.get_text_config()
            block = M.get_block_sequence_ids_for_mask(mm, device=embeds.device)
            masks = {
                "all_layers": masking_utils.create_masks_for_generate(
                    config=text_cfg, inputs_embeds=embeds, attention_mask=attn, past_key_values=None,
                    position_ids=pos, block_sequence_ids=block),
                "sliding_windowed": cls.create_masks_for_generate(
                    config=model.config, inputs_embeds=embeds, attention_mask=attn, past_key_values=None,
                    position_ids=pos, mm_token_type_ids=mm),
                "none": cls.create_masks_for_generate(
                    config=model.config, inputs_embeds=embeds, attention_mask=attn, past_key_values=None,
                    position_ids=pos, mm_token_type_ids=None),
            }
            fwd = {k: v for k, v in inputs.items() if k not in ("attention_mask",)}
            for scope, m in masks.items():
                out[f"logits_{scope}"] = model(**fwd, attention_mask=m, use_cache=False).logits
        gen = model.generate(**inputs, max_new_tokens=n_new, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=cfg.get("pad_token_id", 0))
        prompt_len = inputs["input_ids"].shape[1]
        out["greedy_tokens"] = gen.sequences[:, prompt_len:]
        out["step_logits"] = torch.cat(list(gen.logits), dim=0)
    out = {k: v.contiguous() for k, v in out.items()}
    for k, v in out.items():
        if k.startswith("logits") or k == "step_logits":
            ref = oracle32.get(k)
            if ref is not None:
                print(f"{name} {k}: HF f32 oracle vs HF pure-f64 {float((ref.double() - v).abs().max()):.3e}")
    dest = ROOT / "reference" / "tests" / "data" / f"{name}-f64.safetensors"
    meta = {
        # The Rust test refuses a stale oracle: fixtures are regenerated with new weights.
        "checkpoint_sha256": hashlib.sha256((fdir / "checkpoint" / "model.safetensors").read_bytes()).hexdigest(),
        "inputs_sha256": hashlib.sha256((fdir / "inputs.safetensors").read_bytes()).hexdigest(),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "patches": "RMSNorm without .float(); RoPE cos/sin in f64; eager softmax in f64",
        "greedy_scope": "all-layers" if vision else "none",
    }
    # The fixture script's canonical writer: same bytes on every run.
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import save_tensors

    save_tensors(dest, out, meta)
    dest.chmod(0o644)
    print(f"wrote {dest.relative_to(ROOT)}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in out.items()))


if __name__ == "__main__":
    main()
