#!/usr/bin/env python
"""Real-width memory and time benchmark of L1 + L3: a real Gemma 4 config cut to a few layers (every width,
the 262144-token vocabulary and the image path kept), a random checkpoint of it, its mobius f32 export, and
three runs of the harness, each in its own process:

  reference alone   onnx-parity logits --checkpoint ... --greedy K --layers   (what L3's reference side computes)
  ORT alone         onnx-parity logits --onnx ...       --greedy K --layers   (what L3's ONNX side computes)
  L1 + L3           onnx-parity run case.yaml --levels L1,L3                  (both, sequenced in one process)
  L1 + L3, int4     (--int4) the same on an int4 build of the export (ONNX Runtime's MatMulNBitsQuantizer, RTN,
                    block 32, symmetric, accuracy_level 4, MatMul and Gather: what onnxruntime-genai's builder
                    writes for CPU), judged on its dequantized weights; its peak beside the f32 build's

  L1 + L3, warm     the combined run again: its reference side read from the reference cache (issue 44: at most
                    1.25 x ORT alone, peak at most 1.1 x ORT alone's; the first, cold, run at most 2.5 x ORT alone)
  L1 + L3, fixed    (--fixed) the combined run under `l3_rule: fixed` without the cache (no f64 arbiter, no floors):
                    the cold calibrated run's yardstick at 12B width (at most 2 x)

The combined runs use a reference cache of their own (<work>/reference-cache, emptied before the cold run); the
sizes of its entries are printed from the cold run's log.

For each: wall time and peak RSS (the child's ru_maxrss). The target (issue 17): the L1 + L3 peak at most
1.2 x the larger of the two "alone" peaks; the ratio is printed. The combined run's log also names each
side's own peak (`peak RSS` in the `ran in` lines; the harness resets the high-water mark per side).

With --device cuda every run puts the reference on cuda:0 and ONNX Runtime on its CUDA EP, and also
records the GPU's peak memory (nvidia-smi's memory.used sampled every 100 ms, less what was in use before
the run): the target (issue 37) is the L1 + L3 GPU peak at most 1.1 x the larger "alone" GPU peak. It adds
  reference again   the reference alone a second time: the first process on a machine JIT-compiles candle's
                    PTX (the harness keeps the driver's cache under its cache root), the second must cost
                    what the first does without it (first / second <= 1.2 once the cache is warm)
  L1 + L3 on cpu    the combined run on the CPU (reference and ONNX Runtime), for the GPU's wall ratio

Presets (widths from cases/configs/, weights random: only time and memory mean anything):
  12b   gemma4_unified (gemma-4-12B.json), 6 layers (5 sliding + 1 full), one 256-token image + text, 1100 tokens
  e2b   gemma4_text (gemma-4-E2B-it.json text_config), 10 layers of which 4 KV-shared, PLE, 600 tokens
  e2b-full  the same at full size: all 35 layers, 20 KV-shared (4.6 G parameters); with --int4 the issue-44
        setup (the int4 build's first run at most 1.25 x the f32 build's, its peak at most 1.25 x the larger
        side alone: `reference` and `ort-int4`). Disk ~9 GB checkpoint + ~19 GB export + ~4 GB int4 build;
        the f32 runs need ~15 GB of memory, run it alone

Needs the fixture venv (scripts/fixture-venv.sh: torch, transformers, mobius-onnx) and a release build of the
harness. Disk: 12b ~5 GB checkpoint (bf16) + ~10 GB export; e2b ~4 + ~7 GB. The 12b export and runs need most
of a 24 GB machine; run it alone. Artifacts are reused when present (--fresh rebuilds them).

    PY=$(scripts/fixture-venv.sh); cargo build --release
    $PY scripts/bench_real_width.py --model 12b --work /tmp/bench-12b [--bin target/release/onnx-parity]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "cases" / "configs"
SEED = 1234
BOS, BOI, EOI, IMAGE = 2, 255999, 258882, 258880

PRESETS = {
    "12b": dict(config="gemma-4-12B.json", layers=6, kv_shared=0, tokens=1100, image_grid=(16, 16), text_only=False),
    "e2b": dict(config="gemma-4-E2B-it.json", layers=10, kv_shared=4, tokens=600, image_grid=None, text_only=True),
    "e2b-full": dict(config="gemma-4-E2B-it.json", layers=35, kv_shared=20, tokens=600, image_grid=None, text_only=True),
}


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def derive_config(preset: dict) -> dict:
    """The real config with the text decoder cut to `layers` layers (the first ones of the real layer-type
    pattern, so sliding and full layers both occur) and `kv_shared` KV-shared layers; audio dropped (out of
    scope). Text-only presets become a `*_text` config of the real text_config."""
    real = json.loads((CONFIGS / preset["config"]).read_text())
    text = dict(real["text_config"])
    n = preset["layers"]
    text["num_hidden_layers"] = n
    text["layer_types"] = list(text["layer_types"][:n])
    assert {"sliding_attention", "full_attention"} <= set(text["layer_types"]), text["layer_types"]
    text["num_kv_shared_layers"] = preset["kv_shared"]
    if preset["text_only"]:
        text["model_type"] = real["model_type"] + "_text"
        text["architectures"] = None
        return text
    cfg = dict(real)
    cfg["text_config"] = text
    cfg["audio_config"] = None
    return cfg


def fill_random(model, seed: int) -> None:
    """Random weights with unit-variance layer outputs (N(0, 1/fan_in)), norms and scalars around 1,
    clip bounds open; written in row chunks so no f32 temporary of a whole embedding table is made."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point():
                continue
            if p.ndim >= 2:
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


