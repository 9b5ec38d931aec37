#!/usr/bin/env python3
"""Synthetic fixtures derived from the five real Gemma 4 configs (fixtures/real-<model>-{text,vision}/).

The real `config.json` files are committed under cases/configs/ (copied from shared/anchors/hf-configs/, provenance
in cases/configs/README.md). For each one this script DERIVES a tiny config programmatically (derive_text,
derive_vision_gemma4, derive_vision_unified): every architectural feature is kept — layer-type pattern and where the
full layers sit, KV-shared layers and their sliding/full sources, attention_k_eq_v, the num_key_value_heads :
num_global_key_value_heads ratio, head_dim : global_head_dim, PLE or not, MoE (top-k >= 3 with 2·top-k experts and the
real expert width ratio), double-wide MLP, softcapping, RoPE parameters, use_bidirectional_attention, the vision
tower's flags (clipped linears, standardize, pooling, head_dim = hidden/heads, kv heads = heads) or the unified
embedder — and only widths, depths and the vocabulary shrink. Every field of the real config is accounted for
(kept, shrunk or dropped with a reason; asserted), and the derivation table is printed (--configs-only prints
only that). The audio tower is out of scope: audio_config becomes null.

Fixtures (model in e2b, e4b, 12b, 26b-a4b, 31b):
  real-<model>-text    the derived text_config alone as a text-only checkpoint (gemma4_text -> Gemma4ForCausalLM;
                       12b: gemma4_unified_text -> Gemma4UnifiedForCausalLM), a 24-token prompt (3 windows)
  real-<model>-vision  the full composite (gemma4 / gemma4_unified) with ONE image, inputs from the real HF processor
                       (Gemma4Processor / Gemma4UnifiedProcessor over make_fixtures.build_tokenizer()), whose files
                       are saved in checkpoint/ (prompt-driven cases work), processor.json records the call
Each: checkpoint/ (save_pretrained, f32), onnx/ (mobius-onnx f32 export; a build failure is recorded, not fatal),
inputs.safetensors, oracle.safetensors (the tensor names and metadata of the gemma4 fixtures: HF eager attention AND
eager experts, float32), printed flag proofs, conditioning, and informative ONNX-vs-HF numbers with the known mobius
findings localised (MoE lowering, standardize dropped, all-layers mask scope, unified vision LayerNorm eps).

Helpers come from make_fixtures.py (unified family: weights, capture, scopes, conditioning, tokenizer, canonical
safetensors writer) and make_fixtures_gemma4.py (gemma4 family: weights, calibration, proofs, routing separation,
ORT driver, export, text fixture driver). Seeded and single-threaded: two runs give identical bytes.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.dont_write_bytecode = True

import make_fixtures as mf  # noqa: E402  (threads, determinism, offline env)
import make_fixtures_gemma4 as g4  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    Gemma4UnifiedConfig,
    Gemma4UnifiedForCausalLM,
    Gemma4UnifiedForConditionalGeneration,
    Gemma4UnifiedTextConfig,
)
from transformers.models.gemma4_unified.image_processing_gemma4_unified import (  # noqa: E402
    Gemma4UnifiedImageProcessor,
)

from make_fixtures import (  # noqa: E402
    AUDIO_TOKEN, BOA, BOI, BOS, EOA, EOI, EOS, IMAGE_TOKEN, PAD, VIDEO_TOKEN, VOCAB, log, maxdiff, save_tensors,
)

ROOT = mf.ROOT
FIXTURES = mf.FIXTURES
CONFIGS = ROOT / "cases" / "configs"
S_, F_ = g4.S_, g4.F_
MODELS = {"e2b": "gemma-4-E2B-it.json", "e4b": "gemma-4-E4B-it.json", "12b": "gemma-4-12B.json",
          "26b-a4b": "gemma-4-26B-A4B-it.json", "31b": "gemma-4-31B-it.json"}
OWNED = [f"real-{m}-{k}" for m in MODELS for k in ("text", "vision")]

# ---------------------------------------------------------------------------------------------
# derivation: real config.json -> tiny config (only widths, depths, vocab shrink)
# ---------------------------------------------------------------------------------------------
TINY_HIDDEN = 64
TINY_WINDOW = 8  # < every prompt (text S = 24, vision S = 78)
TINY_MAX_POS = 256
TINY_HEAD_DIM = 8  # global_head_dim = the real ratio (2) x this
TINY_PLE = 8  # hidden_size_per_layer_input
TINY_DENSE_INTERMEDIATE = 16  # dense-only models (real 4H): H/4, for size
TINY_TOP_K_CAP = 3
TINY_VISION_HEADS = 4
TINY_VISION_LAYERS = 2
TINY_POS_TABLE = 32  # gemma4 position_embedding_size (patch grid of the fixture image: 27 x 21)
TINY_MM_POSEMB = 16  # unified mm_posemb_size (model-patch grid: 9 x 7)
TINY_MM_EMBED = 32  # unified mm_embed_dim = output_proj_dims
SOFT_TOKENS = 70  # HF's smallest max_soft_tokens budget
PATCH = 2
# keys that describe a checkpoint, not an architecture: HF writes its own on save_pretrained
METADATA_KEYS = {"_name_or_path", "architectures", "dtype", "transformers_version", "id2label", "label2id",
                 "chunk_size_feed_forward", "is_encoder_decoder", "output_attentions", "output_hidden_states",
                 "problem_type", "return_dict", "initializer_range"}
TOKEN_IDS = {"image_token_id": IMAGE_TOKEN, "boi_token_id": BOI, "eoi_token_id": EOI, "audio_token_id": AUDIO_TOKEN,
             "boa_token_id": BOA, "eoa_token_id": EOA, "eoa_token_index": EOA, "video_token_id": VIDEO_TOKEN}


class Derivation:
    """Collects (field, real value, tiny value, rule) rows; every real key must get one."""

    def __init__(self, real: dict, scope: str):
        self.real, self.scope = real, scope
        self.tiny: dict = {}
        self.rows: list[tuple[str, object, object, str]] = []
        self.seen: set[str] = set()

    def keep(self, *keys):
        for k in keys:
            if k in self.real:
                self.set(k, copy.deepcopy(self.real[k]), "kept")

    def set(self, key, value, rule):
        self.tiny[key] = value
        self.seen.add(key)
        self.rows.append((key, self.real.get(key, "(absent)"), value, rule))

    def drop(self, key, rule):
        if key in self.real:
            self.seen.add(key)
            self.rows.append((key, self.real[key], "(dropped)", rule))

    def finish(self) -> dict:
        for k in sorted(set(self.real) & METADATA_KEYS - self.seen):
            self.drop(k, "checkpoint metadata (save_pretrained writes its own)")
        missing = sorted(set(self.real) - self.seen)
        assert not missing, f"{self.scope}: real fields not accounted for: {missing}"
        return self.tiny


def layer_plan(real: dict) -> dict:
    """The real layer pattern as (period, non-shared periods, shared periods); the tiny one keeps the period
    (sliding:full ratio, full layer last in each period, last layer full) with one non-shared period and, when the
    real model shares K/V, one shared period: the shared block then reads a sliding and a full source, as the real."""
    types = real["layer_types"]
    n = len(types)
    period = types.index(F_) + 1
    unit = [S_] * (period - 1) + [F_]
    assert n == real["num_hidden_layers"] and n % period == 0 and types == unit * (n // period), "non-periodic layers"
    shared = real.get("num_kv_shared_layers") or 0
    assert shared % period == 0, "the shared block does not start at a period boundary"
    plan = {"period": period, "unit": unit, "real_periods": (n - shared) // period, "real_shared_periods": shared // period}
    plan["tiny_types"] = unit * (1 + (1 if shared else 0))
    plan["tiny_shared"] = period if shared else 0

    def sources(types_, shared_):
        first = len(types_) - shared_
        if not shared_:
            return {}
        prev = types_[:first]
        return {t: first - 1 - prev[::-1].index(t) for t in sorted(set(types_[first:]))}
    plan["real_sources"] = sources(types, shared)
    plan["tiny_sources"] = sources(plan["tiny_types"], plan["tiny_shared"])
    assert set(plan["real_sources"]) == set(plan["tiny_sources"])
    return plan


def derive_text(real: dict) -> tuple[dict, list]:
    d = Derivation(real, "text_config")
    H = real["hidden_size"]
    plan = layer_plan(real)
    d.keep("model_type", "attention_bias", "attention_dropout", "attention_k_eq_v", "enable_moe_block",
           "final_logit_softcapping", "hidden_activation", "rms_norm_eps", "rope_parameters", "tie_word_embeddings",
           "use_bidirectional_attention", "use_cache", "use_double_wide_mlp")
    for key, tiny_id in (("pad_token_id", PAD), ("eos_token_id", EOS), ("bos_token_id", BOS)):
        assert real[key] == tiny_id, (key, real[key])
        d.set(key, tiny_id, "kept (make_fixtures' ids are the real ones)")
    d.set("vocab_size", VOCAB, "shrunk (make_fixtures' 512-entry vocabulary)")
    if "vocab_size_per_layer_input" in real:
        d.set("vocab_size_per_layer_input", VOCAB, "shrunk (= vocab_size, as real)")
    d.set("hidden_size", TINY_HIDDEN, "shrunk")
    d.set("num_hidden_layers", len(plan["tiny_types"]),
          f"shrunk: 1 period of {plan['period']} (real {plan['real_periods']})"
          + (f" + 1 shared period (real {plan['real_shared_periods']})" if plan["tiny_shared"] else ""))
    d.set("layer_types", plan["tiny_types"], f"same {plan['period'] - 1}:1 period, full layer last")
    d.set("num_kv_shared_layers", plan["tiny_shared"],
          "kept 0" if not plan["tiny_shared"] else
          f"one period; sources {plan['tiny_sources']} (real {plan['real_sources']})")
    # attention heads
    real_kv, real_g, real_h = real["num_key_value_heads"], real.get("num_global_key_value_heads"), real["num_attention_heads"]
    if real_g:
        assert real_kv % real_g == 0
        kv, g = real_kv // real_g, 1
        d.set("num_global_key_value_heads", g, "shrunk to 1")
        kv_rule = f"{real_kv // real_g} x num_global_key_value_heads (real ratio {real_kv}:{real_g})"
    else:
        kv, g = min(real_kv, 2), None
        d.set("num_global_key_value_heads", None, "kept null (full layers use num_key_value_heads)")
        kv_rule = "min(real, 2)"
    d.set("num_key_value_heads", kv, kv_rule)
    group = real_h // real_kv
    heads = kv * min(group, max(2, 4 // kv))
    d.set("num_attention_heads", heads, f"GQA group {heads // kv} (real {group}), at least 4 heads")
    ratio = real["global_head_dim"] // real["head_dim"]
    assert ratio * real["head_dim"] == real["global_head_dim"]
    head_dim = TINY_HEAD_DIM
    d.set("head_dim", head_dim, "shrunk")
    d.set("global_head_dim", head_dim * ratio, f"{ratio} x head_dim (as real)")
    # widths
    moe = bool(real.get("enable_moe_block"))
    if moe:
        d.set("intermediate_size", round(TINY_HIDDEN * real["intermediate_size"] / H),
              f"{real['intermediate_size']}/{H} of hidden (as real)")
        k = min(real["top_k_experts"], TINY_TOP_K_CAP)
        d.set("top_k_experts", k, "min(real, 3)")
        d.set("num_experts", 2 * k, "2 x top_k_experts")
        d.set("moe_intermediate_size", round(TINY_HIDDEN * real["moe_intermediate_size"] / H),
              f"{real['moe_intermediate_size']}/{H} of hidden (as real)")
    else:
        d.set("intermediate_size", TINY_DENSE_INTERMEDIATE, f"shrunk to hidden/4 (real {real['intermediate_size'] / H:g} x hidden)")
        for key in ("top_k_experts", "num_experts", "moe_intermediate_size"):
            if key in real:
                assert real[key] is None
                d.set(key, None, "kept null")
    if "hidden_size_per_layer_input" in real:
        P = real["hidden_size_per_layer_input"]
        d.set("hidden_size_per_layer_input", TINY_PLE if P else 0, "shrunk" if P else "kept 0 (no PLE)")
    d.set("sliding_window", TINY_WINDOW, "shrunk below the prompt lengths")
    d.set("max_position_embeddings", TINY_MAX_POS, "shrunk")
    if "expert_intermediate_size" in real:
        assert real["expert_intermediate_size"] is None
        d.drop("expert_intermediate_size", "null; not a transformers 5.14.1 Gemma4TextConfig field")
    return d.finish(), d.rows


def derive_vision_gemma4(real: dict) -> tuple[dict, list]:
    d = Derivation(real, "vision_config")
    hd_real = real["hidden_size"] // real["num_attention_heads"]
    assert real["head_dim"] == hd_real and real["num_key_value_heads"] == real["num_attention_heads"]
    pow2 = hd_real & (hd_real - 1) == 0
    hd = 8 if pow2 else 12  # 64 -> 8; 72 (not a power of 2) -> 12 (neither); both % 4 == 0 for the 2-D RoPE
    hidden = TINY_VISION_HEADS * hd
    d.keep("model_type", "use_clipped_linears", "standardize", "hidden_activation", "rms_norm_eps", "attention_bias",
           "attention_dropout", "rope_parameters", "pooling_kernel_size")
    d.set("hidden_size", hidden, f"{TINY_VISION_HEADS} heads x head_dim")
    d.set("num_attention_heads", TINY_VISION_HEADS, "shrunk")
    d.set("num_key_value_heads", TINY_VISION_HEADS, "= heads (as real)")
    d.set("head_dim", hd, f"= hidden/heads (as real: {hd_real}); {'a power of 2' if pow2 else 'not a power of 2'} as real")
    if "global_head_dim" in real:
        assert real["global_head_dim"] == real["head_dim"]
        d.set("global_head_dim", hd, "= head_dim (as real; unused by the tower)")
    d.set("intermediate_size", 2 * hidden, f"2 x hidden (real {real['intermediate_size'] / real['hidden_size']:.2f} x)")
    d.set("num_hidden_layers", TINY_VISION_LAYERS, "shrunk")
    d.set("patch_size", PATCH, "shrunk")
    d.set("position_embedding_size", TINY_POS_TABLE, "shrunk (> the fixture image's patch grid)")
    d.set("max_position_embeddings", TINY_MAX_POS, "shrunk")
    if "default_output_length" in real:
        d.set("default_output_length", SOFT_TOKENS, "shrunk to the processor's max_soft_tokens")
    return d.finish(), d.rows


def derive_vision_unified(real: dict) -> tuple[dict, list]:
    d = Derivation(real, "vision_config")
    assert real["mm_embed_dim"] == real["output_proj_dims"]
    d.keep("model_type", "pooling_kernel_size", "rms_norm_eps")
    d.set("mm_embed_dim", TINY_MM_EMBED, "shrunk")
    d.set("output_proj_dims", TINY_MM_EMBED, "= mm_embed_dim (as real)")
    d.set("mm_posemb_size", TINY_MM_POSEMB, "shrunk (> the fixture image's model-patch grid)")
    d.set("patch_size", PATCH, "shrunk")
    d.set("model_patch_size", PATCH * real["pooling_kernel_size"], "= patch_size x pooling_kernel_size (as real)")
    d.set("num_soft_tokens", SOFT_TOKENS, "shrunk to the processor's max_soft_tokens")
    return d.finish(), d.rows


def derive(real: dict) -> dict:
    """The tiny composite config dict, its text_config, and the derivation rows per section."""
    unified = real["model_type"] == "gemma4_unified"
    d = Derivation(real, "config")
    d.keep("model_type", "tie_word_embeddings")
    text, text_rows = derive_text(real["text_config"])
    d.set("text_config", text, "derived (below)")
    vision, vision_rows = (derive_vision_unified if unified else derive_vision_gemma4)(real["vision_config"])
    d.set("vision_config", vision, "derived (below)")
    if real.get("audio_config") is not None:
        d.set("audio_config", None, "dropped: audio is out of scope (audio_config null)")
    else:
        d.set("audio_config", None, "kept null")
    for key, tid in TOKEN_IDS.items():
        if key in real:
            d.set(key, tid, "make_fixtures' special id")
    if "eos_token_id" in real:
        d.set("eos_token_id", [EOS], f"[eos]: {real['eos_token_id'][1:]} (end of turn) has no tiny-vocabulary token")
    if "vision_soft_tokens_per_image" in real:
        d.set("vision_soft_tokens_per_image", SOFT_TOKENS, "shrunk to the processor's max_soft_tokens")
    composite = d.finish()
    return {"unified": unified, "composite": composite, "text": copy.deepcopy(text),
            "rows": {"config": d.rows, "text_config": text_rows, "vision_config": vision_rows}}


def read_real(model: str) -> dict:
    return json.loads((CONFIGS / MODELS[model]).read_text())


def fmt(v) -> str:
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        per = len(v) // max(1, v.count(F_))
        return f"{len(v)} x {{{per - 1}S 1F}}" if v == ([S_] * (per - 1) + [F_]) * (len(v) // per) else str(v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return json.dumps(v) if not isinstance(v, str) else v


def log_derivation(model: str, der: dict) -> None:
    log(f"== derivation {model} ({MODELS[model]}, {der['composite']['model_type']})")
    for section, rows in der["rows"].items():
        for key, real_v, tiny_v, rule in rows:
            if section != "config" or key not in ("text_config", "vision_config"):
                log(f"  {section}.{key}: {fmt(real_v)} -> {fmt(tiny_v)}  ({rule})")


def one_line(der: dict) -> str:
    t, v = der["text"], der["composite"]["vision_config"]
    types = t["layer_types"]
    per = len(types) // types.count(F_)
    parts = [f"{t['num_hidden_layers']} layers {{{per - 1}S 1F}}x{len(types) // per}"]
    if t.get("num_kv_shared_layers"):
        parts.append(f"{t['num_kv_shared_layers']} KV-shared")
    parts.append(f"heads {t['num_attention_heads']}/kv {t['num_key_value_heads']}"
                 + (f"/global kv {t['num_global_key_value_heads']}" if t.get("num_global_key_value_heads") else ""))
    parts.append(f"head_dim {t['head_dim']}/{t['global_head_dim']}")
    if t.get("attention_k_eq_v"):
        parts.append("k_eq_v")
    if t.get("hidden_size_per_layer_input"):
        parts.append(f"PLE {t['hidden_size_per_layer_input']}")
    if t.get("enable_moe_block"):
        parts.append(f"MoE {t['num_experts']}e top-{t['top_k_experts']} (expert {t['moe_intermediate_size']}, dense "
                     f"{t['intermediate_size']})")
    else:
        parts.append(f"MLP {t['intermediate_size']}" + (" double-wide" if t.get("use_double_wide_mlp") else ""))
    parts.append(f"window {t['sliding_window']}, bidir {t.get('use_bidirectional_attention')}")
    if der["unified"]:
        parts.append(f"vision: unified embedder mm_embed {v['mm_embed_dim']}, patch {v['patch_size']}, pooling "
                     f"{v['pooling_kernel_size']}, posemb {v['mm_posemb_size']}")
    else:
        flags = [f for f in ("use_clipped_linears", "standardize") if v.get(f)]
        parts.append(f"vision: {v['hidden_size']}x{v['num_hidden_layers']} layers, {v['num_attention_heads']} heads of "
                     f"{v['head_dim']}, MLP {v['intermediate_size']}, pooling {v['pooling_kernel_size']}, "
                     + (", ".join(flags) or "no clip/standardize"))
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# the two families: model construction (eager attention AND eager experts everywhere), weights
# ---------------------------------------------------------------------------------------------
def unified_new_model(cfg: dict, kind: str, experts: str = "eager"):
    """make_fixtures_gemma4.new_model for the unified classes (experts_implementation is recorded; the unified
    family has no experts)."""
    config = (Gemma4UnifiedConfig if kind == "vision" else Gemma4UnifiedTextConfig)(**copy.deepcopy(cfg))
    for c in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None)):
        if c is not None:
            c._attn_implementation = "eager"
            c._experts_implementation = experts
    model = (Gemma4UnifiedForConditionalGeneration if kind == "vision" else Gemma4UnifiedForCausalLM)(config).eval()
    g4.check_impl(model, experts)
    return model


def unified_load(ckpt_dir: Path, kind: str):
    cls = Gemma4UnifiedForConditionalGeneration if kind == "vision" else Gemma4UnifiedForCausalLM
    model = cls.from_pretrained(str(ckpt_dir), attn_implementation="eager", experts_implementation="eager",
                                dtype=torch.float32).eval()
    g4.check_impl(model)
    return model


class unified_models:
    """Context manager: make_fixtures_gemma4's proof helpers (Proofs, logits_with, common_text_proofs) build their
    models through g4.new_model; inside this block that is unified_new_model, so the same proofs run on the
    unified classes (identical module layout: model.language_model / model.model, layer names)."""

    def __enter__(self):
        self.saved = g4.new_model
        g4.new_model = unified_new_model
        return self

    def __exit__(self, *exc):
        g4.new_model = self.saved
        return False


class RealProofs(g4.Proofs):
    """make_fixtures_gemma4.Proofs with the labels its helpers hard-code for the gemma4-* fixtures corrected to
    this fixture's values (before they are logged or stored), and the double-wide-MLP proof skipped where the config
    has K/V sharing without use_double_wide_mlp (E4B)."""

    def run(self, label, **kw):
        if label.startswith("use_double_wide_mlp") and not self.text(self.cfg).get("use_double_wide_mlp"):
            # common_text_proofs runs this proof whenever K/V are shared (gemma4-text-ple has both features)
            log(f"    skip {label} (use_double_wide_mlp is false here)")
            return None
        return super().run(self.fix(label), **kw)

    def add(self, label, d):
        return super().add(self.fix(label), d)

    def fix(self, label: str) -> str:
        text = self.text(self.cfg)
        P = text.get("hidden_size_per_layer_input")
        if P:
            label = label.replace("hidden_size_per_layer_input 16 -> 0", f"hidden_size_per_layer_input {P} -> 0")
        return label


class patched_proofs:
    """Context manager: make_fixtures_gemma4.make_text instantiates g4.Proofs; inside this block that is RealProofs."""

    def __enter__(self):
        self.saved = g4.Proofs
        g4.Proofs = RealProofs
        return self

    def __exit__(self, *exc):
        g4.Proofs = self.saved
        return False


# ---------------------------------------------------------------------------------------------
# text fixtures
# ---------------------------------------------------------------------------------------------
TEXT_PROMPT_LEN = 24  # 3 sliding windows
TEXT_SEEDS = range(1, 80)


def make_text(model_name: str, der: dict, summary: dict) -> None:
    name = f"real-{model_name}-text"
    text = der["text"]
    prompt_seed = 40 + list(MODELS).index(model_name)
    if not der["unified"]:
        # gemma4_text: make_fixtures_gemma4.make_text (seed search, MoE routing separation, oracle, proofs,
        # conditioning, export, ONNX numbers, MoE localisation), with this fixture's proof labels
        with patched_proofs():
            g4.make_text(name, text, TEXT_SEEDS, summary, prompt_seed=prompt_seed, prompt_len=TEXT_PROMPT_LEN)
        return
    make_text_unified(name, text, summary, prompt_seed)


def make_text_unified(name: str, cfg: dict, summary: dict, prompt_seed: int) -> None:
    """gemma4_unified_text (Gemma4UnifiedForCausalLM): make_fixtures_gemma4.make_text's steps with the unified classes
    and make_fixtures' unified helpers (weights, capture, conditioning)."""
    fdir = FIXTURES / name
    log(f"== {name}")
    kind = "text"
    chosen = None
    for seed in TEXT_SEEDS:
        torch.manual_seed(0)
        model = unified_new_model(cfg, kind)
        mf.init_weights(model, seed)

        def gen(text_ids):
            ids = torch.tensor([[BOS] + text_ids], dtype=torch.long)
            with torch.no_grad():
                return mf.hf_generate(model, input_ids=ids, attention_mask=torch.ones_like(ids))
        try:
            text_ids, _, _ = g4.choose_prompt(mf.text_candidates(prompt_seed, 20, TEXT_PROMPT_LEN - 1), gen)
        except RuntimeError:
            log(f"  weight seed {seed}: no non-degenerate continuation; next seed")
            continue
        chosen = seed
        break
    assert chosen is not None
    mf.save_checkpoint(model, fdir / "checkpoint")
    del model
    model = unified_load(fdir / "checkpoint", kind)
    state_dict = {k: v.clone() for k, v in model.state_dict().items()}
    input_ids = torch.tensor([[BOS] + text_ids], dtype=torch.long)
    S = input_ids.shape[1]
    fwd_inputs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    with torch.no_grad():
        greedy, step_logits = mf.hf_generate(model, **fwd_inputs)
        logits, inputs_embeds = mf.capture_inputs_embeds(model, kind, **fwd_inputs, use_cache=False)
    margins = g4.greedy_margins(step_logits)
    log(f"  weight seed {chosen}; prompt S={S} ({S / cfg['sliding_window']:.1f} sliding windows), ids "
        f"{input_ids[0].tolist()}; greedy {greedy[0].tolist()}")
    log(f"  greedy step margins (top1 - top2): min {min(margins):.3f} [{', '.join(f'{x:.3f}' for x in margins)}]")
    assert maxdiff(step_logits[0], logits[0, -1]) < 1e-4
    log(f"  logits range [{float(logits.min()):.2f}, {float(logits.max()):.2f}], std {float(logits.std()):.2f}")
    log("  feature-flag proofs (HF, forward(), prompt above):")
    with unified_models():
        p = RealProofs(kind, cfg, state_dict, fwd_inputs, logits)
        g4.common_text_proofs(p)
        smallest = p.smallest()
    save_tensors(fdir / "inputs.safetensors", {"input_ids": input_ids}, {"format": "pt"})
    paths = {
        "logits": "Gemma4UnifiedForCausalLM.forward(input_ids, attention_mask=ones, use_cache=False).logits "
                  "(Gemma4UnifiedTextModel.forward: no image block, plain causal / sliding-causal masks)",
        "inputs_embeds": "Gemma4UnifiedTextModel.embed_tokens(input_ids) output (x sqrt(hidden) included)",
        **g4.GEN_PATHS,
    }
    oracle = {"logits": logits, "inputs_embeds": inputs_embeds, "greedy_tokens": greedy.long(), "step_logits": step_logits}
    save_tensors(fdir / "oracle.safetensors", oracle, g4.meta_common(paths, p.res, "none", "none"))
    info = {"weight_seed": chosen, "S": S, "greedy_margins": margins, "config": cfg, "proofs": p.res,
            "smallest_proof": smallest}
    with torch.no_grad():
        info["conditioning"] = mf.report_conditioning(model, kind, fdir, fwd_inputs, logits)
    err = g4.try_export(fdir / "checkpoint", fdir / "onnx", name)
    info["export_error"] = err
    if err is None:
        info["onnx"] = g4.report_onnx(f"{name} f32", fdir / "onnx", oracle, input_ids=input_ids)
    info["sizes"] = g4.file_sizes(fdir)
    summary[name] = info


