#!/usr/bin/env bash
# CUDA toolchain for `cargo build --features cuda` on a machine without a GPU or a system CUDA.
#
# Installs nvcc, the CUDA headers (runtime, cuBLAS, cuRAND, NVRTC, CCCL/thrust) and the shared
# libraries the link needs from NVIDIA's PyPI wheels (pinned, CUDA 13.0) into a cache folder, merges
# them into one CUDA root, adds the unversioned `lib*.so` names the linker looks for, and builds a
# link-only stub `libcuda.so` (the driver library never comes from PyPI; on a GPU machine the real
# one is found at run time by its soname `libcuda.so.1`). Prints the environment to export.
#
#   eval "$(scripts/cuda-toolchain.sh)"        # installs once, then only prints
#   cargo build --release --features cuda
#
# Environment: ONNX_PARITY_CUDA_TOOLCHAIN (folder, default ~/.cache/onnx-parity/cuda-toolchain),
# CUDA_COMPUTE_CAP (default 80: the architecture the kernels are compiled for when no nvidia-smi
# answers; candle-kernels emits PTX, which the driver JIT-compiles for newer GPUs — 80 runs on
# A100, H100/H200 and later; set 90 for Hopper-only builds), PYTHON.
# Needs python3 with pip and a C compiler (for the stub). Progress goes to stderr, the exports to
# stdout. LD_LIBRARY_PATH is for running a cuda build (it links cuBLAS, cuRAND, NVRTC and cudart
# dynamically; the driver's libcuda.so.1 comes from the GPU machine, never from the stub).
set -euo pipefail

root="${ONNX_PARITY_CUDA_TOOLCHAIN:-$HOME/.cache/onnx-parity/cuda-toolchain}"
python="${PYTHON:-python3}"
cap="${CUDA_COMPUTE_CAP:-80}"
# One CUDA release for every wheel (nvcc's headers and the libraries must agree). CUDA 13.0: PyPI
# has no full nvcc for CUDA 12 (nvidia-cuda-nvcc-cu12 holds ptxas and libnvvm only), and 13.0 is
# the oldest 13.x, so the PTX candle-kernels emits JIT-compiles on any 13.x driver (>= 580).
wheels=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-culibos==13.0.85
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
  nvidia-nvjitlink==13.0.88
)
stamp="$root/.complete-$(printf '%s\n' "${wheels[@]}" | sha256sum | cut -c1-16)"

log() { echo "cuda-toolchain: $*" >&2; }

if [[ ! -e "$stamp" ]]; then
  start=$(date +%s)
  rm -rf "$root.partial"
  mkdir -p "$root.partial/wheels" "$root.partial/cuda"/{bin,include,lib64}
  log "installing ${wheels[*]} into $root"
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$root.partial/wheels" "${wheels[@]}" >&2
  cuda="$root.partial/cuda"
  # Merge each wheel's nvidia/<component>/{bin,include,lib,nvvm} into one CUDA root (hard links:
  # nvcc resolves its nvvm/ and include/ relative to its own directory, so no symlinked bin/).
  for comp in "$root.partial/wheels/nvidia"/*/; do
    for sub in bin include nvvm; do
      [[ -d "$comp$sub" ]] && cp -al "$comp$sub/." "$cuda/$sub/"
    done
    [[ -d "${comp}lib" ]] && cp -al "${comp}lib/." "$cuda/lib64/"
  done
  # CCCL ships its headers one level down in some releases.
  [[ -d "$cuda/include/cccl" ]] && cp -al "$cuda/include/cccl/." "$cuda/include/"
  chmod +x "$cuda/bin"/* "$cuda/nvvm/bin"/* 2>/dev/null || true
  # The linker wants unversioned names (-lcublas → libcublas.so); the wheels ship only sonames.
  for lib in "$cuda/lib64"/lib*.so.*; do
    base="${lib%%.so.*}.so"
    [[ -e "$base" ]] || ln -s "$(basename "$lib")" "$base"
  done
  # Link-only stub of the driver API: every cu* symbol cuda.h declares, soname libcuda.so.1.
  mkdir -p "$cuda/lib64/stubs"
  grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\s*\(' "$cuda/include/cuda.h" | tr -d ' (' | sort -u |
    awk '{print "void " $1 "(void) {}"}' >"$root.partial/libcuda-stub.c"
  # cuda.h #defines versioned names (cuCtxCreate → cuCtxCreate_v2): export both spellings.
  grep -ohE '#define\s+cu[A-Za-z0-9_]+\s+cu[A-Za-z0-9_]+' "$cuda/include/cuda.h" |
    awk '{print "void " $3 "(void) {}"}' >>"$root.partial/libcuda-stub.c"
  sort -u -o "$root.partial/libcuda-stub.c" "$root.partial/libcuda-stub.c"
  "${CC:-cc}" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda/lib64/stubs/libcuda.so" \
    "$root.partial/libcuda-stub.c"
  "$cuda/bin/nvcc" --version >&2
  rm -rf "$root"
  mv "$root.partial" "$root"
  touch "$stamp"
  log "installed in $(( $(date +%s) - start )) s ($(du -sh "$root" | cut -f1))"
fi

cuda="$root/cuda"
cat <<EOF
export CUDA_ROOT="$cuda"
export CUDA_PATH="$cuda"
export CUDA_HOME="$cuda"
export NVCC="$cuda/bin/nvcc"
export PATH="$cuda/bin:\$PATH"
export LIBRARY_PATH="$cuda/lib64:$cuda/lib64/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export CUDA_COMPUTE_CAP="$cap"
export LD_LIBRARY_PATH="$cuda/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
