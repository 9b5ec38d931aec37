"""Chat-template fixture: what HF transformers' processor makes of a prompt and an image through a
chat template (`apply_chat_template(..., add_generation_prompt=True, tokenize=True)`), and without
one, on the unified-vision fixture's tokenizer and image processor with fixtures/chat-template/
chat_template.jinja beside them (a Gemma-shaped template written in the fixture's vocabulary:
`xbu` opens a turn, `xda` closes it; it uses trim, `is string`, `{%- -%}` whitespace control,
trim_blocks/lstrip_blocks and the `image_token` special token).

Writes fixtures/chat-template/hf.json: the rendered text and input_ids of each call (tests/cli.rs
`inputs_*_chat_template*` compare `onnx-parity inputs` with them).
"""
import json
import pathlib
import shutil
import tempfile

import transformers
from transformers import AutoProcessor

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "chat-template"
CKPT = ROOT / "fixtures" / "unified-vision" / "checkpoint"
IMAGE = ROOT / "fixtures" / "unified-vision" / "images" / "a.png"
PROMPT = "  dado bupa bipi  "


def main() -> None:
    out = {"source": "scripts/make_chat_template_fixture.py", "transformers": transformers.__version__,
           "checkpoint": "fixtures/unified-vision/checkpoint (tokenizer, processor, config) + fixtures/chat-template/chat_template.jinja",
           "prompt": PROMPT, "image": "fixtures/unified-vision/images/a.png"}
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json"]:
            shutil.copy(CKPT / f, d / f)
        shutil.copy(FIX / "chat_template.jinja", d / "chat_template.jinja")
        p = AutoProcessor.from_pretrained(d)
        assert p.chat_template is not None, "the processor did not pick up chat_template.jinja"
        for name, content in [
            ("image_and_text", [{"type": "image", "path": str(IMAGE)}, {"type": "text", "text": PROMPT}]),
            ("text_only", [{"type": "text", "text": PROMPT}]),
        ]:
            messages = [{"role": "user", "content": content}]
            text = p.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            enc = p.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
            out[name] = {"rendered": text, "input_ids": [int(i) for i in enc["input_ids"][0]]}
        # Without a template (chat_template: false): mobius's image-then-text prompt, special tokens added.
        from PIL import Image
        enc = p(text=[p.image_token + PROMPT], images=[Image.open(IMAGE)])
        out["plain_image_and_text"] = {"text": p.image_token + PROMPT, "input_ids": [int(i) for i in enc["input_ids"][0]]}
    (FIX / "hf.json").write_text(json.dumps(out, indent=2) + "\n")
    print({k: len(v["input_ids"]) for k, v in out.items() if isinstance(v, dict)})


if __name__ == "__main__":
    main()