# ---------------------------------------------------------------------------------------------
# vision fixtures: ONE image, inputs from the real HF processor
# ---------------------------------------------------------------------------------------------
VISION_SEEDS = range(1, 80)
TEXT_WORDS, WORDS_BEFORE = 12, 3  # [bos] t*3 [boi] [image]*n [eoi] t*9: the trailing text is longer than the window
UNIFIED_IMAGE_KWARGS = {"patch_size": PATCH, "pooling_kernel_size": 3, "max_soft_tokens": SOFT_TOKENS}


def build_processor(unified: bool):
    """The real HF processor: Gemma4Processor (make_fixtures_gemma4.build_processor) or Gemma4UnifiedProcessor
    (constructed as make_fixtures.make_processor_fixture does), over make_fixtures.build_tokenizer()."""
    if not unified:
        return g4.build_processor(), g4.IMAGE_PROCESSOR_KWARGS
    from transformers import Gemma4UnifiedProcessor
    from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import (
        Gemma4UnifiedAudioFeatureExtractor,
    )
    from transformers.models.gemma4_unified.video_processing_gemma4_unified import Gemma4UnifiedVideoProcessor

    tokenizer = mf.build_tokenizer()
    for tid, attr in ((IMAGE_TOKEN, "image_token_id"), (BOI, "boi_token_id"), (EOI, "eoi_token_id")):
        assert getattr(tokenizer, attr) == tid, attr
    proc = Gemma4UnifiedProcessor(feature_extractor=Gemma4UnifiedAudioFeatureExtractor(),
                                  image_processor=Gemma4UnifiedImageProcessor(**UNIFIED_IMAGE_KWARGS),
                                  tokenizer=tokenizer, video_processor=Gemma4UnifiedVideoProcessor())
    return proc, UNIFIED_IMAGE_KWARGS


