#!/usr/bin/env bash
# The GPU check, for a GPU machine without network: run it from a bundle made by
# scripts/gpu-bundle.sh (bin/onnx-parity built with --features cuda for the GPU's SM, cases/,
# goldens/, fixtures/, and cache/ holding ONNX Runtime CPU and GPU, ORT GenAI and its ONNX
# Runtime) or from a checkout with a cuda build (ONNX_PARITY_BIN, ONNX_PARITY_CACHE). Runs:
#   1. the TF32 probe: candle on cuda and ORT's CUDA EP, each against f64 on the CPU;
#   2. the reference on the GPU against the reference on the CPU, every fixture checkpoint ×
#      inputs: the GPU dump judged against the f64 arbiter with the CPU f32 run as its floor
#      (`compare --arbiter`: the calibrated rule's float32 row, no hand-set bound), greedy tokens
#      equal;
#   3. every committed case twice, on the CPU (reference and ONNX Runtime on the CPU EP) and on the
#      GPU (reference on cuda, each build on the CUDA EP where it targets it), then `onnx-parity
#      diff` of the two reports: the trials whose verdict differs (want: none but real EP
#      differences, each explained) and those one run only ran (builds not for CUDA), with why;
# and prints a table with the times. Everything it writes is under GPU_CHECK_OUT (default $OUT,
# else /tmp/gpu-check). Exit status: 0 when every row passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

bin="${ONNX_PARITY_BIN:-}"
[[ -z $bin && -x bin/onnx-parity ]] && bin=bin/onnx-parity
bin="${bin:-target/release/onnx-parity}"
[[ -d cache && -z ${ONNX_PARITY_CACHE:-} ]] && export ONNX_PARITY_CACHE="$PWD/cache"
out="${GPU_CHECK_OUT:-${OUT:-/tmp/gpu-check}}"
greedy="${GPU_CHECK_GREEDY:-4}"
device="${GPU_CHECK_DEVICE:-cuda:0}"
mkdir -p "$out"
export ONNX_PARITY_LOG="${ONNX_PARITY_LOG:-warn}"
# Offline: nothing may reach the network (the hub, pip).
export HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 PIP_INDEX_URL=http://127.0.0.1:9/simple
# The CUDA libraries the binary and ORT's CUDA EP link (cuBLAS, cuRAND, cudart 13): a system
# CUDA, else NVIDIA's pip packages beside the machine's python (torch images carry them).
libs=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null)
for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64; do [[ -d $d ]] && libs="${libs:+$libs:}$d"; done
export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "gpu-check: LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2

