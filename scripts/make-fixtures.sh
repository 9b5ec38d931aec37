#!/usr/bin/env bash
# Regenerates the committed fixtures (fixtures/*, layout in fixtures/README.md).
# Creates/reuses the pinned venv (scripts/fixture-venv.sh), then runs, on CPU, single-threaded, offline:
#   unified family: scripts/make_fixtures.py (extra arguments of this script go to it: --report FILE, --only)
#   gemma4 family:  scripts/make_fixtures_gemma4.py (arguments from $GEMMA4_FIXTURE_ARGS, e.g.
#                   "--only gemma4-vision --report /tmp/g4.log")
#   real family:    scripts/make_real_fixtures.py, fixtures/real-<model>-{text,vision}/ derived from the real configs
#                   in cases/configs/ (arguments from $REAL_FIXTURE_ARGS, e.g. "--only real-12b-vision")
#   broken family:  scripts/make_broken_layer_fixtures.py, exports of the unified/gemma4 text fixtures with one
#                   decoder layer's MLP weight perturbed (fixtures/broken-mlp-layer, fixtures/gemma4-broken-mlp-layer)
#   mutant family:  scripts/make_mutant_fixtures.py, copies of the unified-vision f32/f16 exports with decoder layer 2's
#                   layer_scalar x1.01 (fixtures/unified-vision-mutant, fixtures/unified-vision-f16-mutant)
#   quantized family: scripts/make_quantized_fixtures.py, ONNX Runtime MatMulNBits/GatherBlockQuantized builds (int4,
#                   int4-acc4, int4-asym, int8) of the gemma4-text-dense, gemma4-text-ple and unified-vision f32 exports
#                   (fixtures/<fixture>/variants/<build>/, fixtures/<fixture>/quantized.json) and two int4 mutants of
#                   gemma4-text-dense (variants/int4-mutant-scales, variants/int4-mutant-nibbles); and
#                   scripts/make_quantizer_dialect_fixtures.py, ORT's RTN and QDQ dialects of gemma4-text-ple
#                   (variants/rtn, rtn-acc4, qdq and their scale mutants; quantizer-dialects.json), and
#                   scripts/make_activation_quant_fixtures.py, builds that quantize activations of gemma4-text-ple
#                   and unified-vision (variants/dynamic*, qdq-w8a8*, qdq-w8a16*, qop-w8a8*; activation-quantized.json)
#   jpeg family:    scripts/make_jpeg_fixtures.py, fixtures/jpeg/: JPEGs written by Pillow and Pillow's RGB decoding of them
#   unrunnable family: scripts/make_unrunnable_fixtures.py, builds ORT accepts but cannot run on the CPU EP
#                   (fixtures/gemma4-text-moe/variants/geglu: MoE activation_type geglu); and
#                   scripts/make_bf16_boundary_fixture.py, a bf16 build the CPU EP runs
#                   (fixtures/unified-text-kvshare/variants/bf16-boundary: bf16 KV and logits, f32 inside)
#   builder family: scripts/make_builder_fixtures.py, onnxruntime-genai 0.18.0 model builder exports of the
#                   unified-vision checkpoint (fixtures/unified-vision/builder/<build>/) and of a hidden-48 composite
#                   checkpoint (fixtures/builder-scale/), the builder's refusals in fixtures/builder.json; and
#                   scripts/make_olive_builder_fixtures.py, Olive 0.13.0's RTN builds of gemma4-text-ple
#                   (variants/olive*), rtn-acc4's mutant, the builder's int4 at accuracy_level 1 and its mutants
#   dynamo family:  scripts/make_dynamo_fixtures.py, torch.onnx.export(dynamo=True) exports of HF's own text models
#                   (fixtures/<fixture>/dynamo/) and a one-layer mutant (fixtures/gemma4-text-dense/dynamo-mutant/)
# and the float64 HF oracles of the unified and gemma4 families (reference/tests/data/<fixture>-f64.safetensors).
#   genai family:   scripts/make_genai_fixtures.py, mobius --runtime ort-genai packages (fixtures/<fixture>/ort-genai/)
#                   and two broken runtime contracts of gemma4-text-dense's (ort-genai-share-buffer, ort-genai-sliding-window)
# FIXTURE_FAMILIES="unified gemma4 real broken mutant quantized jpeg unrunnable builder dynamo genai" (default) selects the families.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(scripts/fixture-venv.sh | tail -n 1)"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 CUDA_VISIBLE_DEVICES="" \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONDONTWRITEBYTECODE=1
FAMILIES="${FIXTURE_FAMILIES:-unified gemma4 real broken mutant quantized jpeg unrunnable builder dynamo genai}"
for family in $FAMILIES; do
  case "$family" in
    unified)
      "$PY" scripts/make_fixtures.py "$@"
      # float64 HF oracles for the reference's semantics test (reference/tests/f64_semantics.rs).
      for fixture in unified-vision unified-text-kvshare; do
        "$PY" scripts/hf_f64_oracle.py "$fixture"
      done
      ;;
    gemma4)
      # shellcheck disable=SC2086  # word-splitting of the argument list is intended
      "$PY" scripts/make_fixtures_gemma4.py ${GEMMA4_FIXTURE_ARGS:-}
      for fixture in gemma4-text-ple gemma4-text-moe gemma4-vision gemma4-vision-large; do
        "$PY" scripts/hf_f64_oracle.py "$fixture"
      done
      ;;
    real)
      # shellcheck disable=SC2086  # word-splitting of the argument list is intended
      "$PY" scripts/make_real_fixtures.py ${REAL_FIXTURE_ARGS:-}
      ;;
    broken)
      "$PY" scripts/make_broken_layer_fixtures.py
      ;;
    mutant)
      "$PY" scripts/make_mutant_fixtures.py
      ;;
    quantized)
      "$PY" scripts/make_quantized_fixtures.py
      "$PY" scripts/make_quantizer_dialect_fixtures.py
      # Builds that quantize activations too (issue 43): dynamic, static QDQ 8/16-bit, QOperator.
      "$PY" scripts/make_activation_quant_fixtures.py
      ;;
    jpeg)
      "$PY" scripts/make_jpeg_fixtures.py
      ;;
    builder)
      "$PY" scripts/make_builder_fixtures.py
      # Olive's RTN builds of gemma4-text-ple and the builder's quantized variants (issue 38); after
      # the builder's int4 build, whose mutant it derives. No telemetry leaves the machine.
      OLIVE_DISABLE_TELEMETRY=1 "$PY" scripts/make_olive_builder_fixtures.py
      ;;
    dynamo)
      "$PY" scripts/make_dynamo_fixtures.py
      ;;
    genai)
      "$PY" scripts/make_genai_fixtures.py
      ;;
    unrunnable)
      "$PY" scripts/make_unrunnable_fixtures.py
      "$PY" scripts/make_bf16_boundary_fixture.py
      ;;
    *) echo "unknown fixture family: $family (unified, gemma4, real, broken, mutant, quantized, jpeg, unrunnable, builder, dynamo)" >&2; exit 2 ;;
  esac
done