def prompt_text(proc, text_ids) -> str:
    words = [mf.vocab_word(i) for i in text_ids]
    return " ".join(words[:WORDS_BEFORE]) + f" {proc.image_token} " + " ".join(words[WORDS_BEFORE:])


def processor_inputs(proc, text_ids, images) -> dict:
    """processor(images=[[a]], text=[text]) -> the forward inputs (attention_mask all ones, asserted)."""
    out = proc(images=[images], text=[prompt_text(proc, text_ids)], return_tensors="pt")
    t = {k: out[k].contiguous() for k in g4.PROCESSOR_TENSORS}
    ids = t["input_ids"]
    n = int((ids == IMAGE_TOKEN).sum())
    expect = [BOS] + text_ids[:WORDS_BEFORE] + [BOI] + [IMAGE_TOKEN] * n + [EOI] + text_ids[WORDS_BEFORE:]
    assert ids[0].tolist() == expect, "unexpected processor token layout"
    assert torch.equal(t["mm_token_type_ids"], (ids == IMAGE_TOKEN).long())
    assert bool((out["attention_mask"] == 1).all())
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": t["pixel_values"],
            "image_position_ids": t["image_position_ids"], "mm_token_type_ids": t["mm_token_type_ids"]}


def routed_inputs(inputs: dict, greedy: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """prompt + greedy tokens but the last (every token generate() routes), with the image inputs."""
    ids = torch.cat([inputs["input_ids"], greedy[:, :-1]], dim=1)
    mm = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(greedy[:, :-1])], dim=1)
    return ids, {"pixel_values": inputs["pixel_values"], "image_position_ids": inputs["image_position_ids"],
                 "mm_token_type_ids": mm}


