"""JPEG decoding fixtures: small JPEGs written by Pillow with every encoder option that changes
the decoder's path (chroma subsampling 4:4:4 / 4:2:2 / 4:2:0 / 4:1:1, progressive scans, restart
markers, optimised Huffman tables, greyscale, odd sizes, a 1x1 image), and the RGB bytes Pillow
decodes them to (`Image.open(f).convert("RGB")`, what HF's processors are given) as the oracle of
`src/inputs/jpeg.rs`.

Writes fixtures/jpeg/*.jpg, fixtures/jpeg/pil.safetensors (one uint8 [H, W, 3] tensor per file,
named by the file) and fixtures/jpeg/pil.json (the Pillow and libjpeg-turbo versions). Deterministic: a seeded generator, no timestamps in the files.
"""
import io
import json
import pathlib

import numpy as np
import PIL
from PIL import Image, features
from safetensors.numpy import save

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "jpeg"


def picture(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth colour gradients, sharp edges and noise: every IDCT/upsampling path sees work."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / max(w, 1) * 6.1 + seed)
    g = 128 + 100 * np.cos(y / max(h, 1) * 4.7)
    b = np.where((x // 7 + y // 5) % 2 == 0, 40.0, 215.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 18, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


VARIANTS = [
    # name, (h, w), mode, save options
    ("q90-420.jpg", (45, 67), "RGB", dict(quality=90, subsampling="4:2:0")),
    ("q75-422.jpg", (48, 61), "RGB", dict(quality=75, subsampling="4:2:2")),
    ("q95-444.jpg", (37, 53), "RGB", dict(quality=95, subsampling="4:4:4")),
    ("q80-411.jpg", (40, 77), "RGB", dict(quality=80, subsampling="4:1:1")),
    ("q85-420-progressive.jpg", (64, 83), "RGB", dict(quality=85, subsampling="4:2:0", progressive=True)),
    ("q70-420-restart.jpg", (51, 70), "RGB", dict(quality=70, subsampling="4:2:0", restart_marker_blocks=3)),
    ("q88-422-optimized.jpg", (33, 129), "RGB", dict(quality=88, subsampling="4:2:2", optimize=True)),
    ("q60-grey.jpg", (29, 31), "L", dict(quality=60)),
    ("q92-420-1x1.jpg", (1, 1), "RGB", dict(quality=92, subsampling="4:2:0")),
    ("q50-420-tall.jpg", (131, 9), "RGB", dict(quality=50, subsampling="4:2:0")),
]


def main() -> None:
    assert features.check_feature("libjpeg_turbo"), "Pillow must be built with libjpeg-turbo (as its wheels are)"
    OUT.mkdir(parents=True, exist_ok=True)
    oracle = {}
    for i, (name, (h, w), mode, opts) in enumerate(VARIANTS):
        img = Image.fromarray(picture(h, w, seed=i), "RGB").convert(mode)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", **opts)
        (OUT / name).write_bytes(buf.getvalue())
        decoded = np.asarray(Image.open(OUT / name).convert("RGB"))
        assert decoded.shape == (h, w, 3), (name, decoded.shape)
        oracle[name] = np.ascontiguousarray(decoded)
    # Provenance beside the tensors: safetensors metadata is a hash map, its order not stable.
    (OUT / "pil.safetensors").write_bytes(save(oracle))
    (OUT / "pil.json").write_text(json.dumps({
        "source": "scripts/make_jpeg_fixtures.py",
        "decoded_by": "PIL.Image.open(f).convert('RGB')",
        "pillow": PIL.__version__,
        "libjpeg_turbo": str(features.version("libjpeg_turbo")),
    }, indent=2) + "\n")
    # Malformed JPEGs of the corpus (tests/corpus/image/, tests/corpus.rs): refused with a reason.
    corpus = OUT.parent.parent / "tests" / "corpus" / "image"
    corpus.mkdir(parents=True, exist_ok=True)
    whole = (OUT / "q90-420.jpg").read_bytes()
    (corpus / "truncated.jpg").write_bytes(whole[: len(whole) * 3 // 5])
    buf = io.BytesIO()
    Image.fromarray(picture(16, 16, seed=99), "RGB").convert("CMYK").save(buf, format="JPEG", quality=90)
    (corpus / "cmyk.jpg").write_bytes(buf.getvalue())
    print(f"wrote {len(VARIANTS)} JPEGs and their Pillow {PIL.__version__} (libjpeg-turbo {features.version('libjpeg_turbo')}) decodings to {OUT}")


if __name__ == "__main__":
    main()
