#!/usr/bin/env bash
# Creates (or reuses) the pinned Python venv used only to regenerate fixtures.
# Tests never need it. The venv lives outside the repository (~6 GB).
# Usage: scripts/fixture-venv.sh  -> prints the venv's python path on the last line.
# olive-ai (scripts/make_olive_builder_fixtures.py) imports requests without declaring it.
set -euo pipefail
VENV="${ONNX_PARITY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/onnx-parity/fixture-venv}"
PINS=(torch==2.15.0 torchvision==0.29.2 transformers==5.14.1 mobius-onnx==0.1.0 onnxruntime==1.31.1 onnx-ir==1.1.0 safetensors numpy pillow==13.0.0 jinja2==3.1.6 olive-ai==0.13.0 requests)
# onnxruntime-genai's model builder (the exporters issue's fixtures) installed without its
# dependencies: its wheel requires onnxruntime 1.32.0, and the fixtures are made and checked with
# the 1.31.1 the harness runs; the builder itself needs only torch, transformers and onnx.
NODEPS=(onnxruntime-genai==0.18.0)
STAMP="$VENV/.pins"
want="${PINS[*]} --no-deps ${NODEPS[*]}"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  echo "$VENV/bin/python"; exit 0
fi
echo "creating fixture venv at $VENV (pins: $want)" >&2
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
# CPU-only torch keeps the venv smaller when the index offers it; fall back to the default wheel.
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}" >&2
"$VENV/bin/python" -m pip install --quiet --no-deps "${NODEPS[@]}" >&2
echo "$want" > "$STAMP"
echo "$VENV/bin/python"
