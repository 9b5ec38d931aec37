#!/usr/bin/env python3
"""Media placeholder ids without their media, measured against HF: the numbers behind
cases/vision-language/{gemma4-vision,unified-vision}-placeholders.yaml.

HF's Gemma4Model / Gemma4UnifiedModel forward replaces every image, video and audio placeholder id
by `pad_token_id` before `embed_tokens` (and for the per-layer inputs), whether or not media come
with the prompt. For each fixture this feeds the same ids (placeholders 511, 505 and 508 among text
ids, no pixels) to transformers (eager, float32), the harness's reference (`onnx-parity logits
--checkpoint`) and the export in ONNX Runtime (`onnx-parity logits --onnx`), and prints each
position's largest logit difference from HF, then where the export's `inputs_embeds` rows come
from (the placeholder's own row, the pad row, zeros).

Needs the fixture venv (scripts/fixture-venv.sh: torch, transformers 5.14.1) and a release build:

    PY=$(scripts/fixture-venv.sh); cargo build --release
    $PY scripts/check_placeholders_against_hf.py [--bin target/release/onnx-parity]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDS = [2, 100, 200, 511, 300, 505, 400, 508, 50, 60]
FIXTURES = ["gemma4-vision", "unified-vision"]


def main() -> None:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/onnx-parity")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ids_file = tmp / "ids.safetensors"
        save_file({"input_ids": torch.tensor([IDS], dtype=torch.int64)}, str(ids_file))
        for fixture in FIXTURES:
            checkpoint = ROOT / "fixtures" / fixture / "checkpoint"
            onnx = ROOT / "fixtures" / fixture / "onnx"
            model = transformers.AutoModelForImageTextToText.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
            with torch.no_grad():
                hf = model(input_ids=torch.tensor([IDS])).logits[0].numpy()
            ref, ort = tmp / "reference.safetensors", tmp / "onnx.safetensors"
            for flag, path, out in [("--checkpoint", checkpoint, ref), ("--onnx", onnx, ort)]:
                cmd = [str(args.bin), "logits", flag, str(path), "--inputs", str(ids_file), "--out", str(out)]
                subprocess.run(cmd + (["--no-cache"] if flag == "--checkpoint" else []), check=True, capture_output=True)
            r, o = load_file(str(ref)), load_file(str(ort))
            print(f"{fixture} (transformers {transformers.__version__}): per position, max |logits - HF|")
            for i, t in enumerate(IDS):
                d_ref = float(np.abs(r["logits"][0, i] - hf[i]).max())
                d_ort = float(np.abs(o["logits"][0, i] - hf[i]).max())
                print(f"  id {t:4d}  reference {d_ref:.2e}  onnx {d_ort:.2e}")
            weights = load_file(str(checkpoint / "model.safetensors"))
            table = next(v for k, v in weights.items() if k.endswith("language_model.embed_tokens.weight")).astype(np.float32)
            scale = np.sqrt(np.float32(table.shape[1]))
            pad = json.loads((checkpoint / "config.json").read_text())["text_config"].get("pad_token_id", 0)
            for i, t in enumerate(IDS):
                if t < 505:
                    continue
                row = o["inputs_embeds"][0, i]
                print(f"  the export's inputs_embeds at id {t}: vs its own row {np.abs(row - table[t] * scale).max():.2e}, "
                      f"vs the pad row {np.abs(row - table[pad] * scale).max():.2e}, max |x| {np.abs(row).max():.2e}")


if __name__ == "__main__":
    main()
