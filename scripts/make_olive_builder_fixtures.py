"""More quantizers' builds for issue 38, beside scripts/make_quantizer_dialect_fixtures.py (whose builds
this script leaves as committed):

  gemma4-text-ple/variants/   (from the committed mobius f32 export, fixtures/gemma4-text-ple/onnx/)
    olive                   Olive 0.13.0 OnnxBlockWiseRtnQuantization with its defaults (int4, block 128,
                            symmetric, accuracy_level unset; MatMul and Gather), the RoPE caches' Gathers
                            excluded (nodes_to_exclude): `…weight_t_Q4`, `…weight_t_scales`, the token
                            tables as GatherBlockQuantized
    olive-acc4              the same at accuracy_level 4
    olive-mutant-scales     olive with model.layers.1.mlp.gate_proj.weight_t_scales x1.25
    olive-rope              Olive's defaults as they are: the RoPE cos/sin caches (Gathers on
                            initializers, like the token tables) are quantized to int4 too
    rtn-acc4-mutant-scales  the committed rtn-acc4 with model.layers.1.mlp.gate_proj.weight_t_scale x1.25
  unified-vision/builder/     (onnxruntime-genai 0.18.0's model builder, as scripts/make_builder_fixtures.py)
    int4-acc1               -p int4 -e cpu --extra_options accuracy_level=1 (fp32 compute: no int8
                            activations; the committed `int4` is the builder's CPU default, level 4)
    int4-mutant-qkv-scales  the committed int4 with layer 1's fused qkv_proj scales x1.25
    int4-acc1-mutant-scales int4-acc1 with layer 1's mlp.gate_proj scales x1.25

Records: fixtures/gemma4-text-ple/olive.json, fixtures/unified-vision/builder-quantized.json.

    OLIVE_DISABLE_TELEMETRY=1 $(scripts/fixture-venv.sh) scripts/make_olive_builder_fixtures.py

(the venv pins olive-ai 0.13.0; scripts/make-fixtures.sh runs it in its builder family). Reruns are
byte-identical (checked: a second run left every committed file as it was).
"""

import json
import logging
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_quantized_fixtures import max_abs, op_counts, oracle_logits, run, save, sha256_tree  # noqa: E402
from make_quantizer_dialect_fixtures import scale_initializer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLE = "gemma4-text-ple"
SRC = ROOT / "fixtures" / PLE / "onnx" / "model.onnx"
UNIFIED = "unified-vision"
BUILDER = ROOT / "fixtures" / UNIFIED / "builder"


def olive_rtn(dst, accuracy_level, exclude_rope):
    """Olive's RTN pass on the f32 export into `dst`/model.onnx (+ model.onnx.data)."""
    from olive.model import ONNXModelHandler
    from olive.passes.olive_pass import create_pass_from_dict
    from olive.passes.onnx.rtn_quantization import OnnxBlockWiseRtnQuantization

    source = onnx.load(str(SRC), load_external_data=False)
    rope = [n.name for n in source.graph.node if n.op_type == "Gather" and "rotary_emb" in n.name]
    config = {"accuracy_level": accuracy_level} if accuracy_level else {}
    if exclude_rope:
        config["nodes_to_exclude"] = rope
    with tempfile.TemporaryDirectory() as tmp:
        p = create_pass_from_dict(OnnxBlockWiseRtnQuantization, config, disable_search=True)
        out = p.run(ONNXModelHandler(model_path=str(SRC)), str(Path(tmp) / "out"))
        model = onnx.load(out.model_path)
    if dst.exists():
        shutil.rmtree(dst)
    save(model, dst / "model.onnx")
    onnx.checker.check_model(str(dst / "model.onnx"))
    return rope


