#!/usr/bin/env bash
# Regenerates the committed fixtures (fixtures/*, layout in fixtures/README.md).
# Creates/reuses the pinned venv (scripts/fixture-venv.sh), then runs scripts/make_fixtures.py
# on CPU, single-threaded, offline. Extra arguments go to make_fixtures.py (--report FILE, --only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(scripts/fixture-venv.sh | tail -n 1)"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 CUDA_VISIBLE_DEVICES="" \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" scripts/make_fixtures.py "$@"
# float64 HF oracles for the reference's semantics test (reference/tests/f64_semantics.rs).
for fixture in unified-vision unified-text-kvshare; do
  "$PY" scripts/hf_f64_oracle.py "$fixture"
done
