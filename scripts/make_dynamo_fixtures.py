#!/usr/bin/env python
"""torch.onnx.export(..., dynamo=True) exports of transformers' own Gemma 4 text models, in the I/O
protocol of the committed mobius text-only exports, and a one-layer mutant of one of them.

  gemma4-text-dense/dynamo         Gemma4ForCausalLM (gemma4_text), 6 layers, every layer cached
  unified-text-kvshare/dynamo      Gemma4UnifiedForCausalLM (gemma4_unified_text), 6 layers, KV sharing:
                                   layers 0..3 cached, 4..5 reuse them (full layers: 1 KV head of 32, k = v)
  gemma4-text-ple/dynamo           gemma4_text with per-layer embeddings, 10 layers, layers 0..5 cached
  gemma4-text-dense/dynamo-mutant  the dense export with model.model.layers.1.layer_scalar scaled by 1.01

Each export is HF's model (attn_implementation="eager", float32, eval) behind a wrapper whose forward takes
the flat protocol tensors, builds a transformers DynamicCache from the per-layer past key/value tensors
(`DynamicCache(ddp_cache_data=[(k, v), ...])`: one plain DynamicLayer per cached layer, so every present
holds past + new tokens, sliding layers included, and the sliding window lives in the mask as in mobius's
exports), calls the model with use_cache=True and returns logits plus the updated cache flattened:

  torch.onnx.export(wrapper, (input_ids, attention_mask, position_ids, past), dynamo=True, opset_version=23,
                    dynamic_shapes=..., input_names=..., output_names=..., external_data=True)
  onnx_program.save("model.onnx", external_data=True)     # -> model.onnx + model.onnx.data

  inputs   input_ids int64 [batch, sequence_len], attention_mask int64 [batch, total_sequence_len],
           position_ids int64 [batch, sequence_len],
           past_key_values.{i}.key/.value float32 [batch, kv_heads, past_sequence_len, head_dim]
  outputs  logits float32 [batch, sequence_len, 512],
           present.{i}.key/.value float32 [batch, kv_heads, past_sequence_len + sequence_len, head_dim]

The names, dtypes, ranks and static dims are asserted equal to the committed mobius export's
(fixtures/<fixture>/onnx/model.onnx). torch.export runs non-strict (the exporter's first strategy); the
example inputs have batch 2, sequence 3, past 4, and the export accepts a zero-length past.

The exporter's node names carry no layer (`node_MatMul_12`, `node_mul_3`); the module path is in each
node's metadata (`namespace`, `pkg.torch.onnx.name_scopes`) and in the initializer names, prefixed with the
wrapper's attribute: `model.model.layers.1.layer_scalar`. The only change made to the exporter's output is
dropping each node's `pkg.torch.onnx.stack_trace` metadata (absolute paths of this checkout and the venv:
reruns from another directory would differ; the traces were also ~40% of model.onnx). The remaining node
metadata (namespace, class_hierarchy, fx_node, name_scopes) is most of model.onnx's ~0.75 MB. Small initializers (< 256 bytes,
onnx_ir's threshold: norms, layer_scalar) are stored in model.onnx, the rest in model.onnx.data.

Checks (SystemExit when one fails), ONNX Runtime CPU EP against HF's own forward (its default cache) on the
fixture's inputs.safetensors input_ids: prefill with an empty past, then 4 greedy decode steps feeding
present back as past. Measured max |logits - HF| (ORT 1.31.1, torch 2.15.0, transformers 5.14.1):

  gemma4-text-dense      prefill (24 tokens) 6.7e-06   decode steps 1..4  3.8e-06 .. 4.3e-06
  unified-text-kvshare   prefill (24 tokens) 6.2e-06   decode steps 1..4  3.8e-06 .. 4.5e-06
  gemma4-text-ple        prefill (32 tokens) 8.6e-06   decode steps 1..4  4.3e-06 .. 7.6e-06

The mutant: model.onnx.data copied byte for byte; layer_scalar lives in model.onnx, whose bytes are
patched in place (only that tensor's 4 data bytes differ). layer_scalar multiplies layer 1's *output*, so
layer 1's own cache is computed before it: present.0.* and present.1.* are asserted bit-identical to the
unmutated export's, present.2.* and the logits asserted to differ (max |logits diff| 0.109 on the 24-token prefill).

Reruns are byte-identical (sha256 of every file printed at the end; compare two runs).

Run in the pinned fixture venv (scripts/fixture-venv.sh):
    $(scripts/fixture-venv.sh) scripts/make_dynamo_fixtures.py
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, DynamicCache

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
NAMES = ["gemma4-text-dense", "unified-text-kvshare", "gemma4-text-ple"]
MUTANT_SOURCE = "gemma4-text-dense"
MUTANT_LAYER = 1
MUTANT_SCALE = np.float32(1.01)
OPSET = 23
DECODE_STEPS = 4
TOLERANCE = 1e-4
# Example shapes for torch.export: every dynamic dim >= 2 (0 and 1 would be specialized).
EXAMPLE_BATCH, EXAMPLE_SEQ, EXAMPLE_PAST = 2, 3, 4
DROPPED_METADATA = "pkg.torch.onnx.stack_trace"


class ProtocolWrapper(torch.nn.Module):
    """Flat mobius-protocol tensors in, HF's forward with a DynamicCache, logits + flat presents out."""

    def __init__(self, model: torch.nn.Module, cached_layers: int):
        super().__init__()
        self.model = model
        self.cached_layers = cached_layers

    def forward(self, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(self.cached_layers)])
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        flat = []
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def load(name: str) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(
        FIXTURES / name / "checkpoint", attn_implementation="eager", dtype=torch.float32
    ).eval()


