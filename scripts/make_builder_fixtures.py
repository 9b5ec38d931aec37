#!/usr/bin/env python
"""Exports of committed checkpoints by onnxruntime-genai 0.18.0's model builder, the other exporter
users deploy Gemma 4 with, and the builder's refusals on the others.

  python -m onnxruntime_genai.models.builder -i CHECKPOINT -o OUT -p PRECISION -e EP -c CACHE [--extra_options ...]

The builder writes the *text component* of a composite checkpoint (Gemma4UnifiedForConditionalGeneration:
no vision encoder, no embedding model): one model.onnx taking input_ids / attention_mask / position_ids and
past_key_values.N.{key,value}, returning logits and present.N.*, with genai_config.json (the runtime
contract ORT GenAI reads: context_length, past_present_share_buffer, the sliding-window block) and the
checkpoint's tokenizer files.

Builds (fixtures/<fixture>/builder/<build>/):
  unified-vision/builder/fp32        -p fp32 -e cpu       (the builder's defaults: windowed KV cache)
  unified-vision/builder/fp32-dense  -p fp32 -e cpu --extra_options windowed_kv_cache=false
  unified-vision/builder/fp32-pruned -p fp32 -e cpu --extra_options prune_lm_head=true  (logits of the last
                                                           position only: [batch, 1, vocab])
  unified-vision/builder/fp32-no-embeds -p fp32 -e cpu --extra_options exclude_embeds=true  (the decoder takes
                                                           inputs_embeds; the package has no embedding model)
  unified-vision/builder/fp32-mutant the fp32 build with model.layers.2.post_feedforward_layernorm.weight x1.01
                                     (a one-layer mutant: localisation without mobius's node names)
  unified-vision/builder/int4        -p int4 -e cpu       (MatMulNBits, the builder's own quantizer)
  unified-vision/builder/fp16-cuda   -p fp16 -e cuda      (float16 activations and KV)
  unified-vision/builder/bf16-cuda   -p bf16 -e cuda      (bfloat16 activations and KV, logits cast to float32;
                                                           no bfloat16 kernels on the CPU EP: L1 only here)
  unified-vision/builder/fp16-webgpu -p fp16 -e webgpu    (genai_config.json: enableGraphCapture "0")
  unified-vision/builder/fp16-dml    -p fp16 -e dml       (genai_config.json: enable_graph_capture "1")
  builder-scale/builder/fp32         a composite checkpoint at hidden 48 (builder-scale/checkpoint, made here
                                     from the unified-vision config, seeded): the builder rounds the
                                     embedding scale to two decimals (6.93 for sqrt(48) = 6.9282)

Refusals (recorded in fixtures/builder.json with the builder's last message; fixtures/README.md quotes
them): gemma4-vision, unified-text-kvshare, gemma4-text-dense (the text fixtures lent unified-vision's
tokenizer files so that the builder reaches the model).

The external-data file is renamed by the builder from the output name; nothing in the builds depends on
the machine except `genai_config.json`'s tokenizer paths (none: the builder writes names only). Reruns are
byte-identical (the script checks the tree hash twice when run with --check).

Run in the pinned fixture venv (scripts/fixture-venv.sh):
    $(scripts/fixture-venv.sh) scripts/make_builder_fixtures.py
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

BUILDS = {
    "unified-vision": {
        "fp32": ["-p", "fp32", "-e", "cpu"],
        "fp32-dense": ["-p", "fp32", "-e", "cpu", "--extra_options", "windowed_kv_cache=false"],
        "fp32-pruned": ["-p", "fp32", "-e", "cpu", "--extra_options", "prune_lm_head=true"],
        "fp32-no-embeds": ["-p", "fp32", "-e", "cpu", "--extra_options", "exclude_embeds=true"],
        "int4": ["-p", "int4", "-e", "cpu"],
        "fp16-cuda": ["-p", "fp16", "-e", "cuda"],
        "bf16-cuda": ["-p", "bf16", "-e", "cuda"],
        "fp16-webgpu": ["-p", "fp16", "-e", "webgpu"],
        "fp16-dml": ["-p", "fp16", "-e", "dml"],
    },
    "builder-scale": {
        "fp32": ["-p", "fp32", "-e", "cpu"],
    },
}
# The one-layer mutant: (fixture, source build, mutant build, initializer, factor).
MUTANT = ("unified-vision", "fp32", "fp32-mutant", "model.layers.2.post_feedforward_layernorm.weight", 1.01)
REFUSED = ["gemma4-vision", "unified-text-kvshare", "gemma4-text-dense"]


def run_builder(checkpoint: Path, out: Path, flags: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(out), "-c", cache, *flags]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def last_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def scale_checkpoint() -> Path:
    """A Gemma4UnifiedForConditionalGeneration checkpoint at hidden 48 (the unified-vision config with
    hidden_size 48), random weights seeded: sqrt(48) = 6.9282 is where two-decimal rounding shows."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import init_weights, save_checkpoint  # the committed fixtures' recipe

    src = FIXTURES / "unified-vision" / "checkpoint"
    dst = FIXTURES / "builder-scale" / "checkpoint"
    config = AutoConfig.from_pretrained(src)
    config.text_config.hidden_size = 48
    model = AutoModelForImageTextToText.from_config(config).eval()
    init_weights(model, seed=48)
    save_checkpoint(model, dst)
    for f in ["tokenizer.json", "tokenizer_config.json", "processor_config.json"]:
        shutil.copyfile(src / f, dst / f)
    return dst


