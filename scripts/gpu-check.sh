#!/usr/bin/env bash
# The GPU check, prepared for a GPU machine without network. Needs a cuda build of the binary
# (`eval "$(scripts/cuda-toolchain.sh)"; cargo build --release --features cuda`, on any machine)
# and, for the ONNX Runtime rows, the onnxruntime-gpu library (ORT_DYLIB_PATH, or the cache a
# previous run filled). Runs, in order:
#   1. the TF32 probe: candle on cuda and ORT's CUDA EP, each against f64 on the CPU;
#   2. the reference on the GPU vs on the CPU, every fixture checkpoint × inputs file: logits,
#      components and greedy tokens through `onnx-parity logits`, compared by `onnx-parity
#      compare` (float tensors ≤ GPU_CHECK_MAX_ABS, default 1e-5; tokens equal);
#   3. ORT CUDA where its library is available: each fixture export's logits next to the CPU
#      reference's (informational: the tiers' own tolerances judge), then every committed case
#      through `onnx-parity run` with the reference on cuda (the probe runs first);
# and prints a table. Everything it wrote is under GPU_CHECK_OUT (default $OUT, else
# /tmp/gpu-check). Exit status: 0 when every row passed or was skipped, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

bin="${ONNX_PARITY_BIN:-target/release/onnx-parity}"
out="${GPU_CHECK_OUT:-${OUT:-/tmp/gpu-check}}"
bound="${GPU_CHECK_MAX_ABS:-1e-5}"
greedy="${GPU_CHECK_GREEDY:-4}"
device="${GPU_CHECK_DEVICE:-cuda:0}"
mkdir -p "$out"
export ONNX_PARITY_LOG="${ONNX_PARITY_LOG:-warn}"
# Offline: nothing may reach the network (the hub, pip).
export HF_HUB_OFFLINE=1

rows=()
failed=0
row() { # check, verdict, detail
  rows+=("| $1 | $2 | $3 |")
  [[ $2 == FAIL ]] && failed=1
  echo "gpu-check: $1: $2 $3" >&2
}

if [[ ! -x $bin ]]; then
  echo "gpu-check: no $bin (build it with --features cuda, or set ONNX_PARITY_BIN)" >&2
  exit 2
fi
start=$(date +%s)
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
else
  echo "no nvidia-smi" >"$out/gpu.txt"
fi
row "GPU" info "$(head -1 "$out/gpu.txt")"

# 1. The TF32 probe (prints candle's row, and ORT's when its library loads).
if ONNX_PARITY_DEVICE="$device" "$bin" tf32-probe >"$out/tf32-probe.txt" 2>&1; then
  row "TF32 probe" PASS "$(grep -E 'max_rel_err|not probed' "$out/tf32-probe.txt" | tr -s ' ' | paste -sd ';' -)"
else
  row "TF32 probe" FAIL "$(tail -3 "$out/tf32-probe.txt" | tr -s ' ' | paste -sd ';' -)"
fi

# 2. The reference on the GPU vs on the CPU, every fixture.
for ck in fixtures/*/checkpoint; do
  fx=$(dirname "$ck")
  for inp in "$fx"/inputs*.safetensors; do
    [[ -e $inp ]] || continue
    tag="$(basename "$fx")$(basename "$inp" .safetensors | sed 's/^inputs//')"
    cpu="$out/$tag.cpu.safetensors" gpu="$out/$tag.cuda.safetensors"
    t0=$(date +%s.%N)
    if ! ONNX_PARITY_DEVICE=cpu "$bin" logits --checkpoint "$ck" --inputs "$inp" --out "$cpu" --greedy "$greedy" >>"$out/$tag.log" 2>&1; then
      row "reference cuda vs cpu: $tag" FAIL "the CPU run failed ($out/$tag.log)"
      continue
    fi
    t1=$(date +%s.%N)
    if ! ONNX_PARITY_DEVICE="$device" "$bin" logits --checkpoint "$ck" --inputs "$inp" --out "$gpu" --greedy "$greedy" >>"$out/$tag.log" 2>&1; then
      row "reference cuda vs cpu: $tag" FAIL "the GPU run failed: $(tail -1 "$out/$tag.log")"
      continue
    fi
    t2=$(date +%s.%N)
    times=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "cpu %.1f s, gpu %.1f s", b - a, c - b }')
    if "$bin" compare "$cpu" "$gpu" --max-abs "$bound" >"$out/$tag.compare.txt" 2>&1; then verdict=PASS; else verdict=FAIL; fi
    logits=$(awk '$1 == "logits" { print $NF }' "$out/$tag.compare.txt")
    worst=$(grep -c DIFFERS "$out/$tag.compare.txt")
    row "reference cuda vs cpu: $tag" "$verdict" "logits max_abs_diff ${logits:-?} (bound $bound); $worst tensor(s) over; $times"
  done
done

# 3. ONNX Runtime's CUDA EP, where its library is available.
ort_lib="${ORT_DYLIB_PATH:-${ONNX_PARITY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/onnx-parity}/onnxruntime-gpu-1.31.1/libonnxruntime.so.1.31.1}"
if [[ -f $ort_lib ]]; then
  export ORT_DYLIB_PATH="$ort_lib"
  # The EP is chosen at run time (src/onnx/provider.rs); TF32 off, no silent CPU fallback.
  export ONNX_PARITY_EP="${ONNX_PARITY_EP:-$device}"
  for onnx in fixtures/*/onnx; do
    fx=$(dirname "$onnx")
    tag=$(basename "$fx")
    inp="$fx/inputs.safetensors"
    [[ -e $inp && -e "$out/$tag.cpu.safetensors" ]] || continue
    if "$bin" logits --onnx "$onnx" --inputs "$inp" --out "$out/$tag.ort-cuda.safetensors" --greedy "$greedy" >>"$out/$tag.log" 2>&1; then
      "$bin" compare "$out/$tag.cpu.safetensors" "$out/$tag.ort-cuda.safetensors" --max-abs "$bound" >"$out/$tag.ort-compare.txt" 2>&1
      row "ORT CUDA export vs CPU reference: $tag" info "logits max_abs_diff $(awk '$1 == "logits" { print $NF }' "$out/$tag.ort-compare.txt") (judged by the L3 row below)"
    else
      row "ORT CUDA export: $tag" FAIL "$(tail -1 "$out/$tag.log")"
    fi
  done
  if ONNX_PARITY_DEVICE="$device" "$bin" run cases --report "$out/run.json" --markdown "$out/run.md" >"$out/run.txt" 2>&1; then
    row "onnx-parity run cases/ (reference on $device, ORT CUDA EP)" PASS "$(tail -1 "$out/run.txt")"
  else
    row "onnx-parity run cases/ (reference on $device, ORT CUDA EP)" FAIL "$(tail -1 "$out/run.txt") (see $out/run.md)"
  fi
else
  row "ORT CUDA" skipped "no onnxruntime-gpu library at $ort_lib (set ORT_DYLIB_PATH)"
fi

{
  echo
  echo "| check | verdict | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "gpu-check: $(( $(date +%s) - start )) s; outputs in $out"
} | tee "$out/table.md"
exit "$failed"