def make_olive(record, f32_out):
    outs = {}
    for build, acc, exclude in [("olive", 0, True), ("olive-acc4", 4, True), ("olive-rope", 0, False)]:
        dst = ROOT / "fixtures" / PLE / "variants" / build
        rope = olive_rtn(dst, acc, exclude)
        saved = onnx.load(str(dst / "model.onnx"), load_external_data=False)
        counts = op_counts(saved)
        outs[build] = run(dst / "model.onnx", PLE)
        names = sorted(t.name for t in saved.graph.initializer if "layers.0.self_attn.q_proj" in t.name)
        gathers = sorted(n.input[0] for n in saved.graph.node if n.op_type == "GatherBlockQuantized")
        print(f"{PLE}@{build}: Olive RTN, accuracy_level {acc}, RoPE {'excluded' if exclude else 'quantized'}: {counts}; "
              f"q_proj {names}; tables {gathers}; logits vs f32 {max_abs(outs[build]['logits'], f32_out['logits']):.3e}, "
              f"vs HF {max_abs(outs[build]['logits'], oracle_logits(PLE)):.3e}; sha256(tree) {sha256_tree(dst)}")
        record["builds"][build] = {
            "quantizer": "olive.passes.onnx.rtn_quantization.OnnxBlockWiseRtnQuantization (defaults: bits 4, block 128, symmetric)",
            "accuracy_level": acc,
            "nodes_to_exclude": rope if exclude else [],
            "ops": {k: counts[k] for k in ("MatMulNBits", "GatherBlockQuantized", "Gather", "MatMul")},
            "initializer_names": names,
            "gather_block_quantized": gathers,
        }
    record["builds"]["olive-mutant-scales"] = scale_initializer(
        ROOT / "fixtures" / PLE / "variants" / "olive", ROOT / "fixtures" / PLE / "variants" / "olive-mutant-scales",
        "model.layers.1.mlp.gate_proj.weight_t_scales", PLE, 1, outs["olive"], f"{PLE}@olive-mutant-scales", "olive")
    rtn_acc4 = ROOT / "fixtures" / PLE / "variants" / "rtn-acc4"
    record["builds"]["rtn-acc4-mutant-scales"] = scale_initializer(
        rtn_acc4, ROOT / "fixtures" / PLE / "variants" / "rtn-acc4-mutant-scales",
        "model.layers.1.mlp.gate_proj.weight_t_scale", PLE, 1, run(rtn_acc4 / "model.onnx", PLE), f"{PLE}@rtn-acc4-mutant-scales",
        "rtn-acc4")


def make_builder(record):
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_builder_fixtures import last_error, run_builder

    out = BUILDER / "int4-acc1"
    if out.exists():
        shutil.rmtree(out)
    flags = ["-p", "int4", "-e", "cpu", "--extra_options", "accuracy_level=1"]
    done = run_builder(ROOT / "fixtures" / UNIFIED / "checkpoint", out, flags)
    if done.returncode != 0:
        raise SystemExit(f"{UNIFIED}/builder/int4-acc1: the builder failed: {last_error(done.stderr)}")
    saved = onnx.load(str(out / "model.onnx"), load_external_data=False)
    levels = sorted({a.i for n in saved.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"})
    print(f"{UNIFIED}/builder/int4-acc1: {op_counts(saved)}; accuracy_level {levels}; sha256(tree) {sha256_tree(out)}")
    record["builds"]["int4-acc1"] = {"flags": flags, "accuracy_levels": levels, "files": sorted(p.name for p in out.iterdir())}
    mutants = [
        ("int4-mutant-qkv-scales", "int4", "model.layers.1.attn.qkv_proj.MatMul.weight_scales", 0),
        ("int4-acc1-mutant-scales", "int4-acc1", "model.layers.1.mlp.gate_proj.MatMul.weight_scales", 1),
    ]
    # The builder's windowed KV cache (past and present one buffer, GroupQueryAttention's
    # share-buffer mode) is not fed by make_quantized_fixtures.run: the mutants are checked by bytes
    # here, and by the harness's L3 (blamed on layer 1).
    for name, source, tensor, unchanged in mutants:
        record["builds"][name] = scale_initializer(BUILDER / source, BUILDER / name, tensor, UNIFIED, 1, None,
                                                   f"{UNIFIED}/builder/{name}", source, unchanged_through=unchanged)


def main():
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    logging.getLogger("olive").setLevel(logging.WARNING)
    versions = {k: version(k) for k in ("olive-ai", "onnxruntime", "onnxruntime-genai", "onnx", "onnx-ir")}
    olive = {**versions, "source_export": "mobius-onnx 0.1.0 f32 (onnx/)", "builds": {}}
    make_olive(olive, run(SRC, PLE))
    (ROOT / "fixtures" / PLE / "olive.json").write_text(json.dumps(olive, indent=2) + "\n")
    builder = {**versions, "builds": {}}
    make_builder(builder)
    (ROOT / "fixtures" / UNIFIED / "builder-quantized.json").write_text(json.dumps(builder, indent=2) + "\n")


if __name__ == "__main__":
    main()