def separate_routing_mm(model, inputs: dict, seed: int, min_gap: float = g4.MOE_MIN_GAP):
    """make_fixtures_gemma4.separate_routing (same re-draw law and seeds) on a multimodal prompt: router_gaps sees the
    image inputs too (separate_routing has no way to pass them). Returns (greedy tokens, number of re-draws)."""
    layers = g4.text_model(model, "vision").layers
    redraws = 0
    for rnd in range(8):
        with torch.no_grad():
            greedy, _ = mf.hf_generate(model, **inputs)
        ids, extra = routed_inputs(inputs, greedy)
        if g4.router_gaps(model, "vision", ids, extra)["min_gap_k_vs_k1"] >= min_gap:
            return greedy, redraws
        for li, layer in enumerate(layers):
            for attempt in range(1000):
                if g4.router_gaps(model, "vision", ids, extra)["per_layer"][li] >= min_gap:
                    break
                g = torch.Generator().manual_seed(seed * 1_000_003 + rnd * 100_003 + li * 10_007 + attempt)
                w = layer.router.proj.weight
                with torch.no_grad():
                    w.copy_(torch.randn(w.shape, generator=g) * g4.ROUTER_SCORE_STD)
                redraws += 1
            else:
                raise RuntimeError(f"could not separate the routing of layer {li}")
    raise RuntimeError("routing separation did not converge")


