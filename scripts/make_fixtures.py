#!/usr/bin/env python3
"""Generate the committed test fixtures under fixtures/ (see fixtures/README.md).

Run through scripts/make-fixtures.sh, which provides the pinned venv (torch, transformers 5.14.1,
mobius-onnx 0.1.0, onnxruntime 1.31.1). Tests never need Python; this script only regenerates
fixtures. Everything is seeded and single-threaded: two runs give byte-identical files.

What it does, per fixture:
  1. builds a tiny random HF checkpoint (weights scaled so every feature flag matters),
  2. exports it with `python -m mobius build --config <checkpoint> <onnx> --dtype ...`,
  3. computes HF oracle tensors (eager, float32) through the HF code paths named in the metadata,
  4. proves that each feature flag changes the HF logits (max |diff| printed), and prints the
     fixture's float32 conditioning (report_conditioning: 1-ulp inputs_embeds perturbation, and HF
     with ATEN_CPU_CAPABILITY=default vs the oracle),
  5. runs the exports in Python onnxruntime and prints ONNX-vs-HF differences (informative only:
     the exporter may disagree with HF, and nothing here is tuned to make them agree).
The summary (numbers, ONNX I/O) is printed and also written to --report (default: none).
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    Gemma4UnifiedConfig,
    Gemma4UnifiedForCausalLM,
    Gemma4UnifiedForConditionalGeneration,
    Gemma4UnifiedTextConfig,
)
from transformers import masking_utils  # noqa: E402
from transformers.models.gemma4 import modeling_gemma4  # noqa: E402
from transformers.models.gemma4_unified import modeling_gemma4_unified as mgu  # noqa: E402
from transformers.models.gemma4_unified.image_processing_gemma4_unified import (  # noqa: E402
    Gemma4UnifiedImageProcessor,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

torch.set_num_threads(1)
torch.set_num_interop_threads(1)
torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()

# ---------------------------------------------------------------------------------------------
# Token ids (shared by both fixtures and the phase-2 tokenizer). Specials sit at the top of the
# 512-entry vocabulary so that every id the exporter's Gather sees is in range.
# ---------------------------------------------------------------------------------------------
VOCAB = 512
PAD, EOS, BOS, UNK = 0, 1, 2, 3
AUDIO_TOKEN, BOA, EOA, IMAGE_TOKEN, BOI, EOI, VIDEO_TOKEN = 505, 506, 507, 508, 509, 510, 511
SPECIAL_IDS = {PAD, EOS, BOS, UNK, AUDIO_TOKEN, BOA, EOA, IMAGE_TOKEN, BOI, EOI, VIDEO_TOKEN}
FIRST_TEXT_ID, LAST_TEXT_ID = 16, 504  # ids used for "text" in prompts
# The unified-vision prompt's text ids, pinned: "dado bupa bipi didu bomo <|image|> bese dedu beku
# <|image|> dega buna bebi xni" (vocab_word), which cases/vision-language/unified-vision-prompt.yaml and
# the Rust processor tests use verbatim. (It is text_candidates(7, 50, 12)'s 4th draw.) The weight seed
# is one for which (a) this prompt's greedy continuation is non-degenerate (good_continuation), (b)
# dropping bidirectional vision attention changes the prefill's next token so clearly that mobius's L4
# rule cannot call it a tie-break swap (fewer than 9 of the top-10 shared, or the right token not in
# the top-2), so broken-bidir is visible to the argmax tiers too, and (c) the broken greedy continuation
# does not stop at eos; make_vision asserts (a) and (b).
VISION_TEXT_IDS = [358, 320, 182, 499, 243, 121, 429, 94, 435, 315, 72, 37]
VISION_WEIGHT_SEED = 190
TEXT_WEIGHT_SEED = 2
N_NEW = 8  # greedy tokens per fixture

# Image processor settings: 2 px patches merged 2x2 -> 4x4 px model patches (patch_dim 48);
# max_soft_tokens must be one of HF's supported budgets, 70 is the smallest.
IMAGE_PROCESSOR_KWARGS = {"patch_size": 2, "pooling_kernel_size": 2, "max_soft_tokens": 70}


def text_config_common() -> dict:
    return dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        sliding_window=8,
        final_logit_softcapping=30.0,
        layer_types=[
            "sliding_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention",
        ],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "rope_theta": 1000000.0,
            },
        },
        max_position_embeddings=256,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        tie_word_embeddings=True,
    )


def vision_config_dict() -> dict:
    text = text_config_common()
    text["use_bidirectional_attention"] = "vision"
    return dict(
        text_config=text,
        vision_config=dict(
            patch_size=IMAGE_PROCESSOR_KWARGS["patch_size"],
            pooling_kernel_size=IMAGE_PROCESSOR_KWARGS["pooling_kernel_size"],
            mm_embed_dim=32,
            output_proj_dims=32,
            mm_posemb_size=32,
            rms_norm_eps=1e-6,
        ),
        audio_config=None,
        image_token_id=IMAGE_TOKEN,
        boi_token_id=BOI,
        eoi_token_id=EOI,
        video_token_id=VIDEO_TOKEN,
        audio_token_id=AUDIO_TOKEN,
        boa_token_id=BOA,
        eoa_token_index=EOA,
        tie_word_embeddings=True,
    )


def text_kvshare_config_dict() -> dict:
    text = text_config_common()
    text.update(num_kv_shared_layers=2, use_double_wide_mlp=True, use_bidirectional_attention=None)
    return text


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
REPORT: list[str] = []


def log(msg: str = "") -> None:
    print(msg, flush=True)
    REPORT.append(msg)


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def build_config(cfg: dict, kind: str):
    if kind == "vision":
        return Gemma4UnifiedConfig(**copy.deepcopy(cfg))
    return Gemma4UnifiedTextConfig(**copy.deepcopy(cfg))


def model_class(kind: str):
    return Gemma4UnifiedForConditionalGeneration if kind == "vision" else Gemma4UnifiedForCausalLM


# Weight scales (see init_weights). Chosen so that the fixtures are well-conditioned in float32:
# a 1-ulp change of inputs_embeds moves the HF logits by < 1e-5 (printed as "conditioning"), so any
# correct f32 implementation, whatever its summation order, lands well within 1e-4 of the oracle,
# while every feature flag still moves the logits by > 0.5 (printed as "feature-flag proofs").
QK_NORM_SCALE = 0.35  # q_norm/k_norm weights: attention scores (scaling 1.0) have std ≈ 0.35² √head_dim ≈ 0.5-0.7
POST_NORM_SCALE = 0.15  # post_attention/post_feedforward norms: each sub-layer adds rms ≈ 0.15 to a rms-1 stream
LAYER_SCALAR_RANGE = (0.8, 1.0)
FINAL_NORM_SCALE = 4.0  # |final norm weights|; random signs; logits std ≈ 4, max |logit| ≈ 15


def init_weights(model: torch.nn.Module, seed: int, final_norm_scale: float = FINAL_NORM_SCALE) -> None:
    """Deterministic weights that make every feature visible (docs/design.md §7, last point) while keeping
    the model well-conditioned in float32.

    Linear: N(0, 1/fan_in); embeddings N(0, 1/hidden) (so × sqrt(hidden) gives unit rms);
    input/pre-feedforward RMSNorm weights 1 ± 0.2; q_norm/k_norm weights QK_NORM_SCALE·(1 ± 0.2)
    (with attention scaling 1.0, unit q/k norms give scores of std √head_dim ≈ 4-6: a peaked softmax
    that amplifies f32 rounding noise layer by layer); post-attention/post-feedforward norms
    POST_NORM_SCALE·(1 ± 0.2) (the post-norms fix each sub-layer's residual contribution at that rms,
    whatever o_proj/down_proj are: small contributions keep every layer close to identity instead of
    chaotic); layer_scalar uniform in LAYER_SCALAR_RANGE; final norm ±final_norm_scale·(1 ± 0.1) with
    random signs (the logits reach ~15, so softcapping at 30 is visible; the signs keep the tied
    lm_head from simply predicting the current token, which a near-identity stack would otherwise do);
    vision LayerNorms 1 ± 0.2 with N(0, 0.1) biases; position table N(0, 1).
    """
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    params = dict(model.named_parameters())  # tied lm_head appears once (as embed_tokens)
    for name, buf in model.named_buffers():
        if name.endswith("layer_scalar"):
            params[name] = buf
    with torch.no_grad():
        for name in sorted(params):
            t = params[name]
            shape = tuple(t.shape)
            if name.endswith("embed_tokens.weight"):
                v = normal(shape, shape[1] ** -0.5)
            elif name.endswith("layer_scalar"):
                lo, hi = LAYER_SCALAR_RANGE
                v = lo + (hi - lo) * torch.rand(shape, generator=g)
            elif name in ("model.language_model.norm.weight", "model.norm.weight"):
                v = final_norm_scale * (1.0 + normal(shape, 0.1))
                v = v * torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
            elif name.endswith("pos_embedding"):
                v = normal(shape, 1.0)
            elif name.endswith(".bias"):
                v = normal(shape, 0.1)
            elif name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
                v = QK_NORM_SCALE * (1.0 + normal(shape, 0.2))
            elif name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
                v = POST_NORM_SCALE * (1.0 + normal(shape, 0.2))
            elif t.ndim == 1:  # input/pre-feedforward RMSNorm, vision LayerNorm weights
                v = 1.0 + normal(shape, 0.2)
            elif t.ndim == 2:  # nn.Linear [out, in]
                v = normal(shape, shape[1] ** -0.5)
            else:
                raise RuntimeError(f"no init rule for {name} {shape}")
            t.copy_(v)


def save_checkpoint(model, ckpt_dir: Path) -> None:
    if ckpt_dir.exists():
        shutil.rmtree(ckpt_dir)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        ckpt_dir.mkdir(parents=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(Path(tmp) / f, ckpt_dir / f)
            os.chmod(ckpt_dir / f, 0o644)


def load_checkpoint(ckpt_dir: Path, kind: str, config=None):
    kwargs = {"attn_implementation": "eager", "dtype": torch.float32}
    if config is not None:
        kwargs["config"] = config
    model = model_class(kind).from_pretrained(str(ckpt_dir), **kwargs)
    return model.eval()


def mobius_export(ckpt_dir: Path, out_dir: Path, dtype: str) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # mobius writes the --config path into each graph's name: pass repo-relative paths so the
    # exported bytes do not depend on where the repository (or a temp dir) lives.
    rel = lambda p: os.path.relpath(p, ROOT)  # noqa: E731
    cmd = [sys.executable, "-m", "mobius", "build", "--config", rel(ckpt_dir), rel(out_dir), "--dtype", dtype]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
    if res.returncode != 0:
        print(res.stdout[-5000:], res.stderr[-5000:], file=sys.stderr)
        raise RuntimeError(f"mobius build failed: {' '.join(cmd)}")
    for p in out_dir.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o644)


_ST_DTYPE = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.int32: "I32",
             torch.bool: "BOOL", torch.bfloat16: "BF16"}


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """safetensors writer with a canonical header (sorted keys, sorted metadata).

    `safetensors.torch.save_file` serialises `__metadata__` from a hash map, so its key order (and
    the file's bytes) change from run to run; this writes the same format deterministically.
    """
    header: dict = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    from safetensors import safe_open  # round-trip check

    with safe_open(str(path), framework="pt") as f:
        assert sorted(f.keys()) == sorted(tensors) and f.metadata() == metadata
        for k in tensors:
            assert torch.equal(f.get_tensor(k), tensors[k].cpu())


IMAGE_CONTRAST = 64  # grey levels spanned by the gradients (around 128)
IMAGE_NOISE = 16  # seeded uniform noise, ± grey levels


def make_images(img_dir: Path) -> list[Path]:
    """Two small synthetic RGB images of different sizes (smooth gradients + seeded noise).

    Low contrast around mid-grey: the per-patch variance that the vision embedder's first LayerNorm
    sees is then ~0.005, so an implementation with the wrong LayerNorm eps (1e-6 instead of HF's 1e-5)
    moves the logits by ~1e-2, far outside the L3 f32 gate, while the decoder stays well-conditioned.
    """
    img_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)
    paths = []
    for name, (h, w) in (("a", (20, 28)), ("b", (12, 12))):
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        base = np.stack([xx / (w - 1), yy / (h - 1), 1 - (xx + yy) / (w + h - 2)], axis=-1)
        base = 128 + IMAGE_CONTRAST * (base - 0.5)
        noise = rng.integers(-IMAGE_NOISE, IMAGE_NOISE + 1, size=(h, w, 3))
        arr = np.clip(base + noise, 0, 255).astype(np.uint8)
        p = img_dir / f"{name}.png"
        Image.fromarray(arr).save(p, format="PNG", optimize=False, compress_level=9)
        paths.append(p)
    return paths


def load_images(paths: list[Path]) -> list[Image.Image]:
    out = []
    for p in paths:
        with Image.open(p) as im:
            out.append(im.convert("RGB").copy())
    return out


def capture_inputs_embeds(model, kind: str, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs `model(**inputs)`; returns (logits, the inputs_embeds the decoder stack started from).

    vision: the `inputs_embeds` kwarg Gemma4UnifiedModel.forward hands to the language model;
    text: the output of Gemma4UnifiedTextModel.embed_tokens (× sqrt(hidden) included).
    """
    seen = {}
    if kind == "vision":
        def hook(_mod, _args, kwargs):
            seen["e"] = kwargs["inputs_embeds"].detach().clone()
        h = model.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)
    else:
        def hook(_mod, _args, out):
            seen["e"] = out.detach().clone()
        h = model.model.embed_tokens.register_forward_hook(hook)
    try:
        logits = model(**inputs).logits
    finally:
        h.remove()
    return logits, seen["e"]


# ---------------------------------------------------------------------------------------------
# conditioning: how much f32 rounding noise the fixture amplifies (printed, not stored)
# ---------------------------------------------------------------------------------------------
def perturbed_logits(model, kind: str, inputs: dict, toward: float) -> torch.Tensor:
    """forward() with every element of the decoder's inputs_embeds moved by 1 ulp toward `toward`."""
    if kind == "vision":
        def hook(_mod, args, kwargs):
            e = kwargs["inputs_embeds"]
            kwargs["inputs_embeds"] = torch.nextafter(e, torch.full_like(e, toward))
            return args, kwargs
        h = model.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)
    else:
        def hook(_mod, _args, out):
            return torch.nextafter(out, torch.full_like(out, toward))
        h = model.model.embed_tokens.register_forward_hook(hook)
    try:
        with torch.no_grad():
            return model(**inputs, use_cache=False).logits
    finally:
        h.remove()


