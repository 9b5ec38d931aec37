#!/usr/bin/env python
"""mobius `--runtime ort-genai` packages of the committed checkpoints: the export plus the
genai_config.json onnxruntime-genai runs it through, judged by both the harness's own pipeline and
ORT GenAI (the `ort-genai` implementation, src/backend/ort_genai.rs).

  python -m mobius build --config CHECKPOINT OUT --dtype f32 --runtime ort-genai

Packages (fixtures/<fixture>/ort-genai/):
  gemma4-text-dense, gemma4-text-moe, gemma4-text-ple, unified-text-kvshare, unified-vision
and one deliberately broken runtime contract:
  gemma4-text-dense/ort-genai-share-buffer  the dense package with genai_config.json's
      search.past_present_share_buffer set to true. mobius writes false for gemma4 because the
      sliding and full layers' head dims differ (16 and 32 here) and its graphs use the standard
      Attention op with a growing past; ORT GenAI with a shared buffer feeds a past of max_length
      positions, and the Attention kernel refuses it ("inconsistent total_sequence_length").
      The graphs are the dense package's, byte for byte: the harness's pipeline, which sizes the
      KV cache from the graph, passes it.

The checkpoints carry no tokenizer files; ORT GenAI needs none to run token ids (mobius warns).
Reruns are byte-identical. Run in the pinned fixture venv (scripts/fixture-venv.sh):
    $(scripts/fixture-venv.sh) scripts/make_genai_fixtures.py
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PACKAGES = ["gemma4-text-dense", "gemma4-text-moe", "gemma4-text-ple", "unified-text-kvshare", "unified-vision"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(fixture: str) -> Path:
    out = FIXTURES / fixture / "ort-genai"
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "ort-genai"
        cmd = [sys.executable, "-m", "mobius", "build", "--config", str(FIXTURES / fixture / "checkpoint"), str(staged),
               "--dtype", "f32", "--runtime", "ort-genai"]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if res.returncode != 0:
            raise SystemExit(f"[{fixture}] mobius build failed: {res.stderr.strip().splitlines()[-1:]}")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(staged, out)
    log(f"[{fixture}] {out.relative_to(ROOT)}: {sorted(p.name for p in out.iterdir())}")
    return out


def broken_share_buffer(dense: Path) -> None:
    out = dense.parent / "ort-genai-share-buffer"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(dense, out)
    config_path = out / "genai_config.json"
    config = json.loads(config_path.read_text())
    assert config["search"]["past_present_share_buffer"] is False, "mobius now writes a shared buffer: revisit"
    config["search"]["past_present_share_buffer"] = True
    config_path.write_text(json.dumps(config, indent=4) + "\n")
    log(f"[broken] {out.relative_to(ROOT)}: past_present_share_buffer true")


def broken_sliding_window(dense: Path) -> None:
    out = dense.parent / "ort-genai-sliding-window"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(dense, out)
    config_path = out / "genai_config.json"
    config = json.loads(config_path.read_text())
    assert "sliding_window" not in config["model"]["decoder"], "mobius now writes a sliding_window block: revisit"
    # The block ORT GenAI's model builder writes for a windowed GroupQueryAttention cache.
    config["model"]["decoder"]["sliding_window"] = {"window_size": 8, "slide_key_value_cache": True, "slide_inputs": True,
                                                    "pad_value": 0, "alignment": "left"}
    config_path.write_text(json.dumps(config, indent=4) + "\n")
    log(f"[broken] {out.relative_to(ROOT)}: a sliding_window block")


def main() -> None:
    built = {fixture: build(fixture) for fixture in PACKAGES}
    broken_share_buffer(built["gemma4-text-dense"])
    broken_sliding_window(built["gemma4-text-dense"])


if __name__ == "__main__":
    main()