def unified_vision_proofs(p: RealProofs) -> None:
    """The unified embedder's features (make_fixtures_gemma4.vision_proofs covers the gemma4 tower)."""
    def pad_row_zero(sd, model):
        key = "model.language_model.embed_tokens.weight"
        sd[key] = sd[key].clone()
        sd[key][PAD] = 0
    p.run("embed_tokens pad row -> 0 (invariant: image features overwrite the placeholder rows, expect 0)",
          edit_sd=pad_row_zero)

    def ln_eps(model):
        for mod in model.model.embed_vision.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.eps = 1e-6
    p.run("vision LayerNorm eps 1e-5 (PyTorch default) -> 1e-6", patch=ln_eps)

    def pos_zero(sd, model):
        sd["model.embed_vision.pos_embedding"] = torch.zeros_like(sd["model.embed_vision.pos_embedding"])
    p.run("vision pos_embedding -> 0", edit_sd=pos_zero)

    def pos_swap(sd, model):
        sd["model.embed_vision.pos_embedding"] = sd["model.embed_vision.pos_embedding"].flip(1).clone()
    p.run("vision pos_embedding x <-> y axes swapped", edit_sd=pos_swap)

    def no_pre_norm(model):
        model.model.embed_vision.multimodal_embedder.embedding_pre_projection_norm = torch.nn.Identity()
    p.run("vision scale-free RMSNorm before the projection removed", patch=no_pre_norm)


