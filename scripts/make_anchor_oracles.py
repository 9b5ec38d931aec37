"""HF's processor output on mobius's anchor data, as the oracle of the anchors conformance test
(tests/anchors.rs, `conformance::*`).

Builds, in a temp dir, the checkpoint-like folders that ../shared/anchors/gemma4-tokenizer/README.md
describes (a real config.json from hf-configs/, the stand-in tokenizer.json, the tokenizer config
and processor config that fit the model), runs HF transformers' AutoProcessor on mobius's cat
image and prompts the way mobius made its goldens (chat template for the -it vision-language
cases, image-then-text without template for 12B), checks that the ids equal the goldens', and
writes tests/data/anchor-oracles.json: per processor family, the SHA-256 of the pixel_values
(float32 little-endian) and image_position_ids (int64) bytes, their shapes and sums, and the
soft-token count. Hashes and sums only: the anchors' image itself is not copied into the project.

Usage: python scripts/make_anchor_oracles.py [ANCHORS_DIR]  (default ../shared/anchors, or
$ONNX_PARITY_ANCHORS).
"""
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import PIL
import torch
import transformers
from PIL import Image
from transformers import AutoProcessor

ROOT = pathlib.Path(__file__).resolve().parent.parent
ANCHORS = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ONNX_PARITY_ANCHORS", ROOT.parent / "shared" / "anchors"))
TOK = ANCHORS / "gemma4-tokenizer"
CAT = ANCHORS / "mobius" / "testdata" / "pipeline-cat-chonk.jpeg"

# (family, mobius vision-language case, hf-configs file, tokenizer config, processor config)
MODELS = [
    ("gemma4", "gemma-4-e2b-it", "gemma-4-E2B-it.json", "it", "gemma4"),
    ("gemma4_unified", "gemma-4-12b", "gemma-4-12B.json", "base", "gemma4_unified"),
]


def folder(tmp: pathlib.Path, config: str, tok: str, proc: str) -> pathlib.Path:
    d = tmp / config.removesuffix(".json")
    d.mkdir()
    shutil.copy(ANCHORS / "hf-configs" / config, d / "config.json")
    shutil.copy(TOK / "tokenizer.json", d / "tokenizer.json")
    shutil.copy(TOK / f"tokenizer_config.{tok}.json", d / "tokenizer_config.json")
    shutil.copy(TOK / f"processor_config.{proc}.json", d / "processor_config.json")
    return d


def digest(t: torch.Tensor, dtype) -> dict:
    a = np.ascontiguousarray(t.numpy().astype(dtype))
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest(),
            "sum": float(a.astype(np.float64).sum())}


def main() -> None:
    out = {"source": "scripts/make_anchor_oracles.py", "transformers": transformers.__version__, "torch": torch.__version__,
           "pillow": PIL.__version__, "image": "mobius/testdata/pipeline-cat-chonk.jpeg", "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for family, case, config, tok, proc in MODELS:
            d = folder(pathlib.Path(tmp), config, tok, proc)
            p = AutoProcessor.from_pretrained(d)
            image = Image.open(CAT)
            golden = json.loads((ANCHORS / "mobius" / "golden" / "vision-language" / f"{case}.json").read_text())["input_ids"]
            if tok == "base":
                enc = p(text=[p.image_token + "This image shows"], images=[image], return_tensors="pt")
            else:
                messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image in detail."}]}]
                # The template lives in tokenizer_config.json, which HF gives the tokenizer, not the processor.
                text = p.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                enc = p(text=[text], images=[image], return_tensors="pt", add_special_tokens=False)
            ids = enc["input_ids"][0].tolist()
            assert ids == golden, f"{case}: HF's ids are not the golden's (first {next(i for i, (a, b) in enumerate(zip(ids, golden)) if a != b)})"
            out["families"][family] = {
                "processor": type(p.image_processor).__name__,
                "case": f"vision-language/{case}",
                "pixel_values": digest(enc["pixel_values"], np.float32),
                "image_position_ids": digest(enc["image_position_ids"], np.int64),
                "soft_tokens": int((enc["input_ids"][0] == p.image_token_id).sum()),
            }
            print(f"{family}: {type(p.image_processor).__name__} pixel_values {out['families'][family]['pixel_values']['shape']}, "
                  f"{out['families'][family]['soft_tokens']} soft tokens, ids == golden ({len(ids)})")
    (ROOT / "tests" / "data" / "anchor-oracles.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