def write_checkpoint(cfg: dict, out: Path) -> int:
    """A random bf16 checkpoint of `cfg` (unit-variance layer outputs, norms around 1), sharded like the hub."""
    import torch
    import transformers

    model_type = cfg["model_type"]
    classes = {
        "gemma4_unified": ("Gemma4UnifiedConfig", "Gemma4UnifiedForConditionalGeneration"),
        "gemma4": ("Gemma4Config", "Gemma4ForConditionalGeneration"),
        "gemma4_text": ("Gemma4TextConfig", "Gemma4ForCausalLM"),
        "gemma4_unified_text": ("Gemma4UnifiedTextConfig", "Gemma4UnifiedForCausalLM"),
    }[model_type]
    config_cls, model_cls = (getattr(transformers, c) for c in classes)
    kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "model_type")}
    config = config_cls(**kwargs)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = model_cls(config)
    model = model.to_empty(device="cpu").eval()
    model.tie_weights()
    fill_random(model, SEED)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size="2GB")
    n = sum(p.numel() for p in model.parameters())
    del model
    return n


def write_inputs(cfg: dict, preset: dict, path: Path) -> dict:
    """input_ids of `tokens` positions (BOS, an image block when the preset has one, then text ids) and the
    image tensors in the HF processor layout, random pixels in [-1, 1]."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    rng = np.random.default_rng(SEED)
    s = preset["tokens"]
    tensors = {}
    ids = [BOS]
    if preset["image_grid"]:
        vision = cfg["vision_config"]
        k = vision.get("pooling_kernel_size", 3)
        p = vision.get("patch_size", 16)
        rows_max = vision.get("num_soft_tokens") or vision.get("default_output_length") or 280
        w, h = preset["image_grid"]
        real_rows = w * h
        assert real_rows <= rows_max, (real_rows, rows_max)
        dim = 3 * (k * p) ** 2
        px = rng.uniform(-1.0, 1.0, size=(1, rows_max, dim)).astype("float32")
        pos = np.full((1, rows_max, 2), -1, dtype="int64")
        for i in range(real_rows):
            pos[0, i] = (i % w, i // w)
        px[0, real_rows:] = 0.0
        tensors["pixel_values"] = torch.from_numpy(px)
        tensors["image_position_ids"] = torch.from_numpy(pos)
        ids += [BOI] + [IMAGE] * real_rows + [EOI]
    ids += [int(t) for t in rng.integers(1000, 200000, size=s - len(ids))]
    assert len(ids) == s
    tensors["input_ids"] = torch.tensor([ids], dtype=torch.int64)
    if preset["image_grid"]:
        tensors["mm_token_type_ids"] = torch.tensor([[1 if t == IMAGE else 0 for t in ids]], dtype=torch.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
    return {"tokens": s, "image_tokens": ids.count(IMAGE)}


def gpu_used_mib(gpu: int) -> int | None:
    """The GPU's memory in use (MiB, every process's) as the driver reports it; None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--id={gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class GpuPeak:
    """Samples the GPU's memory in use every `every` seconds while a run lasts; the peak is what the run added
    over the memory in use before it started."""

    def __init__(self, gpu: int, every: float = 0.1):
        import threading

        self.gpu, self.every = gpu, every
        self.baseline = gpu_used_mib(gpu)
        self.peak = self.baseline
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.stop.is_set():
            used = gpu_used_mib(self.gpu)
            if used is not None and (self.peak is None or used > self.peak):
                self.peak = used
            self.stop.wait(self.every)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def gib(self) -> float | None:
        if self.baseline is None or self.peak is None:
            return None
        return round((self.peak - self.baseline) / 1024, 2)


def measured(cmd: list[str], env: dict | None = None, log_file: Path | None = None, gpu: int | None = None) -> dict:
    """Runs `cmd` and returns its exit status, wall seconds and peak RSS (GiB) from wait4's rusage; with `gpu`,
    also the GPU memory it added at its peak (GiB, from the driver)."""
    t = time.monotonic()
    out = open(log_file, "w") if log_file else subprocess.DEVNULL
    sampler = GpuPeak(gpu) if gpu is not None else None
    if sampler:
        sampler.__enter__()
    report = Path(cmd[cmd.index("--report") + 1]) if "--report" in cmd else None
    if report is not None:
        report.unlink(missing_ok=True)  # a stale report's peak is not this run's
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    if sampler:
        sampler.__exit__()
    if log_file:
        out.close()
    code = os.waitstatus_to_exitcode(status)
    # ru_maxrss is the kernel's high-water mark at exit, which the harness resets at each stage to log that
    # stage's peak: it is the last stage's peak, not the run's. A run that writes a report gives the peak across
    # its stages (metadata.peak_rss_gib); the larger of the two is the run's.
    peak = usage.ru_maxrss / 2**20
    if report is not None and report.is_file():
        try:
            peak = max(peak, json.loads(report.read_text())["metadata"].get("peak_rss_gib") or 0.0)
        except (ValueError, KeyError):
            pass
    r = {"cmd": " ".join(map(str, cmd)), "exit": code, "wall_s": round(wall, 1), "peak_rss_gib": round(peak, 2)}
    if sampler:
        r["gpu_peak_gib"] = sampler.gib()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the checkpoint, export, inputs and reports")
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/onnx-parity")
    ap.add_argument("--steps", type=int, default=4, help="greedy decode steps (max_new_tokens)")
    ap.add_argument("--fresh", action="store_true", help="rebuild checkpoint, export and inputs")
    ap.add_argument("--no-layers", action="store_true", help="logits runs without --layers (binaries before the flag)")
    ap.add_argument("--fixed", action="store_true", help="also the combined run under l3_rule: fixed, without the cache")
    ap.add_argument("--only", choices=["reference", "reference-again", "ort", "combined", "combined-warm", "combined-fixed", "combined-cpu",
                                       "combined-int4", "combined-int4-warm", "ort-int4"], action="append",
                    help="run only these (repeatable)")
    ap.add_argument("--prepare-only", action="store_true", help="write checkpoint, export and inputs, run nothing")
    ap.add_argument("--int4", action="store_true", help="also quantize the export to int4 and run L1 + L3 on it")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the reference on cuda:0 and ONNX Runtime on its CUDA EP (a --features cuda binary), "
                         "GPU peaks from nvidia-smi, the reference run twice (JIT) and the combined run on the CPU too")
    args = ap.parse_args()
    preset = PRESETS[args.model]
    work = args.work
    ckpt, onnx, inputs = work / "checkpoint", work / "onnx", work / "inputs.safetensors"
    if args.fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    cfg = derive_config(preset)
    result = {"model": args.model, "preset": preset, "steps": args.steps, "bin": str(args.bin)}

    if not (ckpt / "config.json").is_file():
        log(f"writing a random checkpoint of {preset['config']} cut to {preset['layers']} layers into {ckpt}")
        t = time.monotonic()
        result["parameters"] = write_checkpoint(cfg, ckpt)
        log(f"  {result['parameters'] / 1e9:.2f} G parameters in {time.monotonic() - t:.0f} s")
    if not (onnx.is_dir() and any(onnx.iterdir())):
        log(f"exporting with mobius (f32) into {onnx}")
        r = measured([sys.executable, "-m", "mobius", "build", "--config", str(ckpt), str(onnx), "--dtype", "f32"],
                     log_file=work / "export.log")
        result["export"] = r
        log(f"  {r}")
        if r["exit"] != 0:
            sys.exit(f"mobius build failed: see {work / 'export.log'}")
    if not inputs.is_file():
        result["inputs"] = write_inputs(cfg, preset, inputs)
    case = work / "bench" / f"{args.model}-width.yaml"
    case.parent.mkdir(parents=True, exist_ok=True)
    case.write_text(
        f"model_id: bench/{args.model}-width\nmodel_type: {cfg['model_type']}\ndtype: float32\nlevels: [L1, L3]\n"
        f"checkpoint: {ckpt}\nonnx: {onnx}\ninputs: {{tensors: {inputs}}}\ngeneration: {{max_new_tokens: {args.steps}}}\n"
        f"notes: real-width benchmark (scripts/bench_real_width.py), random weights\n"
    )
    runs_int4 = {}
    if args.int4:
        onnx4 = work / "onnx-int4"
        if not (onnx4 / "model.onnx").is_file():
            sys.path.insert(0, str(ROOT / "scripts"))
            import make_quantized_fixtures as mq  # noqa: E402 - the fixtures' quantizer settings, one source

            log(f"quantizing {onnx} to int4 (block {mq.BLOCK_SIZE}, symmetric, accuracy_level 4) into {onnx4}")
            t = time.monotonic()
            model, _ = mq.quantize(onnx / "model.onnx", 4, True, 4, ("MatMul", "Gather"))
            mq.save(model, onnx4 / "model.onnx")
            del model
            result["int4_quantize_s"] = round(time.monotonic() - t, 1)
        case4 = work / "bench" / f"{args.model}-width-int4.yaml"
        case4.write_text(case.read_text().replace("dtype: float32", "dtype: int4").replace(f"onnx: {onnx}\n", f"onnx: {onnx4}\n")
                         .replace("random weights", "random weights, int4 build"))
        runs_int4["ort-int4"] = [str(args.bin), "logits", "--onnx", str(onnx4), "--inputs", str(inputs), "--out",
                                 str(work / "ort-int4.safetensors"), "--greedy", str(args.steps), "--layers"]
        runs_int4["combined-int4"] = [str(args.bin), "run", str(case4), "--levels", "L1,L3", "--report", str(work / "report-int4.json")]
        runs_int4["combined-int4-warm"] = runs_int4["combined-int4"]
    if args.prepare_only:
        (work / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
        return
    layers = [] if args.no_layers else ["--layers"]
    runs = {
        "reference": [str(args.bin), "logits", "--checkpoint", str(ckpt), "--inputs", str(inputs), "--out",
                      str(work / "reference.safetensors"), "--greedy", str(args.steps), *layers],
        "ort": [str(args.bin), "logits", "--onnx", str(onnx), "--inputs", str(inputs), "--out",
                str(work / "ort.safetensors"), "--greedy", str(args.steps), *layers],
        "combined": [str(args.bin), "run", str(case), "--levels", "L1,L3", "--report", str(work / "report.json")],
        "combined-warm": [str(args.bin), "run", str(case), "--levels", "L1,L3", "--report", str(work / "report-warm.json")],
        **runs_int4,
    }
    if args.fixed:
        fixed = work / "bench" / f"{args.model}-width-fixed.yaml"
        fixed.write_text(case.read_text() + "l3_rule: fixed\n")
        runs["combined-fixed"] = [str(args.bin), "run", "--no-cache", str(fixed), "--levels", "L1,L3", "--report", str(work / "report-fixed.json")]
    cache = work / "reference-cache"
    if cache.exists() and (not args.only or "combined" in args.only):
        shutil.rmtree(cache)
    env = {"ONNX_PARITY_LOG": "info", "ONNX_PARITY_REFERENCE_CACHE": str(cache)}
    gpu = None
    if args.device == "cuda":
        gpu = 0
        env.update({"ONNX_PARITY_DEVICE": "cuda:0", "ONNX_PARITY_EP": "cuda:0"})
        runs = {"reference": runs["reference"], "reference-again": runs["reference"], **{k: v for k, v in runs.items() if k != "reference"},
                "combined-cpu": [*runs["combined"][:-1], str(work / "report-cpu.json")]}
    result["device"] = args.device
    for name, cmd in runs.items():
        if args.only and name not in args.only:
            continue
        log(f"{name}: {' '.join(cmd)}")
        on_cpu = name == "combined-cpu"
        run_env = {**env, "ONNX_PARITY_DEVICE": "cpu", "ONNX_PARITY_EP": "cpu"} if on_cpu else env
        if name == "combined-int4":
            # The int4 build's first run is cold too: its own cache, emptied (the f32 build's
            # entries would otherwise serve its float reference).
            shutil.rmtree(work / "reference-cache-int4", ignore_errors=True)
        if name.startswith("combined-int4"):
            run_env = {**run_env, "ONNX_PARITY_REFERENCE_CACHE": str(work / "reference-cache-int4")}
        r = measured(cmd, env=run_env, log_file=work / f"{name}.log", gpu=None if on_cpu else gpu)
        result[name] = r
        log(f"  exit {r['exit']}, {r['wall_s']} s, peak RSS {r['peak_rss_gib']} GiB"
            + (f", GPU peak {r['gpu_peak_gib']} GiB" if "gpu_peak_gib" in r else ""))
        for f in (work / f"{name}.safetensors",):
            if f.exists():
                f.unlink()
    if all(k in result for k in ("reference", "ort", "combined")):
        alone = max(result["reference"]["peak_rss_gib"], result["ort"]["peak_rss_gib"])
        result["combined_over_alone"] = round(result["combined"]["peak_rss_gib"] / alone, 3)
        log(f"L1+L3 peak / max(alone) = {result['combined_over_alone']} (target <= 1.2)")
        gpu_peaks = [result[k].get("gpu_peak_gib") for k in ("reference", "ort", "combined")]
        if all(p is not None for p in gpu_peaks) and max(gpu_peaks[:2]) > 0:
            result["gpu_combined_over_alone"] = round(gpu_peaks[2] / max(gpu_peaks[:2]), 3)
            log(f"L1+L3 GPU peak / max(alone) = {result['gpu_combined_over_alone']} (target <= 1.1)")
    ort = result.get("ort", {}).get("wall_s")
    for name in ("combined", "combined-warm", "combined-int4", "combined-int4-warm"):
        if ort and name in result:
            result[f"{name}_over_ort"] = round(result[name]["wall_s"] / ort, 3)
            result[f"{name}_peak_over_ort"] = round(result[name]["peak_rss_gib"] / result["ort"]["peak_rss_gib"], 3)
            log(f"{name}: wall / ORT alone = {result[f'{name}_over_ort']}, peak / ORT alone's = {result[f'{name}_peak_over_ort']}")
    if "combined" in result and "combined-fixed" in result:
        result["cold_over_fixed"] = round(result["combined"]["wall_s"] / result["combined-fixed"]["wall_s"], 3)
        log(f"cold calibrated run / fixed-rule run = {result['cold_over_fixed']} (target <= 2 at 12B width)")
    for name in ("combined", "combined-int4"):
        logf = work / f"{name}.log"
        if logf.is_file():
            import re
            sizes = re.findall(r": (.+?) stored in the reference cache \(([\d.]+) MB\)", logf.read_text())
            if sizes:
                result[f"{name}_cache_entries_mb"] = {what: float(mb) for what, mb in sizes}
                log(f"{name}: cache entries (MB): {result[f'{name}_cache_entries_mb']}")
    if "reference" in result and "reference-again" in result and result["reference-again"]["wall_s"] > 0:
        result["reference_first_over_again"] = round(result["reference"]["wall_s"] / result["reference-again"]["wall_s"], 3)
        log(f"reference first / again = {result['reference_first_over_again']} (JIT; target <= 1.2 with a warm cache)")
    if "combined" in result and "combined-cpu" in result and result["combined-cpu"]["wall_s"] > 0:
        result["gpu_over_cpu_wall"] = round(result["combined"]["wall_s"] / result["combined-cpu"]["wall_s"], 3)
        log(f"L1+L3 wall on the GPU / on the CPU = {result['gpu_over_cpu_wall']} (target < 1)")
    for key, name in (("verdicts", "report.json"), ("verdicts_warm", "report-warm.json"), ("verdicts_cpu", "report-cpu.json"),
                      ("verdicts_int4", "report-int4.json"), ("verdicts_fixed", "report-fixed.json")):
        report = work / name
        if report.is_file():
            r = json.loads(report.read_text())
            result[key] = {lv["level"]: lv["status"] for lv in r["cases"][0]["levels"]}
    if "combined" in result and "combined-int4" in result:
        result["int4_over_f32_peak"] = round(result["combined-int4"]["peak_rss_gib"] / result["combined"]["peak_rss_gib"], 3)
        log(f"int4 L1+L3 peak / f32 L1+L3 peak = {result['int4_over_f32_peak']} (target <= 1)")
        result["int4_over_f32_wall"] = round(result["combined-int4"]["wall_s"] / result["combined"]["wall_s"], 3)
        log(f"int4 first run / f32 build's first run = {result['int4_over_f32_wall']} (target <= 1.25 at full E2B size)")
    if "combined-int4" in result and "reference" in result and "ort-int4" in result:
        alone = max(result["reference"]["peak_rss_gib"], result["ort-int4"]["peak_rss_gib"])
        result["int4_peak_over_alone"] = round(result["combined-int4"]["peak_rss_gib"] / alone, 3)
        log(f"int4 L1+L3 peak / max(reference alone, ORT int4 alone) = {result['int4_peak_over_alone']} (target <= 1.25)")
    (work / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