def make_vision(model_name: str, der: dict, summary: dict) -> None:
    name = f"real-{model_name}-vision"
    fdir = FIXTURES / name
    log(f"== {name}")
    unified = der["unified"]
    kind = "vision"
    cfg = der["composite"]
    text, vc = cfg["text_config"], cfg["vision_config"]
    ple = bool(text.get("hidden_size_per_layer_input"))
    moe = bool(text.get("enable_moe_block"))
    bidir = text.get("use_bidirectional_attention") == "vision"
    default_scope = "all-layers" if unified else ("sliding-windowed" if bidir else "none")
    new_model = unified_new_model if unified else g4.new_model
    init_weights = mf.init_weights if unified else g4.init_weights

    img_paths = mf.make_images(fdir / "images")
    for extra in img_paths[1:]:
        extra.unlink()  # one image: images/a.png
    img_paths = img_paths[:1]
    images = mf.load_images(img_paths)
    proc, proc_kwargs = build_processor(unified)
    assert proc_kwargs["patch_size"] == vc["patch_size"] and proc_kwargs["pooling_kernel_size"] == vc["pooling_kernel_size"]
    candidates = list(mf.text_candidates(50 + list(MODELS).index(model_name), 30, TEXT_WORDS))
    px = processor_inputs(proc, candidates[0], images)
    pixel_values, image_position_ids = px["pixel_values"], px["image_position_ids"]
    n_valid = int((~(image_position_ids[0] == -1).all(-1)).sum())
    grid = (int(image_position_ids[0, :n_valid, 0].max()) + 1, int(image_position_ids[0, :n_valid, 1].max()) + 1)
    table = vc["mm_posemb_size"] if unified else vc["position_embedding_size"]
    assert max(grid) <= table and n_valid < pixel_values.shape[1]
    log(f"  image {images[0].size} (W,H) -> {'model-patch' if unified else 'patch'} grid (W,H) {grid}, valid patches "
        f"{n_valid} of {pixel_values.shape[1]}; pixel_values {tuple(pixel_values.shape)}")

    chosen, clip_frac, redraws = None, None, None
    for seed in VISION_SEEDS:
        torch.manual_seed(0)
        model = new_model(cfg, kind)
        init_weights(model, seed)
        if vc.get("use_clipped_linears"):
            clip_frac = g4.calibrate_clips(model, pixel_values, image_position_ids, seed + 1000)
        if vc.get("standardize"):
            g4.calibrate_standardize(model, pixel_values, image_position_ids, seed + 2000)

        def gen(text_ids):
            with torch.no_grad():
                return mf.hf_generate(model, **processor_inputs(proc, text_ids, images))
        try:
            text_ids, greedy, sl = g4.choose_prompt(candidates, gen)
        except RuntimeError:
            log(f"  weight seed {seed}: no non-degenerate continuation; next seed")
            continue
        if moe:
            inputs = processor_inputs(proc, text_ids, images)
            try:
                greedy, redraws = separate_routing_mm(model, inputs, seed)
            except RuntimeError as e:
                log(f"  weight seed {seed}: {e}; next seed")
                continue
            log(f"  weight seed {seed}: router.proj re-drawn {redraws}x to separate the top-k boundary")
            greedy, sl = gen(text_ids)
            if not g4.good_continuation(greedy, sl):
                log(f"  weight seed {seed}: continuation degenerate after re-drawing routers; next seed")
                continue
        chosen = seed
        break
    assert chosen is not None, "no weight seed satisfied the fixture's requirements"
    if clip_frac is not None:
        fr_in, fr_out = [v[0] for v in clip_frac.values()], [v[1] for v in clip_frac.values()]
        log(f"  clip bounds on {len(clip_frac)} clippable linears: fraction of valid-patch values clipped "
            f"inputs {min(fr_in):.3f}..{max(fr_in):.3f}, outputs {min(fr_out):.3f}..{max(fr_out):.3f}")
    if vc.get("standardize"):
        vt = model.model.vision_tower
        log(f"  std_bias range [{float(vt.std_bias.min()):.3f}, {float(vt.std_bias.max()):.3f}], std_scale range "
            f"[{float(vt.std_scale.min()):.3f}, {float(vt.std_scale.max()):.3f}]")
    mf.save_checkpoint(model, fdir / "checkpoint")
    del model
    model = unified_load(fdir / "checkpoint", kind) if unified else g4.load_checkpoint(fdir / "checkpoint", kind)
    state_dict = {k: v.clone() for k, v in model.state_dict().items()}

    fwd_inputs = processor_inputs(proc, text_ids, images)
    input_ids, mm = fwd_inputs["input_ids"], fwd_inputs["mm_token_type_ids"]
    S = input_ids.shape[1]
    n_soft = int((input_ids == IMAGE_TOKEN).sum())
    assert n_soft > text["sliding_window"] and TEXT_WORDS - WORDS_BEFORE > text["sliding_window"]
    with torch.no_grad():
        greedy, step_logits = mf.hf_generate(model, **fwd_inputs)
    margins = g4.greedy_margins(step_logits)
    log(f"  weight seed {chosen}; prompt S={S} = [bos] t*{WORDS_BEFORE} [boi] [image]*{n_soft} [eoi] "
        f"t*{TEXT_WORDS - WORDS_BEFORE}, text ids {text_ids}; greedy {greedy[0].tolist()}")
    log(f"  greedy step margins (top1 - top2): min {min(margins):.3f} [{', '.join(f'{x:.3f}' for x in margins)}]")
    attn, pos = fwd_inputs["attention_mask"], torch.arange(S)[None]
    if unified:
        with torch.no_grad():
            logits, inputs_embeds = mf.capture_inputs_embeds(model, kind, **fwd_inputs, use_cache=False)
        seen = {"inputs_embeds": inputs_embeds}
    else:
        logits, seen = g4.forward_logits(model, kind, fwd_inputs)
        inputs_embeds = seen["inputs_embeds"]
    with torch.no_grad():
        image_features = model.model.get_image_features(pixel_values, image_position_ids).pooler_output
        masks = (mf.scope_masks if unified else g4.scope_masks)(model, inputs_embeds, attn, pos, mm)
        scope_logits = {s: model(**dict(fwd_inputs, attention_mask=m), use_cache=False).logits for s, m in masks.items()}
    assert image_features.shape == (n_soft, text["hidden_size"])
    assert torch.equal(scope_logits[default_scope], logits), f"forward() is expected to use the {default_scope} scope"
    assert maxdiff(step_logits[0], logits[0, -1]) < 1e-4
    gen_scopes = (mf.verify_generate_scopes if unified else g4.verify_generate_scopes)(model, fwd_inputs, scope_logits)
    for path, inf in gen_scopes.items():
        log(f"  generate({path} cache) prefill scope = {inf['scope']}  (step0 vs scopes: "
            + ", ".join(f"{s} {d:.2e}" for s, d in inf["diffs"].items())
            + f"; create_masks_for_vision_model calls {inf['vision_mask_fn_calls']})")
    greedy_scope = gen_scopes["dynamic"]["scope"]
    scope_diffs = {f"{a} vs {b}": maxdiff(scope_logits[a], scope_logits[b])
                   for a, b in (("all-layers", "sliding-windowed"), ("all-layers", "none"), ("sliding-windowed", "none"))}
    log("  scope differences (HF logits, all positions): " + ", ".join(f"{k} {v:.4f}" for k, v in scope_diffs.items()))
    assert min(scope_diffs.values()) > 1e-2
    log(f"  logits range [{float(logits.min()):.2f}, {float(logits.max()):.2f}], std {float(logits.std()):.2f}; "
        f"image_features rms {float(image_features.pow(2).mean().sqrt()):.3f}")
    router = None
    if moe:
        ids, extra = routed_inputs(fwd_inputs, greedy)
        router = g4.router_gaps(model, kind, ids, extra)
        log(f"  router: smallest p_k - p_(k+1) over all {ids.shape[1]} routed tokens x {text['num_hidden_layers']} "
            f"layers = {router['min_gap_k_vs_k1']:.3e} (per layer " + ", ".join(f"{g:.2e}" for g in router["per_layer"])
            + f"); smallest gap inside the top-k {router['min_gap_within_topk']:.2e}")

    log("  feature-flag proofs (HF, forward(), prompt above):")
    p = RealProofs(kind, cfg, state_dict, fwd_inputs, logits)
    info: dict = {}
    if unified:
        with unified_models():
            g4.common_text_proofs(p)
            unified_vision_proofs(p)
            flip_target = None if bidir else "vision"
            p.run(f"use_bidirectional_attention {text.get('use_bidirectional_attention')} -> {flip_target}",
                  edit_cfg=lambda c: c["text_config"].update(use_bidirectional_attention=flip_target))
    else:
        g4.common_text_proofs(p)
        if ple:
            g4.ple_proofs(p)
        if moe:
            g4.moe_proofs(p, info)
        g4.vision_proofs(p)
        flip_target = None if bidir else "vision"
        p.run(f"use_bidirectional_attention {text.get('use_bidirectional_attention')} -> {flip_target}",
              edit_cfg=lambda c: c["text_config"].update(use_bidirectional_attention=flip_target))
    for a in ("all-layers", "sliding-windowed", "none"):
        if a != default_scope:
            p.add(f"bidirectional scope {default_scope} -> {a}", maxdiff(scope_logits[a], logits))
    smallest = p.smallest()

    img_proc = "Gemma4UnifiedImageProcessor" if unified else "Gemma4ImageProcessor"
    proc_name = type(proc).__name__
    meta_in = {
        "format": "pt",
        "prompt_layout": f"[bos] t*{WORDS_BEFORE} [boi] [image]*n0 [eoi] t*{TEXT_WORDS - WORDS_BEFORE}",
        "images": json.dumps([str(q.relative_to(fdir)) for q in img_paths]),
        "image_processor": f"transformers {img_proc}",
        "image_processor_kwargs": json.dumps(proc_kwargs, sort_keys=True),
        "num_soft_tokens_per_image": json.dumps([n_soft]),
        "mm_token_type_ids": "1 where input_ids == image_token_id (HF ProcessorMixin.create_mm_token_type_ids)",
        "source": f"transformers {proc_name}.__call__ (see processor.json)",
    }
    save_tensors(fdir / "inputs.safetensors", {k: fwd_inputs[k] for k in g4.PROCESSOR_TENSORS}, meta_in)
    paths = vision_paths(unified, bidir, ple)
    oracle = {"logits": logits, "logits_all_layers": scope_logits["all-layers"],
              "logits_sliding_windowed": scope_logits["sliding-windowed"], "logits_none": scope_logits["none"],
              "image_features": image_features, "inputs_embeds": inputs_embeds, "greedy_tokens": greedy.long(),
              "step_logits": step_logits}
    if ple:
        oracle["per_layer_inputs"] = seen["per_layer_inputs"]
    extra = {"generate_scopes": json.dumps({k: v["scope"] for k, v in gen_scopes.items()}, sort_keys=True),
             "scope_diffs_max_abs_logit_diff": json.dumps({k: round(v, 6) for k, v in scope_diffs.items()}, sort_keys=True)}
    if clip_frac is not None:
        extra["clip_fraction_clipped"] = json.dumps({k: [round(a, 4), round(b, 4)] for k, (a, b) in clip_frac.items()},
                                                    sort_keys=True)
    if moe:
        extra["router_min_gap_k_vs_k1"] = f"{router['min_gap_k_vs_k1']:.6e}"
        extra["grouped_mm_vs_eager_max_abs_logit_diff"] = f"{info['grouped_mm_vs_eager_max_abs_logit_diff']:.6e}"
    save_tensors(fdir / "oracle.safetensors", oracle, g4.meta_common(paths, p.res, default_scope, greedy_scope, extra))
    info.update({"weight_seed": chosen, "S": S, "n_soft_tokens": n_soft, "n_valid_patches": n_valid, "grid": grid,
                 "greedy_margins": margins, "proofs": p.res, "scope_diffs": scope_diffs, "greedy_scope": greedy_scope,
                 "default_scope": default_scope, "generate_scopes": gen_scopes, "clip_fraction": clip_frac,
                 "router_gaps": router, "router_redraws": redraws, "config": cfg, "smallest_proof": smallest})
    if unified:
        with torch.no_grad():
            info["conditioning"] = mf.report_conditioning(model, kind, fdir, fwd_inputs, logits)
    else:
        info["conditioning"] = g4.report_conditioning(model, kind, fdir, fwd_inputs, oracle)
    write_processor_files(fdir, proc, proc_kwargs, text_ids, img_paths, fwd_inputs)

    err = g4.try_export(fdir / "checkpoint", fdir / "onnx", name)
    info["export_error"] = err
    if err is None:
        scopes = {s: scope_logits[s] for s in ("all-layers", "sliding-windowed", "none")}
        info["onnx"] = g4.report_onnx(f"{name} f32", fdir / "onnx", oracle, pixel_values, image_position_ids, input_ids,
                                      scopes)
        info["localisation"] = localise(name, model, fdir, cfg, state_dict, fwd_inputs, oracle, info["onnx"], unified)
    info["sizes"] = g4.file_sizes(fdir)
    summary[name] = info