def make_mutant() -> dict:
    """The source build with one layer's initializer scaled, every other tensor and node as built (onnx
    re-lays the external-data file)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    fixture, source, build, name, factor = MUTANT
    src, out = FIXTURES / fixture / "builder" / source, FIXTURES / fixture / "builder" / build
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    model = onnx.load(str(src / "model.onnx"))
    (target,) = [t for t in model.graph.initializer if t.name == name]
    scaled = (numpy_helper.to_array(target) * np.float32(factor)).astype(np.float32)
    target.CopyFrom(numpy_helper.from_array(scaled, name))
    (out / "model.onnx").unlink()
    (out / "model.onnx.data").unlink()
    onnx.save(model, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx.data", size_threshold=1024)
    (out / "model.onnx.data").chmod(0o644)
    print(f"{fixture}/builder/{build}: {name} x{factor}")
    return {"from": f"{fixture}/builder/{source}", "initializer": name, "factor": factor}


def main() -> None:
    record = {"onnxruntime-genai": version("onnxruntime-genai"), "transformers": version("transformers"), "builds": {}, "refused": {}}
    scale_checkpoint()
    for fixture, builds in BUILDS.items():
        for build, flags in builds.items():
            out = FIXTURES / fixture / "builder" / build
            if out.exists():
                shutil.rmtree(out)
            done = run_builder(FIXTURES / fixture / "checkpoint", out, flags)
            if done.returncode != 0:
                raise SystemExit(f"{fixture}/{build}: the builder failed: {last_error(done.stderr)}")
            files = sorted(p.name for p in out.iterdir())
            record["builds"][f"{fixture}/{build}"] = {"flags": flags, "files": files}
            print(f"{fixture}/builder/{build}: {', '.join(files)}")
    record["builds"]["/".join(MUTANT[:1] + MUTANT[2:3])] = make_mutant()
    for fixture in REFUSED:
        # The text fixtures ship no tokenizer; the unified one's is lent so that the builder reaches
        # the model (without one it stops at "You need to have sentencepiece or tiktoken installed").
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = Path(tmp) / "checkpoint"
            shutil.copytree(FIXTURES / fixture / "checkpoint", checkpoint)
            for f in ["tokenizer.json", "tokenizer_config.json"]:
                if not (checkpoint / f).exists():
                    shutil.copyfile(FIXTURES / "unified-vision" / "checkpoint" / f, checkpoint / f)
            done = run_builder(checkpoint, Path(tmp) / "out", ["-p", "fp32", "-e", "cpu"])
            if done.returncode == 0:
                raise SystemExit(f"{fixture}: the builder no longer refuses it; make it a build")
            message = last_error(done.stderr).replace(str(checkpoint), f"fixtures/{fixture}/checkpoint")
        record["refused"][fixture] = message
        print(f"{fixture}: refused: {record['refused'][fixture]}")
    (FIXTURES / "builder.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