def cache_layout(model) -> list[tuple[int, int]]:
    """(kv_heads, head_dim) of each cached (non-KV-shared) layer, from the modules themselves."""
    layout = []
    for layer in model.model.layers:
        attn = layer.self_attn
        if attn.is_kv_shared_layer:
            continue
        layout.append((attn.k_proj.out_features // attn.head_dim, attn.head_dim))
    return layout


def io_names(n: int) -> tuple[list[str], list[str]]:
    kv = [f"{i}.{t}" for i in range(n) for t in ("key", "value")]
    return (
        ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{s}" for s in kv],
        ["logits"] + [f"present.{s}" for s in kv],
    )


def export(name: str, model, layout, dst: Path) -> None:
    from torch.export import Dim

    n = len(layout)
    b, s, t = EXAMPLE_BATCH, EXAMPLE_SEQ, EXAMPLE_PAST
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (b, s), generator=g)
    mask = torch.ones(b, t + s, dtype=torch.long)
    pos = torch.arange(t, t + s).expand(b, s).contiguous()
    past = []
    for heads, hd in layout:
        past += [torch.randn(b, heads, t, hd, generator=g), torch.randn(b, heads, t, hd, generator=g)]
    batch, seq = Dim("batch"), Dim("sequence_len")
    past_len, total = Dim("past_sequence_len"), Dim("total_sequence_len")
    dynamic_shapes = {
        "input_ids": {0: batch, 1: seq},
        "attention_mask": {0: batch, 1: total},
        "position_ids": {0: batch, 1: seq},
        "past": [{0: batch, 2: past_len} for _ in past],
    }
    inputs, outputs = io_names(n)
    program = torch.onnx.export(
        ProtocolWrapper(model, n).eval(),
        (ids, mask, pos, past),
        dynamo=True,
        opset_version=OPSET,
        dynamic_shapes=dynamic_shapes,
        input_names=inputs,
        output_names=outputs,
        external_data=True,
    )
    for node in program.model.graph.all_nodes():
        node.metadata_props.pop(DROPPED_METADATA, None)
    for fn in program.model.functions.values():
        for node in fn.all_nodes():
            node.metadata_props.pop(DROPPED_METADATA, None)
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    program.save(str(dst / "model.onnx"), external_data=True)


def signature(values) -> list[tuple]:
    return [
        (v.name, v.type.tensor_type.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                               for d in v.type.tensor_type.shape.dim])
        for v in values
    ]