def vision_paths(unified: bool, bidir: bool, ple: bool) -> dict:
    if unified:
        model_fwd = ("Gemma4UnifiedForConditionalGeneration.forward(input_ids, attention_mask=ones, pixel_values, "
                     "image_position_ids, mm_token_type_ids, use_cache=False).logits; Gemma4UnifiedModel.forward builds "
                     "masks with masking_utils.create_masks_for_generate(block_sequence_ids=...) = all-layers scope")
        sliding = ("forward() with the mask dict from Gemma4UnifiedForConditionalGeneration.create_masks_for_generate("
                   "mm_token_type_ids=...) -> create_masks_for_vision_model: full = causal, sliding = window AND (causal "
                   "OR block); identical masks to models/gemma4 create_masks_for_vision_model (asserted)")
        feats = ("Gemma4UnifiedModel.get_image_features(pixel_values, image_position_ids).pooler_output (padding "
                 "patches dropped)")
        embeds = ("inputs_embeds argument received by Gemma4UnifiedTextModel.forward during forward() (embed_tokens(ids "
                  "with image ids -> pad) * sqrt(hidden), image features masked_scatter'ed)")
    else:
        scope = ("create_masks_for_vision_model (use_bidirectional_attention 'vision' and mm_token_type_ids given) = "
                 "sliding-windowed scope" if bidir else
                 "masking_utils.create_masks_for_generate (use_bidirectional_attention null) = none scope")
        model_fwd = ("Gemma4ForConditionalGeneration.forward(input_ids, attention_mask=ones, pixel_values, "
                     f"image_position_ids, mm_token_type_ids, use_cache=False).logits; Gemma4Model.forward builds masks "
                     f"with {scope}")
        sliding = ("forward() with the mask dict from modeling_gemma4.create_masks_for_vision_model(block_sequence_ids="
                   "get_block_sequence_ids_for_mask(mm_token_type_ids)): full = causal, sliding = window AND (causal OR "
                   "block)")
        feats = ("Gemma4Model.get_image_features(pixel_values, image_position_ids).pooler_output (padding patches "
                 "dropped; embed_vision applied)")
        embeds = ("inputs_embeds argument received by the language model (Gemma4TextModel.forward) during forward(): "
                  "embed_tokens(ids with image/video/audio ids -> pad) * sqrt(hidden), image features masked_scatter'ed")
    paths = {
        "logits": model_fwd,
        "logits_all_layers": "forward() with the mask dict from masking_utils.create_masks_for_generate(config.text_config, "
                             "block_sequence_ids=get_block_sequence_ids_for_mask(mm_token_type_ids)): block OR'd into "
                             "full and sliding masks, unbounded by the window (Gemma4UnifiedModel.forward's composition)",
        "logits_sliding_windowed": sliding,
        "logits_none": "forward() with the mask dict from masking_utils.create_masks_for_generate without blocks: plain "
                       "causal / sliding-causal",
        "image_features": feats,
        "inputs_embeds": embeds,
        **g4.GEN_PATHS,
    }
    if ple:
        paths["per_layer_inputs"] = ("language model's project_per_layer_inputs(inputs_embeds, per_layer_inputs) output "
                                     "[1, S, layers, ple_dim]: the token part is looked up from the ids with placeholders "
                                     "-> pad (Gemma4Model.forward), the context part projects the merged inputs_embeds "
                                     "(image features at image positions)")
    return paths


def write_processor_files(fdir: Path, proc, proc_kwargs: dict, text_ids, img_paths, inputs: dict) -> None:
    """The processor's save_pretrained files (tokenizer.json, tokenizer_config.json, processor_config.json) into
    checkpoint/, and processor.json: the call that produced inputs.safetensors (re-run here and asserted equal)."""
    text = prompt_text(proc, text_ids)
    again = processor_inputs(proc, text_ids, mf.load_images(img_paths))
    assert all(torch.equal(again[k], inputs[k]) for k in g4.PROCESSOR_TENSORS)
    with tempfile.TemporaryDirectory() as tmp:
        proc.save_pretrained(tmp)
        for f in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
            shutil.copyfile(Path(tmp) / f, fdir / "checkpoint" / f)
            os.chmod(fdir / "checkpoint" / f, 0o644)
    name = type(proc).__name__
    desc = g4.processor_desc(fdir, text, img_paths, "processor(images=[[a]], text=[text], **call_kwargs)",
                             {"return_tensors": "pt"},
                             {"equals_inputs_safetensors": True,
                              "output": "inputs.safetensors (the processor's output, bit for bit)"})
    desc["image_processor_kwargs"] = proc_kwargs
    if name != "Gemma4Processor":
        desc["processor_class"] = name
        desc["files"] = desc["files"].replace("Gemma4Processor", name)
        desc["constructor"] = (f"{name}(feature_extractor=Gemma4UnifiedAudioFeatureExtractor(), image_processor="
                               "Gemma4UnifiedImageProcessor(**image_processor_kwargs), tokenizer=<tokenizer.json>, "
                               "video_processor=Gemma4UnifiedVideoProcessor())")
    (fdir / "processor.json").write_text(json.dumps(desc, indent=2) + "\n")
    log(f"  processor: {name} on {text!r} -> inputs.safetensors (re-run: equal); files saved in checkpoint/")


