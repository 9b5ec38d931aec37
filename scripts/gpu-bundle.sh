#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine without network into one folder, to copy
# to an air-gapped GPU box and run there as `OUT/scripts/gpu-check.sh`:
#   bin/onnx-parity   the release binary with --features cuda, candle's kernels built for the
#                     target GPU's SM (PTX: the driver JIT-compiles them at the first process's
#                     first kernel into cache/cuda-jit-cache, src/driver.rs; later processes reuse it)
#   cases/ goldens/ fixtures/ scripts/gpu-check.sh
#   cache/            ONNX Runtime 1.31.1 CPU and GPU (the CUDA provider library cut to the SM
#                     with cuda-fatbin-prune.py: 284 MB → its one SM's cubins), onnxruntime-genai
#                     0.18.0 and the ONNX Runtime 1.32.0 it runs on (`onnx-parity fetch --runtimes`)
#
#   scripts/gpu-bundle.sh OUT [SM]      # SM: 90 for H100/H200; default: nvidia-smi's, else 90
#
# Needs what `cargo build --features cuda` needs (scripts/cuda-toolchain.sh installs nvcc from
# PyPI, no GPU required), python3 with pip, and the pruning tool (CUDA_FATBIN_PRUNE, default
# ../shared/tools/cuda-fatbin-prune.py; without it the provider library is copied whole, 284 MB).
# The GPU machine needs its driver and CUDA 13's cuBLAS, cuRAND and cudart (a system CUDA, or
# NVIDIA's pip packages, which gpu-check.sh finds beside python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/gpu-bundle.sh OUT [SM]}"
sm="${2:-${CUDA_COMPUTE_CAP:-}}"
if [[ -z $sm ]] && command -v nvidia-smi >/dev/null; then
  sm=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
fi
sm="${sm:-90}"
prune="${CUDA_FATBIN_PRUNE:-../shared/tools/cuda-fatbin-prune.py}"
start=$(date +%s)
log() { echo "gpu-bundle: $*" >&2; }

rm -rf "$out.partial"
mkdir -p "$out.partial"/{bin,scripts,cache}
log "building the cuda binary for sm_$sm"
eval "$(CUDA_COMPUTE_CAP="$sm" bash scripts/cuda-toolchain.sh)"
# Its own target folder (CUDA_TARGET_DIR, default target/cuda): the cuda build's candle differs
# from the CPU build's, which the fetch below runs.
target="${CUDA_TARGET_DIR:-target/cuda}"
CUDA_COMPUTE_CAP="$sm" cargo build --release --features cuda --bin onnx-parity --target-dir "$target"
cp "$target/release/onnx-parity" "$out.partial/bin/"
cp -r cases goldens fixtures "$out.partial/"
cp scripts/gpu-check.sh "$out.partial/scripts/"
# The runtimes, fetched by a CPU build (the cuda binary needs the driver to start).
log "fetching the runtimes into $out.partial/cache"
ONNX_PARITY_CACHE="$out.partial/cache" ONNX_PARITY_EP=cpu,cuda cargo run -q --bin onnx-parity -- fetch --runtimes --no-hub cases
provider="$out.partial/cache/onnxruntime-gpu-1.31.1/libonnxruntime_providers_cuda.so"
if [[ -f $prune ]]; then
  log "cutting $(du -h "$provider" | cut -f1) $(basename "$provider") to sm_$sm"
  python3 "$prune" "$provider" "$provider.pruned" --keep "$sm"
  mv "$provider.pruned" "$provider"
else
  log "no $prune: the CUDA provider library is copied whole"
fi
find "$out.partial/cache" -name .lock -delete
rm -rf "$out"
mv "$out.partial" "$out"
log "$out: $(du -sh "$out" | cut -f1) in $(( $(date +%s) - start )) s; on the GPU machine: $out/scripts/gpu-check.sh"
