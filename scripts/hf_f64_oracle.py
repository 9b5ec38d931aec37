#!/usr/bin/env python
"""Pure-float64 HF oracle for a fixture: proves the reference computes HF's *function*.

Two families: Gemma4Unified (unified-vision, unified-text-kvshare; described first) and Gemma4
(gemma4-text-ple, gemma4-text-moe, gemma4-vision, gemma4-vision-large; see gemma4_main below).

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
    if cfg["model_type"] in ("gemma4", "gemma4_text"):
        return gemma4_main(name, fdir, cfg)
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


# ---------------------------------------------------------------------------------------------
# Gemma4 (models/gemma4): Gemma4ForCausalLM (gemma4_text) and Gemma4ForConditionalGeneration (gemma4)
# ---------------------------------------------------------------------------------------------
GEMMA4_PATCHES = [
    "Gemma4RMSNorm.forward: _norm(x) * weight in the model dtype (no .float() of x and weight)",
    "Gemma4TextRotaryEmbedding.forward: cos/sin computed in f64 from the f32-computed inverse frequencies",
    "Gemma4VisionRotaryEmbedding.forward: per-axis cos/sin computed in f64 from the f32-computed inverse frequencies",
    "torch.nn.functional.softmax: dtype=float32 ignored (eager text and vision attention, MoE router softmax)",
    "Gemma4VisionPooler._avg_pool_by_positions: one_hot(...) / k^2 and the pooling matmul in the model dtype "
    "(no .float(), no cast back)",
    "Gemma4VisionPooler.forward: hidden_states * sqrt(hidden) in the model dtype (no .float())",
    "step_logits: taken from the forward's f64 logits (generate() casts its output_logits to float32)",
    "not patched: standardize's std_bias.float()/std_scale.float() (f32-exact buffer values; f64 - f32 "
    "promotes to f64: the result is asserted f64), embed_scale (the f32 value of sqrt(H), as the model defines it)",
]


def gemma4_patch_pure_f64(mg) -> None:
    import torch.nn.functional as F

    def rms_forward(self, h):
        n = self._norm(h)
        return n * self.weight if self.with_scale else n

    def text_rope_forward(self, x, position_ids, layer_type=None):
        inv = getattr(self, f"{layer_type}_inv_freq").double()
        scaling = getattr(self, f"{layer_type}_attention_scaling")
        freqs = (inv[None, :, None] * position_ids[:, None, :].double()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    def vision_rope_forward(self, x, position_ids):
        inv = self.inv_freq.double()
        cos, sin = [], []
        for i in range(2):
            freqs = (inv[None, :, None] * position_ids[:, None, :, i].double()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos.append(emb.cos() * self.attention_scaling)
            sin.append(emb.sin() * self.attention_scaling)
        return torch.cat(cos, dim=-1).to(x.dtype), torch.cat(sin, dim=-1).to(x.dtype)

    def avg_pool(self, hidden_states, pixel_position_ids, length):
        n = hidden_states.shape[1]
        k = int((n // length) ** 0.5)
        clamped = pixel_position_ids.clamp(min=0)
        max_x = clamped[..., 0].max(dim=-1, keepdim=True)[0] + 1
        kid = torch.div(clamped, k, rounding_mode="floor")
        kid = kid[..., 0] + (max_x // k) * kid[..., 1]
        weights = F.one_hot(kid.long(), length).to(hidden_states.dtype) / (k * k)
        out = weights.transpose(1, 2) @ hidden_states
        return out, torch.logical_not((weights == 0).all(dim=1))

    pooler_forward_orig = mg.Gemma4VisionPooler.forward

    def pooler_forward(self, hidden_states, pixel_position_ids, padding_positions, output_length=None):
        if output_length > hidden_states.shape[1]:
            return pooler_forward_orig(self, hidden_states, pixel_position_ids, padding_positions, output_length)
        hidden_states = hidden_states.masked_fill(padding_positions.unsqueeze(-1), 0.0)
        if hidden_states.shape[1] != output_length:
            hidden_states, padding_positions = self._avg_pool_by_positions(hidden_states, pixel_position_ids,
                                                                           output_length)
        return hidden_states * self.root_hidden_size, padding_positions

    softmax = torch.nn.functional.softmax

    def softmax_keep_dtype(x, dim=None, dtype=None, **kw):
        return softmax(x, dim=dim)

    mg.Gemma4RMSNorm.forward = rms_forward
    mg.Gemma4TextRotaryEmbedding.forward = text_rope_forward
    mg.Gemma4VisionRotaryEmbedding.forward = vision_rope_forward
    mg.Gemma4VisionPooler._avg_pool_by_positions = avg_pool
    mg.Gemma4VisionPooler.forward = pooler_forward
    mg.nn.functional.softmax = softmax_keep_dtype


def gemma4_restore_f32_inv_freq(model, mg) -> None:
    for mod in model.modules():
        if isinstance(mod, mg.Gemma4TextRotaryEmbedding):
            for lt, fn in mod.rope_init_fns.items():
                kw = {"layer_type": lt}
                if lt == "full_attention" and mod.rope_type[lt] == "proportional":
                    kw["head_dim_key"] = "global_head_dim"
                inv, _ = fn(mod.config, **kw)
                setattr(mod, f"{lt}_inv_freq", inv.double())
        elif isinstance(mod, mg.Gemma4VisionRotaryEmbedding):
            inv, _ = mod.compute_default_rope_parameters(mod.config)
            mod.inv_freq = inv.double()


def gemma4_main(name: str, fdir: Path, cfg: dict) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.dont_write_bytecode = True
    import make_fixtures_gemma4 as g4  # noqa: E402  (Capture, scope_masks: the f32 fixture's own code paths)
    from make_fixtures import save_tensors
    from transformers.models.gemma4 import modeling_gemma4 as mg

    kind = "vision" if cfg["model_type"] == "gemma4" else "text"
    gemma4_patch_pure_f64(mg)
    model = g4.load_checkpoint(fdir / "checkpoint", kind).double()
    gemma4_restore_f32_inv_freq(model, mg)

    inp = load_file(str(fdir / "inputs.safetensors"))
    oracle32 = load_file(str(fdir / "oracle.safetensors"))
    from safetensors import safe_open
    with safe_open(str(fdir / "oracle.safetensors"), framework="pt") as f:
        meta32 = f.metadata()
    n_new = oracle32["greedy_tokens"].shape[1]
    inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inp.items()}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        with g4.Capture(model, kind) as cap:
            out["logits"] = model(**inputs, use_cache=False).logits
        out["inputs_embeds"] = cap.seen["inputs_embeds"]
        if "per_layer_inputs" in cap.seen:
            out["per_layer_inputs"] = cap.seen["per_layer_inputs"]
        if kind == "vision":
            out["image_features"] = model.model.get_image_features(
                inputs["pixel_values"], inputs["image_position_ids"]).pooler_output
            assert out["image_features"].dtype == torch.float64
            seq = inputs["input_ids"].shape[1]
            masks = g4.scope_masks(model, out["inputs_embeds"], inputs["attention_mask"], torch.arange(seq)[None],
                                   inputs["mm_token_type_ids"])
            for scope, m in masks.items():
                out[f"logits_{scope.replace('-', '_')}"] = model(**dict(inputs, attention_mask=m), use_cache=False).logits
        # generate() casts each step's logits to float32 (GenerationMixin._sample: .to(dtype=torch.float32)):
        # take them from the forward's own f64 output instead (checked equal to the cast ones).
        steps = []
        hook = model.register_forward_hook(lambda _m, _a, o: steps.append(o.logits[:, -1].detach().clone()))
        try:
            gen = model.generate(**inputs, max_new_tokens=n_new, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=cfg.get("pad_token_id", 0))
        finally:
            hook.remove()
        prompt_len = inputs["input_ids"].shape[1]
        out["greedy_tokens"] = gen.sequences[:, prompt_len:]
        out["step_logits"] = torch.cat(steps[:n_new], dim=0)
        assert len(steps) == n_new and torch.equal(out["step_logits"].float(), torch.cat(list(gen.logits), dim=0))
    out = {k: v.contiguous() for k, v in out.items()}
    assert sorted(out) == sorted(oracle32), (sorted(out), sorted(oracle32))
    for k, v in sorted(out.items()):
        if v.is_floating_point():
            assert v.dtype == torch.float64, k
            print(f"{name} {k}: HF f32 oracle vs HF pure-f64 {float((oracle32[k].double() - v).abs().max()):.3e}")
        else:
            same = torch.equal(oracle32[k], v)
            print(f"{name} {k}: f64 greedy tokens {'equal' if same else 'DIFFER from'} the f32 oracle's")
    dest = ROOT / "reference" / "tests" / "data" / f"{name}-f64.safetensors"
    meta = {
        "checkpoint_sha256": hashlib.sha256((fdir / "checkpoint" / "model.safetensors").read_bytes()).hexdigest(),
        "inputs_sha256": hashlib.sha256((fdir / "inputs.safetensors").read_bytes()).hexdigest(),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "patches": json.dumps(GEMMA4_PATCHES),
        "greedy_scope": meta32["greedy_scope"],
        "default_scope": meta32["default_scope"],
        "attn_implementation": "eager",
        "experts_implementation": "eager",
    }
    save_tensors(dest, out, meta)
    dest.chmod(0o644)
    print(f"wrote {dest.relative_to(ROOT)}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(out.items())))


if __name__ == "__main__":
    main()