# ---------------------------------------------------------------------------------------------
# localisation of ONNX-vs-HF disagreements (informative; HF patched until it reproduces the export)
# ---------------------------------------------------------------------------------------------
def decoder_fed_hf(pipe, inputs: dict, oracle: dict) -> torch.Tensor:
    extra = {"inputs_embeds": oracle["inputs_embeds"].numpy()}
    if "per_layer_inputs" in oracle:
        ple = oracle["per_layer_inputs"]
        extra["per_layer_inputs"] = ple.reshape(ple.shape[0], ple.shape[1], -1).numpy()
    ids = inputs["input_ids"]
    return torch.from_numpy(pipe.step_g4(ids.numpy(), pipe._empty_past(), 0, extra)[0])


def localise(name, model, fdir, cfg, state_dict, inputs, oracle, onnx_res, unified: bool) -> dict:
    text, vc = cfg["text_config"], cfg["vision_config"]
    pipe = g4.Gemma4OrtPipeline(fdir / "onnx")
    scopes = ("all-layers", "sliding-windowed", "none")
    if not unified:
        loc = g4.localise_vision(name, model, fdir, cfg, state_dict, inputs, oracle, onnx_res)
        if not text.get("enable_moe_block"):
            return loc
        # MoE beside the vision path: the decoder cannot match any scope until HF also computes the MoE as mobius does
        lo = decoder_fed_hf(pipe, inputs, oracle)
        masks = g4.scope_masks(model, oracle["inputs_embeds"], inputs["attention_mask"],
                               torch.arange(inputs["input_ids"].shape[1])[None], inputs["mm_token_type_ids"])
        moe_patch = lambda m: g4.mobius_moe_patches(m, "vision")  # noqa: E731
        hf_moe = {s: g4.logits_with("vision", cfg, state_dict, dict(inputs, attention_mask=masks[s]), patch=moe_patch)
                  for s in scopes}
        for s in scopes:
            loc[f"decoder fed HF inputs_embeds vs HF (MoE as mobius) logits_{s}"] = maxdiff(lo, hf_moe[s])
        best = min(scopes, key=lambda s: loc[f"decoder fed HF inputs_embeds vs HF (MoE as mobius) logits_{s}"])
        loc["decoder scope with MoE as mobius (closest)"] = best

        def std_off(sd, m):
            for key in list(sd):
                if key.endswith("std_bias"):
                    sd[key] = torch.zeros_like(sd[key])
                elif key.endswith("std_scale"):
                    sd[key] = torch.ones_like(sd[key])
        hf_all = g4.logits_with("vision", cfg, state_dict, dict(inputs, attention_mask=masks[best]), patch=moe_patch,
                                edit_sd=std_off if vc.get("standardize") else None)
        r = pipe.prefill_and_generate(inputs["input_ids"], 1, inputs["pixel_values"], inputs["image_position_ids"])
        label = (f"ONNX pipeline vs HF with {best} masks, MoE as mobius"
                 + (" and standardize off" if vc.get("standardize") else ""))
        loc[label] = maxdiff(torch.from_numpy(r["prefill_logits"]), hf_all)
        for k in list(loc)[-5:]:
            v = loc[k]
            log(f"  [localisation] {k}: {v:.3e}" if isinstance(v, float) else f"  [localisation] {k}: {v}")
        return loc
    # unified: decoder fed HF's inputs_embeds per scope; the vision embedder with mobius's LayerNorm eps (1e-6)
    loc: dict = {}
    lo = decoder_fed_hf(pipe, inputs, oracle)
    for s in scopes:
        loc[f"decoder fed HF inputs_embeds vs HF logits_{s}"] = maxdiff(lo, oracle[f"logits_{s.replace('-', '_')}"])
    best = min(scopes, key=lambda s: loc[f"decoder fed HF inputs_embeds vs HF logits_{s}"])
    loc["decoder scope (closest)"] = best
    masks = mf.scope_masks(model, oracle["inputs_embeds"], inputs["attention_mask"],
                           torch.arange(inputs["input_ids"].shape[1])[None], inputs["mm_token_type_ids"])

    def eps_1e6(m):
        for mod in m.model.embed_vision.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.eps = 1e-6
    with unified_models():
        m = g4.new_model(cfg, "vision")
    m.load_state_dict({k: v for k, v in state_dict.items()}, strict=False)
    m.tie_weights()
    eps_1e6(m)
    with torch.no_grad():
        feats_eps = m.model.get_image_features(inputs["pixel_values"], inputs["image_position_ids"]).pooler_output
        logits_eps = m(**dict(inputs, attention_mask=masks[best]), use_cache=False).logits
    feats_onnx = torch.from_numpy(pipe.image_features(inputs["pixel_values"], inputs["image_position_ids"]))
    loc["vision_encoder vs HF image_features with LayerNorm eps 1e-6"] = maxdiff(feats_onnx, feats_eps)
    r = pipe.prefill_and_generate(inputs["input_ids"], 1, inputs["pixel_values"], inputs["image_position_ids"])
    loc[f"ONNX pipeline vs HF with {best} masks and vision LayerNorm eps 1e-6"] = maxdiff(
        torch.from_numpy(r["prefill_logits"]), logits_eps)
    for k, v in loc.items():
        log(f"  [localisation] {k}: {v:.3e}" if isinstance(v, float) else f"  [localisation] {k}: {v}")
    return loc


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def sha_listing() -> list[str]:
    out = []
    for d in OWNED:
        for q in sorted((FIXTURES / d).rglob("*")):
            if q.is_file():
                out.append(f"{hashlib.sha256(q.read_bytes()).hexdigest()}  {q.relative_to(FIXTURES)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="also write the printed log here")
    ap.add_argument("--summary", type=Path, help="write the numbers as JSON here")
    ap.add_argument("--only", choices=OWNED, action="append", help="regenerate these fixtures only")
    ap.add_argument("--configs-only", action="store_true", help="print the derivations and exit")
    args = ap.parse_args()
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, mobius-onnx {g4.mobius_version()}")
    ders = {m: derive(read_real(m)) for m in MODELS}
    for m, der in ders.items():
        log_derivation(m, der)
        log(f"  => {one_line(der)}")
    if args.configs_only:
        return 0
    only = set(args.only or OWNED)
    summary: dict = {"derivations": {m: {"one_line": one_line(d), "rows": d["rows"]} for m, d in ders.items()}}
    for m, der in ders.items():
        for kind, make in (("text", make_text), ("vision", make_vision)):
            name = f"real-{m}-{kind}"
            if name not in only:
                continue
            if (FIXTURES / name).exists():
                shutil.rmtree(FIXTURES / name)
            make(m, der, summary)
            log(f"  [{name}] size {sum(summary[name]['sizes'].values())} B in {len(summary[name]['sizes'])} files")
    log("== sha256")
    for line in sha_listing():
        log("  " + line)
    if args.report:
        args.report.write_text("\n".join(mf.REPORT) + "\n")
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