def fixture_forward_inputs(fdir: Path) -> dict:
    from safetensors.torch import load_file

    t = load_file(str(fdir / "inputs.safetensors"))
    inputs = {"input_ids": t["input_ids"], "attention_mask": torch.ones_like(t["input_ids"])}
    for k in ("pixel_values", "image_position_ids", "mm_token_type_ids"):
        if k in t:
            inputs[k] = t[k]
    return inputs


def logits_subprocess(fdir: Path, kind: str, env_extra: dict) -> torch.Tensor:
    """HF forward() logits of a written fixture (checkpoint + inputs), computed in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.pt"
        env = dict(os.environ, **env_extra)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--logits-of", str(fdir), "--kind", kind,
               "--out", str(out)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
            raise RuntimeError("logits subprocess failed")
        return torch.load(out)


def report_conditioning(model, kind: str, fdir: Path, inputs: dict, logits: torch.Tensor) -> dict:
    """Conditioning of the fixture (all positions, HF eager f32 forward()):
    - ulp: max |Δlogits| when every element of inputs_embeds moves by 1 ulp (toward +inf, and -inf);
    - aten-default: max |Δlogits| of HF run in a fresh process with ATEN_CPU_CAPABILITY=default (other
      kernels, other summation order) vs the oracle (native capability).
    A correct f32 implementation is expected to land within a few times these numbers of the oracle."""
    res = {f"ulp_{name}": maxdiff(perturbed_logits(model, kind, inputs, toward), logits)
           for name, toward in (("up", float("inf")), ("down", float("-inf")))}
    res["fresh_process_vs_oracle"] = maxdiff(logits_subprocess(fdir, kind, {}), logits)
    res["aten_default_vs_oracle"] = maxdiff(logits_subprocess(fdir, kind, {"ATEN_CPU_CAPABILITY": "default"}), logits)
    log(f"  conditioning (max |Δlogits|, all positions; native ATen CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}): inputs_embeds +1 ulp {res['ulp_up']:.2e}, "
        f"-1 ulp {res['ulp_down']:.2e}; HF with ATEN_CPU_CAPABILITY=default vs oracle "
        f"{res['aten_default_vs_oracle']:.2e} (same capability, fresh process: {res['fresh_process_vs_oracle']:.2e})")
    return res


# ---------------------------------------------------------------------------------------------
# bidirectional scopes: masks from the HF functions that implement each one
# ---------------------------------------------------------------------------------------------
def scope_masks(model, inputs_embeds, attention_mask, position_ids, mm_token_type_ids):
    cfg = model.config
    text_cfg = cfg.get_text_config()
    block = mgu.get_block_sequence_ids_for_mask(mm_token_type_ids, device=inputs_embeds.device)
    # all-layers: what Gemma4UnifiedModel.forward builds (masking_utils.create_masks_for_generate
    # with block_sequence_ids: block OR'd into both masks after the window).
    all_layers = masking_utils.create_masks_for_generate(
        config=text_cfg, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
        past_key_values=None, position_ids=position_ids, block_sequence_ids=block,
    )
    # sliding-windowed: the model's create_masks_for_generate with mm_token_type_ids, i.e.
    # create_masks_for_vision_model: full causal, sliding = window AND (causal OR block).
    sliding_windowed = Gemma4UnifiedForConditionalGeneration.create_masks_for_generate(
        config=cfg, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
        past_key_values=None, position_ids=position_ids, mm_token_type_ids=mm_token_type_ids,
    )
    # Gemma4Model.forward (models/gemma4) uses its own create_masks_for_vision_model: must agree.
    g4 = modeling_gemma4.create_masks_for_vision_model(
        config=text_cfg, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
        past_key_values=None, position_ids=position_ids,
        block_sequence_ids=modeling_gemma4.get_block_sequence_ids_for_mask(mm_token_type_ids, inputs_embeds.device),
    )
    for k in ("full_attention", "sliding_attention"):
        assert torch.equal(g4[k], sliding_windowed[k]), f"gemma4 vs gemma4_unified vision mask differ ({k})"
    # none: what the model's create_masks_for_generate returns when generate() calls it without
    # mm_token_type_ids (the compileable/static-cache path; see verify_static_generate_scope).
    none = Gemma4UnifiedForConditionalGeneration.create_masks_for_generate(
        config=cfg, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
        past_key_values=None, position_ids=position_ids, mm_token_type_ids=None,
    )
    return {"all-layers": all_layers, "sliding-windowed": sliding_windowed, "none": none}


def describe_mask(m: torch.Tensor) -> torch.Tensor:
    return (m[0, 0] == 0)  # eager masks: 0 = visible, -inf (min) = masked


# ---------------------------------------------------------------------------------------------
# onnxruntime
# ---------------------------------------------------------------------------------------------
def ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def ort_io(sess) -> dict:
    return {
        "inputs": [(i.name, i.type, i.shape) for i in sess.get_inputs()],
        "outputs": [(o.name, o.type, o.shape) for o in sess.get_outputs()],
    }


NP_DTYPE = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
            "tensor(bool)": np.bool_, "tensor(int32)": np.int32}


class OrtPipeline:
    """Minimal Python driver of a mobius package (decoder/embedding/vision_encoder or model.onnx)."""

    def __init__(self, onnx_dir: Path):
        self.dir = onnx_dir
        if (onnx_dir / "model.onnx").exists():
            self.subs = {"model": ort_session(onnx_dir / "model.onnx")}
        else:
            self.subs = {d.name: ort_session(d / "model.onnx") for d in sorted(onnx_dir.iterdir())
                         if (d / "model.onnx").exists()}
        self.decoder = self.subs.get("decoder", self.subs.get("model"))

    def io(self) -> dict:
        return {k: ort_io(s) for k, s in self.subs.items()}

    def _feed_dtype(self, sess, name):
        for i in sess.get_inputs():
            if i.name == name:
                return NP_DTYPE[i.type]
        raise KeyError(name)

    def image_features(self, pixel_values, image_position_ids):
        s = self.subs["vision_encoder"]
        out = s.run(None, {
            "pixel_values": pixel_values.numpy().astype(self._feed_dtype(s, "pixel_values")),
            "pixel_position_ids": image_position_ids.numpy().astype(np.int64),
        })
        return out[0]

    def embed(self, input_ids, image_features):
        s = self.subs["embedding"]
        return s.run(None, {"input_ids": input_ids.astype(np.int64),
                            "image_features": image_features.astype(self._feed_dtype(s, "image_features"))})[0]

    def _empty_past(self):
        feeds = {}
        for i in self.decoder.get_inputs():
            if i.name.startswith("past_key_values."):
                _, heads, _, dim = i.shape
                feeds[i.name] = np.zeros((1, heads, 0, dim), dtype=NP_DTYPE[i.type])
        return feeds

    def step(self, input_ids, past, past_len, inputs_embeds=None):
        s = self.decoder
        names = {i.name for i in s.get_inputs()}
        seq = input_ids.shape[1]
        feeds = dict(past)
        feeds["attention_mask"] = np.ones((1, past_len + seq), dtype=np.int64)
        feeds["position_ids"] = np.arange(past_len, past_len + seq, dtype=np.int64)[None]
        if "input_ids" in names:
            feeds["input_ids"] = input_ids.astype(np.int64)
        if "inputs_embeds" in names:
            feeds["inputs_embeds"] = inputs_embeds
        out_names = [o.name for o in s.get_outputs()]
        outs = dict(zip(out_names, s.run(None, feeds)))
        new_past = {n.replace("present.", "past_key_values."): v for n, v in outs.items() if n.startswith("present.")}
        return outs["logits"], new_past

    def prefill_and_generate(self, input_ids, n_new, pixel_values=None, image_position_ids=None):
        ids = input_ids.numpy()
        feats = None
        embeds = None
        if "embedding" in self.subs:
            hidden = self.subs["embedding"].get_inputs()[1].shape[1]
            if pixel_values is not None:
                feats = self.image_features(pixel_values, image_position_ids)
            else:
                feats = np.zeros((0, hidden), dtype=np.float32)
            embeds = self.embed(ids, feats)
        logits, past = self.step(ids, self._empty_past(), 0, embeds)
        prefill = logits
        tokens, steps = [], [logits[0, -1]]
        pos = ids.shape[1]
        for i in range(n_new):
            tok = int(np.argmax(steps[-1].astype(np.float64)))
            tokens.append(tok)
            if i == n_new - 1:
                break
            new = np.array([[tok]], dtype=np.int64)
            emb = None
            if embeds is not None:
                emb = self.embed(new, np.zeros((0, embeds.shape[-1]), dtype=feats.dtype))
            logits, past = self.step(new, past, pos, emb)
            pos += 1
            steps.append(logits[0, -1])
        return {"prefill_logits": prefill, "image_features": feats, "inputs_embeds": embeds,
                "tokens": tokens, "step_logits": np.stack(steps)}


def package_layout(onnx_dir: Path) -> list[str]:
    return [f"{p.relative_to(onnx_dir)} ({p.stat().st_size} B)" for p in sorted(onnx_dir.rglob("*")) if p.is_file()]


def report_onnx(name: str, onnx_dir: Path, hf: dict, pixel_values=None, image_position_ids=None,
                input_ids=None, scopes: dict | None = None) -> dict:
    pipe = OrtPipeline(onnx_dir)
    log(f"  [{name}] package: " + ", ".join(package_layout(onnx_dir)))
    for sub, io in pipe.io().items():
        log(f"  [{name}] {sub}:")
        for n, t, s in io["inputs"]:
            log(f"      in  {n}: {t} {s}")
        for n, t, s in io["outputs"]:
            log(f"      out {n}: {t} {s}")
    r = pipe.prefill_and_generate(input_ids, N_NEW, pixel_values, image_position_ids)
    res = {}
    pre = torch.from_numpy(r["prefill_logits"].astype(np.float32))
    res["prefill_vs_hf_logits"] = maxdiff(pre, hf["logits"])
    if scopes:
        for sname, t in scopes.items():
            res[f"prefill_vs_{sname}"] = maxdiff(pre, t)
    if r["image_features"] is not None and "image_features" in hf:
        res["image_features"] = maxdiff(torch.from_numpy(r["image_features"].astype(np.float32)), hf["image_features"])
    if r["inputs_embeds"] is not None:
        res["inputs_embeds"] = maxdiff(torch.from_numpy(r["inputs_embeds"].astype(np.float32)), hf["inputs_embeds"])
    res["greedy_tokens_onnx"] = r["tokens"]
    res["greedy_tokens_hf"] = hf["greedy_tokens"][0].tolist()
    res["step_logits_vs_hf"] = maxdiff(torch.from_numpy(r["step_logits"].astype(np.float32)), hf["step_logits"])
    for k, v in res.items():
        log(f"  [{name}] ONNX vs HF {k}: {v:.3e}" if isinstance(v, float) else f"  [{name}] {k}: {v}")
    return res


# ---------------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------------
def hf_generate(model, **inputs):
    out = model.generate(**inputs, max_new_tokens=N_NEW, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=PAD)
    prompt_len = inputs["input_ids"].shape[1]
    tokens = out.sequences[:, prompt_len:]
    step_logits = torch.cat([l.float() for l in out.logits], dim=0)
    return tokens, step_logits


def log_greedy_margins(step_logits: torch.Tensor) -> None:
    top = step_logits.double().topk(2, dim=-1).values
    m = (top[:, 0] - top[:, 1]).tolist()
    log(f"  greedy step margins (top1 - top2): min {min(m):.3f} [{', '.join(f'{x:.3f}' for x in m)}]")


def good_continuation(tokens: torch.Tensor) -> bool:
    t = tokens[0].tolist()
    return len(t) == N_NEW and not (set(t) & SPECIAL_IDS) and len(set(t)) >= N_NEW - 1


def verify_generate_scopes(model, inputs, scope_logits) -> dict:
    """Which scope does each generate() cache path use? Measured, not assumed."""
    calls = []
    orig = mgu.create_masks_for_vision_model

    def spy(*a, **k):
        calls.append("create_masks_for_vision_model")
        return orig(*a, **k)

    found = {}
    mgu.create_masks_for_vision_model = spy
    try:
        for impl in (None, "static"):
            calls.clear()
            kw = dict(inputs)
            if impl:
                kw["cache_implementation"] = impl
            out = model.generate(**kw, max_new_tokens=2, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=PAD)
            step0 = out.logits[0][0].float()
            diffs = {s: maxdiff(step0, t[0, -1]) for s, t in scope_logits.items()}
            best = min(diffs, key=diffs.get)
            found[impl or "dynamic"] = {"scope": best, "diffs": diffs, "vision_mask_fn_calls": len(calls)}
    finally:
        mgu.create_masks_for_vision_model = orig
    return found


# ---------------------------------------------------------------------------------------------
# flag proofs
# ---------------------------------------------------------------------------------------------
def logits_with(kind, cfg_dict, state_dict, inputs, edit_cfg=None, edit_sd=None, patch=None):
    cfg = copy.deepcopy(cfg_dict)
    if edit_cfg:
        edit_cfg(cfg["text_config"] if kind == "vision" else cfg)
    config = build_config(cfg, kind)
    config._attn_implementation = "eager"
    config.get_text_config()._attn_implementation = "eager"
    model = model_class(kind)(config).eval()
    sd = {k: v.clone() for k, v in state_dict.items()}
    if edit_sd:
        edit_sd(sd, model)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]
    assert not missing and not unexpected, (missing, unexpected)
    model.tie_weights()
    if patch:
        patch(model)
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


def lm_prefix(kind):
    return "model.language_model." if kind == "vision" else "model."


def flag_proofs(kind, cfg_dict, state_dict, inputs, base_logits) -> dict:
    text = cfg_dict["text_config"] if kind == "vision" else cfg_dict
    pre = lm_prefix(kind)
    proofs = {}

    def run(label, **kw):
        d = maxdiff(logits_with(kind, cfg_dict, state_dict, inputs, **kw), base_logits)
        proofs[label] = d
        log(f"    flip {label:<58} max|Δlogits| = {d:.4f}")

    run("final_logit_softcapping 30 -> null", edit_cfg=lambda c: c.update(final_logit_softcapping=None))
    run(f"sliding_window {text['sliding_window']} -> {text['sliding_window'] + 1} (off by one)",
        edit_cfg=lambda c: c.update(sliding_window=c["sliding_window"] + 1))
    run(f"sliding_window {text['sliding_window']} -> 4096 (no window)", edit_cfg=lambda c: c.update(sliding_window=4096))

    def rope_full(factor):
        def f(c):
            c["rope_parameters"] = copy.deepcopy(c["rope_parameters"])
            c["rope_parameters"]["full_attention"]["partial_rotary_factor"] = factor
        return f
    run("proportional RoPE partial_rotary_factor 0.25 -> 1.0 (full layers)", edit_cfg=rope_full(1.0))

    def theta_sliding(c):
        c["rope_parameters"] = copy.deepcopy(c["rope_parameters"])
        c["rope_parameters"]["full_attention"]["rope_theta"] = 10000.0
    run("full-layer rope_theta 1e6 -> 1e4", edit_cfg=theta_sliding)

    # attention_k_eq_v: with k_eq_v=false full layers get num_key_value_heads K/V heads and a v_proj.
    full_layers = [i for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    n_kv_shared = text.get("num_kv_shared_layers", 0) or 0
    first_shared = text["num_hidden_layers"] - n_kv_shared
    own_full = [i for i in full_layers if i < first_shared]
    rep = text["num_key_value_heads"] // text["num_global_key_value_heads"]
    gh = text["global_head_dim"]

    def kv_edit(v_from_k: bool):
        def f(sd, model):
            g = torch.Generator().manual_seed(99)
            for i in own_full:
                k = sd[f"{pre}layers.{i}.self_attn.k_proj.weight"]
                k2 = k.view(-1, gh, k.shape[1]).repeat_interleave(rep, dim=0).reshape(-1, k.shape[1])
                sd[f"{pre}layers.{i}.self_attn.k_proj.weight"] = k2
                sd[f"{pre}layers.{i}.self_attn.v_proj.weight"] = (
                    k2.clone() if v_from_k else torch.randn(k2.shape, generator=g) * k2.shape[1] ** -0.5)
        return f
    run("attention_k_eq_v true -> false, independent v_proj",
        edit_cfg=lambda c: c.update(attention_k_eq_v=False), edit_sd=kv_edit(False))
    run("attention_k_eq_v true -> false, v_proj := k_proj (equivalence, expect 0)",
        edit_cfg=lambda c: c.update(attention_k_eq_v=False), edit_sd=kv_edit(True))

    def v_after_knorm(model):
        # value taken after k_norm (instead of the raw k_proj output -> v_norm)
        layers = model.model.language_model.layers if kind == "vision" else model.model.layers
        for i in own_full:
            att = layers[i].self_attn
            orig_norm = att.v_norm
            k_norm = att.k_norm
            att.v_norm = torch.nn.Sequential(k_norm, orig_norm)
    run("k_eq_v values taken after k_norm (wrong order)", patch=v_after_knorm)

    def num_global_heads(c):
        c["num_global_key_value_heads"] = c["num_key_value_heads"]

    def repeat_k_heads(sd, model):
        for i in own_full:
            key = f"{pre}layers.{i}.self_attn.k_proj.weight"
            k = sd[key]
            sd[key] = k.view(-1, gh, k.shape[1]).repeat_interleave(rep, dim=0).reshape(-1, k.shape[1])
    run("num_global_key_value_heads 1 -> 2 (k heads repeated, expect 0)",
        edit_cfg=num_global_heads, edit_sd=repeat_k_heads)

    def scalar_one(sd, model):
        for k in sd:
            if k.endswith("layer_scalar"):
                sd[k] = torch.ones_like(sd[k])
    run("layer_scalar -> 1", edit_sd=scalar_one)

    if n_kv_shared:
        layer_types = text["layer_types"]
        prev = layer_types[:first_shared]
        src = {t: first_shared - 1 - prev[::-1].index(t) for t in set(prev)}

        def no_sharing(model):
            layers = model.model.layers
            for i in range(first_shared, text["num_hidden_layers"]):
                att = layers[i].self_attn
                s = layers[src[layer_types[i]]].self_attn
                att.is_kv_shared_layer = False
                att.k_proj, att.k_norm, att.v_norm = s.k_proj, s.k_norm, s.v_norm
                att.v_proj = s.v_proj
        run(f"num_kv_shared_layers {n_kv_shared} -> own K/V (source layer weights, no sharing)", patch=no_sharing)

        def half_mlp(model):
            layers = model.model.layers
            for i in range(first_shared, text["num_hidden_layers"]):
                mlp = layers[i].mlp
                n = mlp.gate_proj.weight.shape[0] // 2
                for lin, dim in ((mlp.gate_proj, 0), (mlp.up_proj, 0), (mlp.down_proj, 1)):
                    w = lin.weight.data.narrow(dim, 0, n).clone()
                    new = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
                    new.weight.data.copy_(w)
                    setattr(mlp, [k for k, v in mlp.named_children() if v is lin][0], new)
        run("use_double_wide_mlp true -> false (first half of the shared layers' MLP)", patch=half_mlp)

    return proofs


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------
def choose_prompt(candidates, run_generate):
    """First candidate prompt whose greedy continuation is non-degenerate (deterministic)."""
    for ids in candidates:
        tokens, step_logits = run_generate(ids)
        if good_continuation(tokens):
            return ids, tokens, step_logits
    raise RuntimeError("no candidate prompt gave a non-degenerate greedy continuation")


def text_candidates(rng_seed: int, count: int, length: int):
    g = np.random.default_rng(rng_seed)
    for _ in range(count):
        yield [int(x) for x in g.integers(FIRST_TEXT_ID, LAST_TEXT_ID + 1, size=length)]


def make_vision(summary: dict) -> None:
    name = "unified-vision"
    fdir = FIXTURES / name
    log(f"== {name}")
    cfg_dict = vision_config_dict()
    config = build_config(cfg_dict, "vision")
    torch.manual_seed(0)
    model = Gemma4UnifiedForConditionalGeneration(config)
    init_weights(model, seed=VISION_WEIGHT_SEED)
    save_checkpoint(model, fdir / "checkpoint")
    del model
    model = load_checkpoint(fdir / "checkpoint", "vision")
    state_dict = {k: v.clone() for k, v in model.state_dict().items()}

    # images -> HF image processor
    img_paths = make_images(fdir / "images")
    images = load_images(img_paths)
    proc = Gemma4UnifiedImageProcessor(**IMAGE_PROCESSOR_KWARGS)
    px = proc(images, return_tensors="pt")
    pixel_values = px["pixel_values"].float()
    image_position_ids = px["image_position_ids"].long()
    n_soft = [int(n) for n in px["num_soft_tokens_per_image"]]
    log(f"  images {[im.size for im in images]} (W,H) -> soft tokens {n_soft}, pixel_values "
        f"{tuple(pixel_values.shape)}, image_position_ids {tuple(image_position_ids.shape)}")
    assert all(n < IMAGE_PROCESSOR_KWARGS["max_soft_tokens"] for n in n_soft)

    def build_ids(text_ids):
        a, b, c = text_ids[:5], text_ids[5:8], text_ids[8:]
        ids = ([BOS] + a + [BOI] + [IMAGE_TOKEN] * n_soft[0] + [EOI] + b + [BOI] + [IMAGE_TOKEN] * n_soft[1]
               + [EOI] + c)
        return torch.tensor([ids], dtype=torch.long)

    def mm_types(ids):
        return (ids == IMAGE_TOKEN).long()

    def gen(text_ids):
        ids = build_ids(text_ids)
        with torch.no_grad():
            return hf_generate(model, input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixel_values,
                               image_position_ids=image_position_ids, mm_token_type_ids=mm_types(ids))

    text_ids, greedy, step_logits = choose_prompt([VISION_TEXT_IDS], gen)
    input_ids = build_ids(text_ids)
    mm = mm_types(input_ids)
    S = input_ids.shape[1]
    attn = torch.ones_like(input_ids)
    pos = torch.arange(S)[None]
    log(f"  prompt S={S}, text ids {text_ids}; greedy {greedy[0].tolist()}")
    log_greedy_margins(step_logits)
    assert S > 2 * cfg_dict["text_config"]["sliding_window"]

    fwd_inputs = dict(input_ids=input_ids, attention_mask=attn, pixel_values=pixel_values,
                      image_position_ids=image_position_ids, mm_token_type_ids=mm)
    with torch.no_grad():
        logits, inputs_embeds = capture_inputs_embeds(model, "vision", **fwd_inputs, use_cache=False)
        image_features = model.model.get_image_features(pixel_values, image_position_ids).pooler_output
        masks = scope_masks(model, inputs_embeds, attn, pos, mm)
        scope_logits = {}
        for sname, m in masks.items():
            scope_logits[sname] = model(**dict(fwd_inputs, attention_mask=m), use_cache=False).logits
    assert image_features.shape == (sum(n_soft), cfg_dict["text_config"]["hidden_size"])
    assert torch.equal(scope_logits["all-layers"], logits), "forward() is expected to use the all-layers scope"

    # what the masks look like (sanity: the three scopes differ where docs/design.md §5 says they do)
    img0 = int((input_ids[0] == IMAGE_TOKEN).nonzero()[0])
    q, k = img0, img0 + cfg_dict["text_config"]["sliding_window"] + 2  # future key in the same image, out of window
    vis = {s: (bool(describe_mask(m["full_attention"])[q, k]), bool(describe_mask(m["sliding_attention"])[q, k]),
               bool(describe_mask(m["sliding_attention"])[q, img0 + 1]))
           for s, m in masks.items()}
    log(f"  mask check (full sees q->k+10, sliding sees q->k+10, sliding sees q->q+1): {vis}")

    gen_scopes = verify_generate_scopes(model, fwd_inputs, scope_logits)
    for path, info in gen_scopes.items():
        log(f"  generate({path} cache) prefill scope = {info['scope']}  (step0 vs scopes: "
            + ", ".join(f"{s} {d:.2e}" for s, d in info["diffs"].items()) + f"; vision-mask fn calls {info['vision_mask_fn_calls']})")
    greedy_scope = gen_scopes["dynamic"]["scope"]
    assert maxdiff(step_logits[0], logits[0, -1]) < 1e-4

    log("  scope differences (HF): " + ", ".join(
        f"{a} vs {b} {maxdiff(scope_logits[a], scope_logits[b]):.4f}"
        for a, b in (("all-layers", "sliding-windowed"), ("all-layers", "none"), ("sliding-windowed", "none"))))
    log(f"  logits range [{float(logits.min()):.2f}, {float(logits.max()):.2f}], std {float(logits.std()):.2f}")
    next_tok = {s: int(t[0, -1].argmax()) for s, t in scope_logits.items()}
    top10 = {s: t[0, -1].topk(10).indices.tolist() for s, t in scope_logits.items()}
    shared = len(set(top10["none"]) & set(top10["all-layers"]))
    log(f"  prefill next token per scope: {next_tok}; none vs all-layers: {shared} of top-10 shared, "
        f"all-layers top-1 is none's #{top10['none'].index(next_tok['all-layers']) + 1 if next_tok['all-layers'] in top10['none'] else '>10'}")
    assert next_tok["none"] != next_tok["all-layers"], "bidirectional attention should change the next token"
    assert shared < 9 or next_tok["all-layers"] not in top10["none"][:2], "broken-bidir would look like a tie-break swap"

    log("  feature-flag proofs (HF, forward(), prompt above):")
    proofs = flag_proofs("vision", cfg_dict, state_dict, fwd_inputs, logits)
    proofs["bidirectional all-layers -> sliding-windowed"] = maxdiff(scope_logits["sliding-windowed"], logits)
    proofs["bidirectional all-layers -> none"] = maxdiff(scope_logits["none"], logits)
    d = maxdiff(logits_with("vision", cfg_dict, state_dict, fwd_inputs,
                            edit_cfg=lambda c: c.update(use_bidirectional_attention=None)), logits)
    proofs["use_bidirectional_attention vision -> null"] = d
    for k in ("bidirectional all-layers -> sliding-windowed", "bidirectional all-layers -> none",
              "use_bidirectional_attention vision -> null"):
        log(f"    flip {k:<58} max|Δlogits| = {proofs[k]:.4f}")

    # files
    meta_in = {
        "format": "pt",
        "prompt_layout": "[bos] t*5 [boi] [image]*n0 [eoi] t*3 [boi] [image]*n1 [eoi] t*4",
        "images": json.dumps(["images/a.png", "images/b.png"]),
        "image_processor": "transformers Gemma4UnifiedImageProcessor",
        "image_processor_kwargs": json.dumps(IMAGE_PROCESSOR_KWARGS, sort_keys=True),
        "num_soft_tokens_per_image": json.dumps(n_soft),
        "mm_token_type_ids": "1 where input_ids == image_token_id (HF ProcessorMixin.create_mm_token_type_ids)",
    }
    save_tensors(fdir / "inputs.safetensors", {
        "input_ids": input_ids, "pixel_values": pixel_values, "image_position_ids": image_position_ids,
        "mm_token_type_ids": mm}, meta_in)
    paths = {
        "logits": "Gemma4UnifiedForConditionalGeneration.forward(input_ids, attention_mask=ones, pixel_values, "
                  "image_position_ids, mm_token_type_ids, use_cache=False).logits; Gemma4UnifiedModel.forward builds "
                  "masks with masking_utils.create_masks_for_generate(block_sequence_ids=...) = all-layers scope",
        "logits_all_layers": "forward() with the mask dict from masking_utils.create_masks_for_generate(config.text_config, "
                             "block_sequence_ids=get_block_sequence_ids_for_mask(mm_token_type_ids)) (what "
                             "Gemma4UnifiedModel.forward builds): block OR'd into full and sliding masks, unbounded by "
                             "the window; bit-identical to logits",
        "logits_sliding_windowed": "forward() with the mask dict from Gemma4UnifiedForConditionalGeneration."
                                   "create_masks_for_generate(mm_token_type_ids=...) -> create_masks_for_vision_model: "
                                   "full = causal, sliding = window AND (causal OR block); identical masks to "
                                   "models/gemma4 create_masks_for_vision_model used by Gemma4Model.forward",
        "logits_none": "forward() with the mask dict from Gemma4UnifiedForConditionalGeneration.create_masks_for_generate"
                       "(mm_token_type_ids=None) -> masking_utils.create_masks_for_generate without blocks: what "
                       "generate(cache_implementation='static') uses (prepare_inputs_for_generation passes "
                       "mm_token_type_ids=None to it; measured)",
        "image_features": "Gemma4UnifiedModel.get_image_features(pixel_values, image_position_ids).pooler_output "
                          "(padding patches dropped)",
        "inputs_embeds": "inputs_embeds argument received by Gemma4UnifiedTextModel.forward during forward() "
                         "(embed_tokens(ids with image ids -> pad) * sqrt(hidden), image features masked_scatter'ed)",
        "greedy_tokens": f"generate(max_new_tokens={N_NEW}, do_sample=False) default DynamicCache, new tokens only",
        "step_logits": "generate(..., output_logits=True, return_dict_in_generate=True).logits stacked; row 0 = "
                       "prefill last position",
    }
    meta_or = {
        "format": "pt",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "attn_implementation": "eager",
        "paths": json.dumps(paths, sort_keys=True),
        "default_scope": "all-layers",
        "greedy_scope": greedy_scope,
        "generate_scopes": json.dumps({k: v["scope"] for k, v in gen_scopes.items()}, sort_keys=True),
        "flag_proofs_max_abs_logit_diff": json.dumps({k: round(v, 6) for k, v in proofs.items()}, sort_keys=True),
    }
    oracle = {
        "logits": logits, "logits_all_layers": scope_logits["all-layers"],
        "logits_sliding_windowed": scope_logits["sliding-windowed"], "logits_none": scope_logits["none"],
        "image_features": image_features, "inputs_embeds": inputs_embeds,
        "greedy_tokens": greedy.long(), "step_logits": step_logits,
    }
    save_tensors(fdir / "oracle.safetensors", oracle, meta_or)
    with torch.no_grad():
        cond = report_conditioning(model, "vision", fdir, fwd_inputs, logits)

    # exports
    ck = fdir / "checkpoint"
    mobius_export(ck, fdir / "onnx", "f32")
    mobius_export(ck, FIXTURES / "unified-vision-f16" / "onnx", "f16")
    broken = {"broken-softcap": ("final_logit_softcapping", None),
              "broken-bidir": ("use_bidirectional_attention", None)}
    for bname, (field, value) in broken.items():
        # staged next to its onnx/ (stable path, see mobius_export) and removed afterwards
        bck = FIXTURES / bname / "checkpoint"
        bck.mkdir(parents=True)
        try:
            cfg = json.loads((ck / "config.json").read_text())
            cfg["text_config"][field] = value
            (bck / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
            shutil.copyfile(ck / "model.safetensors", bck / "model.safetensors")
            mobius_export(bck, FIXTURES / bname / "onnx", "f32")
        finally:
            shutil.rmtree(bck)

    hf = dict(oracle)
    summary[name] = {"S": S, "n_soft_tokens": n_soft, "proofs": proofs, "conditioning": cond, "greedy_scope": greedy_scope,
                     "generate_scopes": gen_scopes, "onnx": {}}
    scopes = {"all-layers": scope_logits["all-layers"], "sliding-windowed": scope_logits["sliding-windowed"],
              "none": scope_logits["none"]}
    for label, d in (("unified-vision f32", fdir / "onnx"), ("unified-vision-f16", FIXTURES / "unified-vision-f16" / "onnx"),
                     ("broken-softcap", FIXTURES / "broken-softcap" / "onnx"),
                     ("broken-bidir", FIXTURES / "broken-bidir" / "onnx")):
        summary[name]["onnx"][label] = report_onnx(label, d, hf, pixel_values, image_position_ids, input_ids, scopes)

    # Localisation (informative): mobius builds the vision LayerNorms with eps = rms_norm_eps (1e-6);
    # HF's nn.LayerNorm uses PyTorch's default 1e-5. Re-run HF with 1e-6 to see what is left.
    with torch.no_grad():
        for mod in model.model.embed_vision.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.eps = 1e-6
        logits_eps = model(**fwd_inputs, use_cache=False).logits
        feats_eps = model.model.get_image_features(pixel_values, image_position_ids).pooler_output
    r = OrtPipeline(fdir / "onnx").prefill_and_generate(input_ids, 1, pixel_values, image_position_ids)
    loc = {"hf_eps1e-6_vs_hf_logits": maxdiff(logits_eps, logits),
           "onnx_vs_hf_eps1e-6_image_features": maxdiff(torch.from_numpy(r["image_features"]), feats_eps),
           "onnx_vs_hf_eps1e-6_logits": maxdiff(torch.from_numpy(r["prefill_logits"]), logits_eps)}
    pipe = OrtPipeline(fdir / "onnx")
    lo, _ = pipe.step(input_ids.numpy(), pipe._empty_past(), 0, inputs_embeds.numpy())
    loc["onnx_decoder_fed_hf_inputs_embeds_vs_hf_logits"] = maxdiff(torch.from_numpy(lo), logits)
    for k, v in loc.items():
        log(f"  [localisation] {k}: {v:.3e}")
    summary[name]["localisation"] = loc

    make_processor_fixture(fdir, text_ids, img_paths, {"input_ids": input_ids, "pixel_values": pixel_values,
                                                       "image_position_ids": image_position_ids,
                                                       "mm_token_type_ids": mm})


def make_text(summary: dict) -> None:
    name = "unified-text-kvshare"
    fdir = FIXTURES / name
    log(f"== {name}")
    cfg_dict = text_kvshare_config_dict()
    config = build_config(cfg_dict, "text")
    torch.manual_seed(0)
    model = Gemma4UnifiedForCausalLM(config)
    init_weights(model, seed=TEXT_WEIGHT_SEED)
    save_checkpoint(model, fdir / "checkpoint")
    del model
    model = load_checkpoint(fdir / "checkpoint", "text")
    state_dict = {k: v.clone() for k, v in model.state_dict().items()}

    def gen(text_ids):
        ids = torch.tensor([[BOS] + text_ids], dtype=torch.long)
        with torch.no_grad():
            return hf_generate(model, input_ids=ids, attention_mask=torch.ones_like(ids))

    text_ids, greedy, step_logits = choose_prompt(text_candidates(11, 50, 23), gen)
    input_ids = torch.tensor([[BOS] + text_ids], dtype=torch.long)
    S = input_ids.shape[1]
    log(f"  prompt S={S}, ids {input_ids[0].tolist()}; greedy {greedy[0].tolist()}")
    log_greedy_margins(step_logits)
    fwd_inputs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    with torch.no_grad():
        logits, inputs_embeds = capture_inputs_embeds(model, "text", **fwd_inputs, use_cache=False)
    assert maxdiff(step_logits[0], logits[0, -1]) < 1e-4
    log(f"  logits range [{float(logits.min()):.2f}, {float(logits.max()):.2f}], std {float(logits.std()):.2f}")
    log("  feature-flag proofs (HF, forward(), prompt above):")
    proofs = flag_proofs("text", cfg_dict, state_dict, fwd_inputs, logits)

    save_tensors(fdir / "inputs.safetensors", {"input_ids": input_ids}, {"format": "pt"})
    paths = {
        "logits": "Gemma4UnifiedForCausalLM.forward(input_ids, attention_mask=ones, use_cache=False).logits",
        "inputs_embeds": "Gemma4UnifiedTextModel.embed_tokens(input_ids) (× sqrt(hidden) included)",
        "greedy_tokens": f"generate(max_new_tokens={N_NEW}, do_sample=False) default DynamicCache, new tokens only",
        "step_logits": "generate(..., output_logits=True, return_dict_in_generate=True).logits stacked; row 0 = "
                       "prefill last position",
    }
    meta = {"format": "pt", "transformers": transformers.__version__, "torch": torch.__version__,
            "attn_implementation": "eager", "paths": json.dumps(paths, sort_keys=True),
            "flag_proofs_max_abs_logit_diff": json.dumps({k: round(v, 6) for k, v in proofs.items()}, sort_keys=True)}
    oracle = {"logits": logits, "inputs_embeds": inputs_embeds, "greedy_tokens": greedy.long(),
              "step_logits": step_logits}
    save_tensors(fdir / "oracle.safetensors", oracle, meta)
    with torch.no_grad():
        cond = report_conditioning(model, "text", fdir, fwd_inputs, logits)
    mobius_export(fdir / "checkpoint", fdir / "onnx", "f32")
    summary[name] = {"S": S, "proofs": proofs, "conditioning": cond, "onnx": {}}
    summary[name]["onnx"]["unified-text-kvshare f32"] = report_onnx("unified-text-kvshare f32", fdir / "onnx", oracle,
                                                                    input_ids=input_ids)


# ---------------------------------------------------------------------------------------------
# phase 2: tiny tokenizer + the real HF Gemma4Unified processor
# ---------------------------------------------------------------------------------------------
# Gemma-4 style special-token strings (image/audio boundaries "<|x>" / "<x|>", soft tokens "<|x|>").
SPECIAL_TOKENS = {PAD: "<pad>", EOS: "<eos>", BOS: "<bos>", UNK: "<unk>", AUDIO_TOKEN: "<|audio|>", BOA: "<|audio>",
                  EOA: "<audio|>", IMAGE_TOKEN: "<|image|>", BOI: "<|image>", EOI: "<image|>", VIDEO_TOKEN: "<|video|>"}
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables


def vocab_word(i: int) -> str:
    """Deterministic pseudo-word for a non-special id (unique over 0..511)."""
    return _SYLLABLES[(i // 70) % 70] + _SYLLABLES[i % 70] if i >= 70 else "x" + _SYLLABLES[i]


def build_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {SPECIAL_TOKENS.get(i) or vocab_word(i): i for i in range(VOCAB)}
    assert len(vocab) == VOCAB
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[UNK]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(SPECIAL_TOKENS[i], special=True, normalized=False)
                            for i in sorted(SPECIAL_TOKENS)])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS)])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"image_token": SPECIAL_TOKENS[IMAGE_TOKEN], "boi_token": SPECIAL_TOKENS[BOI],
                              "eoi_token": SPECIAL_TOKENS[EOI], "audio_token": SPECIAL_TOKENS[AUDIO_TOKEN],
                              "boa_token": SPECIAL_TOKENS[BOA], "eoa_token": SPECIAL_TOKENS[EOA]})


def make_processor_fixture(fdir: Path, text_ids: list[int], img_paths: list[Path], inputs: dict) -> None:
    from transformers import Gemma4UnifiedProcessor
    from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import (
        Gemma4UnifiedAudioFeatureExtractor,
    )
    from transformers.models.gemma4_unified.video_processing_gemma4_unified import Gemma4UnifiedVideoProcessor

    tokenizer = build_tokenizer()
    for tid, name in ((IMAGE_TOKEN, "image_token_id"), (BOI, "boi_token_id"), (EOI, "eoi_token_id")):
        assert getattr(tokenizer, name) == tid, name
    proc = Gemma4UnifiedProcessor(
        feature_extractor=Gemma4UnifiedAudioFeatureExtractor(),
        image_processor=Gemma4UnifiedImageProcessor(**IMAGE_PROCESSOR_KWARGS),
        tokenizer=tokenizer, video_processor=Gemma4UnifiedVideoProcessor())
    words = [vocab_word(i) for i in text_ids]
    img = proc.image_token
    text = " ".join(words[:5]) + f" {img} " + " ".join(words[5:8]) + f" {img} " + " ".join(words[8:])
    call_kwargs = {"return_tensors": "pt"}
    out = proc(images=[load_images(img_paths)], text=[text], **call_kwargs)
    tensors = {k: out[k] for k in ("input_ids", "pixel_values", "image_position_ids", "mm_token_type_ids")}
    same = {k: torch.equal(tensors[k], inputs[k]) for k in tensors}
    log(f"  processor: {type(proc).__name__} on {text!r}")
    log(f"  processor output == inputs.safetensors: {same}")
    assert all(same.values()), "HF processor output differs from inputs.safetensors"
    with tempfile.TemporaryDirectory() as tmp:
        proc.save_pretrained(tmp)
        for f in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
            shutil.copyfile(Path(tmp) / f, fdir / "checkpoint" / f)
            os.chmod(fdir / "checkpoint" / f, 0o644)
    save_tensors(fdir / "processor.safetensors", {k: v.contiguous() for k, v in tensors.items()},
                 {"format": "pt", "source": "transformers Gemma4UnifiedProcessor.__call__ (see processor.json)"})
    desc = {
        "processor_class": "Gemma4UnifiedProcessor",
        "transformers": transformers.__version__,
        "files": "checkpoint/tokenizer.json, checkpoint/tokenizer_config.json, checkpoint/processor_config.json "
                 "(written by Gemma4UnifiedProcessor.save_pretrained)",
        "text": text,
        "images": [str(p.relative_to(fdir)) for p in img_paths],
        "call": "processor(images=[[a, b]], text=[text], **call_kwargs)",
        "call_kwargs": call_kwargs,
        "image_processor_kwargs": IMAGE_PROCESSOR_KWARGS,
        "processor_defaults": {"text_kwargs": {"padding": True, "return_mm_token_type_ids": True},
                               "images_kwargs": {"do_convert_rgb": True}},
        "special_tokens": {SPECIAL_TOKENS[i]: i for i in sorted(SPECIAL_TOKENS)},
        "tokenizer": "tokenizers WordLevel over 512 pseudo-words (id i -> vocab_word(i) in make_fixtures.py), "
                     "WhitespaceSplit pre-tokenizer, TemplateProcessing '<bos> $A' post-processor",
        "equals_inputs_safetensors": True,
    }
    (fdir / "processor.json").write_text(json.dumps(desc, indent=2) + "\n")


OWNED = ["unified-vision", "unified-text-kvshare", "unified-vision-f16", "broken-softcap", "broken-bidir"]


def sha_listing() -> list[str]:
    out = []
    for d in OWNED:
        for p in sorted((FIXTURES / d).rglob("*")):
            if p.is_file():
                out.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(FIXTURES)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="also write the printed summary (markdown) here")
    ap.add_argument("--only", choices=["vision", "text"], help="regenerate one family only")
    ap.add_argument("--logits-of", type=Path, help=argparse.SUPPRESS)  # internal: report_conditioning
    ap.add_argument("--kind", choices=["vision", "text"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.logits_of:
        model = load_checkpoint(args.logits_of / "checkpoint", args.kind)
        with torch.no_grad():
            logits = model(**fixture_forward_inputs(args.logits_of), use_cache=False).logits
        torch.save(logits, args.out)
        return 0
    log(f"transformers {transformers.__version__}, torch {torch.__version__}")
    summary: dict = {}
    if args.only in (None, "vision"):
        for d in ("unified-vision", "unified-vision-f16", "broken-softcap", "broken-bidir"):
            if (FIXTURES / d).exists():
                shutil.rmtree(FIXTURES / d)
        make_vision(summary)
    if args.only in (None, "text"):
        if (FIXTURES / "unified-text-kvshare").exists():
            shutil.rmtree(FIXTURES / "unified-text-kvshare")
        make_text(summary)
    log("== sha256")
    for line in sha_listing():
        log("  " + line)
    if args.report:
        args.report.write_text("\n".join(REPORT) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