rows=()
failed=0
row() { # check, verdict, detail
  rows+=("| $1 | $2 | $3 |")
  [[ $2 == FAIL ]] && failed=1
  echo "gpu-check: $1: $2 $3" >&2
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

if [[ ! -x $bin ]]; then
  echo "gpu-check: no $bin (scripts/gpu-bundle.sh makes a bundle; or build with --features cuda and set ONNX_PARITY_BIN)" >&2
  exit 2
fi
start=$(date +%s)
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
else
  echo "no nvidia-smi" >"$out/gpu.txt"
fi
row "GPU" info "$(head -1 "$out/gpu.txt")"

# 1. The TF32 probe (candle on the device; ORT on the CPU EP and the CUDA EP).
t0=$(date +%s.%N)
if ONNX_PARITY_DEVICE="$device" ONNX_PARITY_EP="cpu,$device" "$bin" tf32-probe >"$out/tf32-probe.txt" 2>&1; then
  row "TF32 probe" PASS "$(grep -E 'max_rel_err|not probed' "$out/tf32-probe.txt" | tr -s ' ' | paste -sd ';' -) ($(secs "$t0" "$(date +%s.%N)") s)"
else
  row "TF32 probe" FAIL "$(tail -3 "$out/tf32-probe.txt" | tr -s ' ' | paste -sd ';' -)"
fi

# 1b. The JIT tax: one fixture's GPU reference run in two processes. candle's kernels are PTX the
# driver compiles at a process's first kernel; the harness keeps the compiled code under
# $ONNX_PARITY_CACHE/cuda-jit-cache (src/driver.rs), so the second process must cost what the
# first does without the compile (ratio ≤ 1.2 once the cache holds them).
jit_ck="" jit_in=""
for ck in fixtures/*/checkpoint; do
  [[ -e $(dirname "$ck")/inputs.safetensors ]] && { jit_ck=$ck; jit_in=$(dirname "$ck")/inputs.safetensors; break; }
done
if [[ -n $jit_ck && -n $jit_in ]]; then
  jit_dir="${ONNX_PARITY_CACHE:-$HOME/.cache/onnx-parity}/cuda-jit-cache"
  warm=$([[ -d $jit_dir ]] && echo "warm, $(du -sh "$jit_dir" | cut -f1)" || echo cold)
  times=()
  for i in 1 2; do
    t0=$(date +%s.%N)
    ONNX_PARITY_DEVICE="$device" "$bin" logits --checkpoint "$jit_ck" --inputs "$jit_in" --out "$out/jit-$i.safetensors" >>"$out/jit.log" 2>&1
    times+=("$(secs "$t0" "$(date +%s.%N)")")
  done
  ratio=$(awk -v a="${times[0]}" -v b="${times[1]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
  verdict=$(awk -v r="$ratio" -v w="$warm" 'BEGIN { print (w == "cold" ? "info" : (r <= 1.2 ? "PASS" : "FAIL")) }')
  row "JIT: reference on $device, 1st vs 2nd process" "$verdict" "${times[0]} s vs ${times[1]} s (×$ratio); JIT cache $jit_dir was $warm (cold: the 1st pays the compile once per machine)"
fi

# 1c. Evidence for an off-target build (the plan does not run a webgpu build on CUDA): mobius's
# `--ep webgpu` f16 build computes GroupQueryAttention's total_sequence_length (a CPU input of
# CUDA's kernel) as Gather(Cast(ReduceSum(attention_mask))) on the device, where its `--ep cuda`
# build takes Shape(attention_mask)[1] on the host. On an H200 it failed "Flash total sequence
# length must be positive and fit int32"; run it as it is and with flash attention off, so the
# table says whether only the flash path's sizing reads a bad length.
wg=fixtures/unified-text-kvshare/variants/webgpu-f16
if [[ -d $wg ]]; then
  for flash in on off; do
    extra=(); [[ $flash == off ]] && extra=(env ORT_DISABLE_FLASH_ATTENTION=1)
    if "${extra[@]}" "$bin" logits --onnx "$wg" --ep "$device" --inputs fixtures/unified-text-kvshare/inputs.safetensors \
      --out "$out/webgpu-f16-flash-$flash.safetensors" --greedy "$greedy" >"$out/webgpu-f16-flash-$flash.log" 2>&1; then
      row "off-target: @webgpu-f16 on $device, flash $flash" info "runs"
    else
      row "off-target: @webgpu-f16 on $device, flash $flash" info "$(grep -v '^\s*$' "$out/webgpu-f16-flash-$flash.log" | tail -1 | cut -c1-240)"
    fi
  done
fi

# 2. The reference on the GPU against the CPU, judged by the f64 arbiter.
for ck in fixtures/*/checkpoint; do
  fx=$(dirname "$ck")
  for inp in "$fx"/inputs*.safetensors; do
    [[ -e $inp ]] || continue
    tag="$(basename "$fx")$(basename "$inp" .safetensors | sed 's/^inputs//')"
    cpu="$out/$tag.cpu.safetensors" gpu="$out/$tag.cuda.safetensors" f64="$out/$tag.f64.safetensors"
    t0=$(date +%s.%N)
    if ! ONNX_PARITY_DEVICE=cpu "$bin" logits --checkpoint "$ck" --inputs "$inp" --out "$cpu" --greedy "$greedy" >>"$out/$tag.log" 2>&1; then
      row "reference cuda vs cpu: $tag" FAIL "the CPU run failed: $(tail -1 "$out/$tag.log")"
      continue
    fi
    t1=$(date +%s.%N)
    if ! ONNX_PARITY_DEVICE="$device" "$bin" logits --checkpoint "$ck" --inputs "$inp" --out "$gpu" --greedy "$greedy" >>"$out/$tag.log" 2>&1; then
      row "reference cuda vs cpu: $tag" FAIL "the GPU run failed: $(tail -1 "$out/$tag.log")"
      continue
    fi
    t2=$(date +%s.%N)
    if ! ONNX_PARITY_DEVICE=cpu "$bin" logits --checkpoint "$ck" --inputs "$inp" --out "$f64" --dtype f64 >>"$out/$tag.log" 2>&1; then
      row "reference cuda vs cpu: $tag" FAIL "the f64 run failed: $(tail -1 "$out/$tag.log")"
      continue
    fi
    if "$bin" compare "$cpu" "$gpu" --arbiter "$f64" >"$out/$tag.compare.txt" 2>&1; then verdict=PASS; else verdict=FAIL; fi
    logits=$(grep -E '^logits ' "$out/$tag.compare.txt" | tr -s ' ' | cut -d' ' -f2-)
    row "reference cuda vs cpu: $tag" "$verdict" "logits: ${logits:-?}; $(grep -c DIFFERS "$out/$tag.compare.txt") tensor(s) over; cpu $(secs "$t0" "$t1") s, gpu $(secs "$t1" "$t2") s"
  done
done

# 3. Every committed case on the CPU, then on the GPU, and the verdicts that differ.
t0=$(date +%s.%N)
ONNX_PARITY_EP=cpu ONNX_PARITY_DEVICE=cpu "$bin" run cases --report "$out/cpu.json" --markdown "$out/cpu.md" >"$out/cpu.txt" 2>&1
t1=$(date +%s.%N)
row "run cases/ on the CPU (reference cpu, CPU EP)" info "$(grep -E "^[0-9]+ passed" "$out/cpu.txt" | tail -1) ($(secs "$t0" "$t1") s)"
ONNX_PARITY_EP="$device" ONNX_PARITY_DEVICE="$device" "$bin" run cases --report "$out/gpu.json" --markdown "$out/gpu.md" >"$out/gpu.txt" 2>&1
t2=$(date +%s.%N)
row "run cases/ on the GPU (reference $device, CUDA EP)" info "$(grep -E "^[0-9]+ passed" "$out/gpu.txt" | tail -1) ($(secs "$t1" "$t2") s)"
if [[ -s $out/cpu.json && -s $out/gpu.json ]]; then
  if "$bin" diff "$out/cpu.json" "$out/gpu.json" >"$out/diff.md" 2>&1; then verdict=PASS; else verdict=FAIL; fi
  row "verdicts CPU run vs GPU run" "$verdict" "$(grep -E '^[0-9]+ trials with the same verdict' "$out/diff.md") (table: $out/diff.md)"
else
  row "verdicts CPU run vs GPU run" FAIL "a run wrote no report (see $out/cpu.txt, $out/gpu.txt)"
fi

{
  echo
  echo "| check | verdict | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  [[ -s $out/diff.md ]] && cat "$out/diff.md"
  echo
  echo "gpu-check: $(( $(date +%s) - start )) s; outputs in $out"
} | tee "$out/table.md"
exit "$failed"