def check_protocol(name: str, dst: Path) -> onnx.ModelProto:
    mine = onnx.load(str(dst / "model.onnx"), load_external_data=False)
    mobius = onnx.load(str(FIXTURES / name / "onnx" / "model.onnx"), load_external_data=False)
    for what in ("input", "output"):
        a, m = signature(getattr(mine.graph, what)), signature(getattr(mobius.graph, what))
        if a != m:
            raise SystemExit(f"{name}: the dynamo export's {what}s differ from mobius's:\n  {a}\n  {m}")
    return mine


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_feed(ids: np.ndarray, past: list[np.ndarray], past_len: int) -> dict[str, np.ndarray]:
    b, s = ids.shape
    feed = {
        "input_ids": ids.astype(np.int64),
        "attention_mask": np.ones((b, past_len + s), dtype=np.int64),
        "position_ids": np.broadcast_to(np.arange(past_len, past_len + s, dtype=np.int64), (b, s)).copy(),
    }
    inputs, _ = io_names(len(past) // 2)
    feed.update(zip(inputs[3:], past))
    return feed


def empty_past(layout) -> list[np.ndarray]:
    past = []
    for heads, hd in layout:
        past += [np.zeros((1, heads, 0, hd), np.float32), np.zeros((1, heads, 0, hd), np.float32)]
    return past


def verify(name: str, model, layout, dst: Path) -> list[float]:
    """ORT vs HF's own forward (its default cache): prefill from an empty past, then greedy decode."""
    ids = load_file(str(FIXTURES / name / "inputs.safetensors"))["input_ids"]
    sess = session(dst / "model.onnx")
    out_names = [o.name for o in sess.get_outputs()]
    diffs = []
    with torch.no_grad():
        hf = model(input_ids=torch.from_numpy(ids), use_cache=True)
    hf_cache = hf.past_key_values
    past = empty_past(layout)
    cur, past_len = ids, 0
    for step in range(DECODE_STEPS + 1):
        res = dict(zip(out_names, sess.run(None, ort_feed(cur, past, past_len))))
        diff = float(np.abs(res["logits"] - hf.logits.numpy()).max())
        diffs.append(diff)
        label = "prefill" if step == 0 else f"decode {step}"
        print(f"  {name}: {label} (past {past_len}, seq {cur.shape[1]}): max |logits - HF| = {diff:.3g}")
        if not diff <= TOLERANCE:
            raise SystemExit(f"{name}: {label}: max |logits - HF| = {diff} > {TOLERANCE}")
        past_len += cur.shape[1]
        past = [res[o] for o in out_names[1:]]
        if any(p.shape[2] != past_len for p in past):
            raise SystemExit(f"{name}: {label}: presents are not {past_len} long: {[p.shape for p in past]}")
        nxt = hf.logits[:, -1].argmax(-1, keepdim=True)
        if int(res["logits"][0, -1].argmax()) != int(nxt[0, 0]):
            raise SystemExit(f"{name}: {label}: ORT's greedy token differs from HF's")
        cur = nxt.numpy()
        if step < DECODE_STEPS:
            with torch.no_grad():
                hf = model(input_ids=nxt, past_key_values=hf_cache, use_cache=True)
            hf_cache = hf.past_key_values
    return diffs


def mutate(src: Path, dst: Path) -> str:
    """Copy the export and scale layer MUTANT_LAYER's layer_scalar (else its post-feedforward norm) by 1.01,
    rewriting only that tensor's bytes wherever it lives."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    model = onnx.load(str(src / "model.onnx"), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    wanted = [f".layers.{MUTANT_LAYER}.layer_scalar", f".layers.{MUTANT_LAYER}.post_feedforward_layernorm.weight"]
    target = None
    for suffix in wanted:
        hits = [n for n in inits if n.endswith(suffix)]
        if len(hits) == 1:
            target = inits[hits[0]]
            break
    if target is None:
        raise SystemExit(f"{src}: no initializer ending in any of {wanted}")
    if target.data_type != onnx.TensorProto.FLOAT:
        raise SystemExit(f"{src}: {target.name} is not float32")
    for f in src.iterdir():
        shutil.copyfile(f, dst / f.name)
    if target.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in target.external_data}
        offset, length = int(info.get("offset", 0)), int(info["length"])
        data_path = dst / info["location"]
        with open(data_path, "r+b") as fh:
            fh.seek(offset)
            values = np.frombuffer(fh.read(length), dtype="<f4")
            fh.seek(offset)
            fh.write((values * MUTANT_SCALE).astype("<f4").tobytes())
    else:
        if not target.HasField("raw_data"):
            raise SystemExit(f"{src}: {target.name} is stored inline without raw_data")
        old = target.SerializeToString()
        values = np.frombuffer(target.raw_data, dtype="<f4")
        new_tensor = onnx.TensorProto()
        new_tensor.CopyFrom(target)
        new_tensor.raw_data = (values * MUTANT_SCALE).astype("<f4").tobytes()
        new = new_tensor.SerializeToString()
        blob = (src / "model.onnx").read_bytes()
        if len(old) != len(new) or blob.count(old) != 1:
            raise SystemExit(f"{src}: cannot find {target.name}'s serialized bytes exactly once in model.onnx")
        (dst / "model.onnx").write_bytes(blob.replace(old, new))
    changed = [f.name for f in sorted(dst.iterdir()) if f.read_bytes() != (src / f.name).read_bytes()]
    print(f"  mutant: {target.name} x{MUTANT_SCALE} "
          f"({'external data' if target.data_location == onnx.TensorProto.EXTERNAL else 'in model.onnx'}), "
          f"files rewritten: {changed}")
    return target.name


def check_mutant(src: Path, dst: Path, layout) -> float:
    ids = load_file(str(FIXTURES / MUTANT_SOURCE / "inputs.safetensors"))["input_ids"]
    feed = ort_feed(ids, empty_past(layout), 0)
    a_sess, b_sess = session(src / "model.onnx"), session(dst / "model.onnx")
    names = [o.name for o in a_sess.get_outputs()]
    a = dict(zip(names, a_sess.run(None, feed)))
    b = dict(zip(names, b_sess.run(None, feed)))
    for i in range(len(layout)):
        same = all(np.array_equal(a[f"present.{i}.{t}"], b[f"present.{i}.{t}"]) for t in ("key", "value"))
        print(f"  mutant: present.{i}.* {'bit-identical' if same else 'differs'}")
        # layer_scalar scales layer MUTANT_LAYER's output: its own K/V (and every earlier layer's) come first.
        if i <= MUTANT_LAYER and not same:
            raise SystemExit(f"mutant: present.{i}.* differs from the unmutated export's")
        if i == MUTANT_LAYER + 1 and same:
            raise SystemExit(f"mutant: present.{i}.* equals the unmutated export's")
    diff = float(np.abs(a["logits"] - b["logits"]).max())
    print(f"  mutant: max |logits - unmutated logits| = {diff:.3g}")
    if diff == 0.0:
        raise SystemExit("mutant: the logits did not change")
    return diff


def describe_names(model: onnx.ModelProto) -> None:
    nodes = [n.name for n in model.graph.node]
    inits = [t.name for t in model.graph.initializer]
    layered_nodes = sum("layers." in n for n in nodes)
    layered_inits = sum("layers." in n for n in inits)
    print(f"  node names with 'layers.<i>': {layered_nodes}/{len(nodes)}; e.g. {nodes[:3] + nodes[-2:]}")
    print(f"  initializer names with 'layers.<i>': {layered_inits}/{len(inits)}; "
          f"e.g. {[n for n in inits if 'layers.1.' in n][:5]}")
    scoped = next((n for n in model.graph.node if any(p.key == 'pkg.torch.onnx.name_scopes' for p in n.metadata_props)
                   and "layers.1" in {p.key: p.value for p in n.metadata_props}.get('pkg.torch.onnx.name_scopes', '')),
                  None)
    if scoped is not None:
        scopes = {p.key: p.value for p in scoped.metadata_props}["pkg.torch.onnx.name_scopes"]
        print(f"  layer scope lives in node metadata: {scoped.name} name_scopes={scopes}")


def sha256_tree(paths: list[Path]) -> None:
    for d in paths:
        for f in sorted(d.iterdir()):
            print(f"  {hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(ROOT)}")


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}, "
          f"onnx {onnx.__version__}, onnxruntime {ort.__version__}")
    outputs = []
    layouts = {}
    for name in NAMES:
        print(f"{name}:")
        model = load(name)
        layout = cache_layout(model)
        layouts[name] = layout
        dst = FIXTURES / name / "dynamo"
        export(name, model, layout, dst)
        proto = check_protocol(name, dst)
        print(f"  {len(proto.graph.node)} nodes, {len(proto.graph.initializer)} initializers, "
              f"opset {proto.opset_import[0].version}; I/O matches mobius's export "
              f"({len(layout)} cached layers: {layout})")
        if name == MUTANT_SOURCE:
            describe_names(proto)
        verify(name, model, layout, dst)
        outputs.append(dst)
    src = FIXTURES / MUTANT_SOURCE / "dynamo"
    dst = FIXTURES / MUTANT_SOURCE / "dynamo-mutant"
    print(f"{MUTANT_SOURCE}/dynamo-mutant:")
    mutate(src, dst)
    check_mutant(src, dst, layouts[MUTANT_SOURCE])
    outputs.append(dst)
    print("sha256:")
    sha256_tree(outputs)


if __name__ == "__main__":
    main()
