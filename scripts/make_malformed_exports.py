#!/usr/bin/env python3
"""Generate the malformed text-only exports under tests/corpus/onnx/ (tests/corpus.rs).

Each is a tiny `model.onnx` that follows the text-only protocol of src/onnx/pipeline.rs
(input_ids, attention_mask, position_ids, past_key_values.0.{key,value} [1, 1, past, 2] in;
logits, present.0.{key,value} out) except for one defect, which the harness must report with the
session, the output name, the expected shape and the found one:

  logits_rank2/              logits declared [1, sequence]            (caught when the session opens)
  logits_rank2_undeclared/   logits [1, S] at run time, rank unknown until then (caught after the run)
  empty_vocab/               logits [1, S, 0] at run time, vocab unknown until then
  empty_vocab_declared/      logits declared [1, sequence, 0]
  present_rank3/             present.0.key [1, S, 2] at run time, rank unknown until then
  past_rank3/                past_key_values.0.key declared [1, past, 2] (no heads axis)

It also writes the binary files of the corpus that are not exports: tests/corpus/safetensors/
(input files with one defect each: a truncated or absurd header, a missing, mistyped or
mis-shaped tensor, audio inputs, data shorter than the header claims) and the malformed graph
files tests/corpus/onnx/{truncated,not_protobuf,no_graph,bad_utf8_name}.onnx.

Needs only the `onnx` package (the fixture venv has it:
~/.cache/onnx-parity/fixture-venv/bin/python scripts/make_malformed_exports.py). Deterministic: a
rerun writes byte-identical files. The models compute nothing meaningful; logits are the token ids.
"""
from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "onnx"
F, I = TensorProto.FLOAT, TensorProto.INT64


def const(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I, [len(values)], values))


def hide_rank(src: str, dst: str, tag: str) -> list[onnx.NodeProto]:
    """dst = Unsqueeze(Squeeze(src), 0): drops every size-1 axis of src, then restores the
    leading one ([1, S] → [1, S]; [1, 1, S, 2] → [1, S, 2]). Squeeze without axes has no
    statically known rank, so ONNX Runtime reports no shape for dst: only the run shows it."""
    return [
        const(f"{tag}_axis0", [0]),
        helper.make_node("Squeeze", [src], [f"{tag}_squeezed"]),
        helper.make_node("Unsqueeze", [f"{tag}_squeezed", f"{tag}_axis0"], [dst]),
    ]


def model(
    logits_shape: list | None,
    logits_vocab: int | None,
    logits_rank2: bool = False,
    present_rank3: bool = False,
    past_shape: list | None = None,
) -> onnx.ModelProto:
    """logits = ids as float, [1, S] (rank2) or [1, S, 1] sliced to `logits_vocab` (0: empty);
    present = concat(past, ids as [1, 1, S, 2]) on the sequence axis ([1, S, 2] when present_rank3).
    `logits_shape` / `past_shape` are the declared shapes (None: not declared)."""
    past_shape = past_shape or [1, 1, "past_sequence", 2]
    nodes = [
        const("axes_last", [2]),
        const("axes_kv", [1, 3]),
        const("zero", [0]),
        const("vocab_end", [logits_vocab if logits_vocab is not None else 1]),
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=F),
    ]
    if logits_rank2 and logits_shape is None:
        nodes += hide_rank("ids_f", "logits", "logits")
    elif logits_rank2:
        nodes.append(helper.make_node("Identity", ["ids_f"], ["logits"]))
    elif logits_vocab == 0 and logits_shape is not None and logits_shape[2] != 0:
        # An end computed at run time (total − total = 0), so ONNX Runtime cannot infer vocab 0.
        nodes += [
            const("one", [1]),
            const("two", [2]),
            helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
            helper.make_node("Slice", ["mask_shape", "one", "two"], ["total"]),
            helper.make_node("Sub", ["total", "total"], ["runtime_zero"]),
            helper.make_node("Unsqueeze", ["ids_f", "axes_last"], ["ids_3d"]),
            helper.make_node("Slice", ["ids_3d", "zero", "runtime_zero", "axes_last"], ["logits"]),
        ]
    else:
        nodes += [
            helper.make_node("Unsqueeze", ["ids_f", "axes_last"], ["ids_3d"]),
            helper.make_node("Slice", ["ids_3d", "zero", "vocab_end", "axes_last"], ["logits"]),
        ]
    nodes += [
        helper.make_node("Unsqueeze", ["ids_f", "axes_kv"], ["kv_1"]),
        helper.make_node("Concat", ["kv_1", "kv_1"], ["kv_new"], axis=3),
    ]
    for kind in ("key", "value"):
        past, present = f"past_key_values.0.{kind}", f"present.0.{kind}"
        if past_shape[1] != 1 and kind == "key":
            # A past key without the heads axis cannot be concatenated: leave it unread (the
            # harness rejects its declared shape before running anything).
            nodes.append(helper.make_node("Concat", ["past_key_values.0.value", "kv_new"], [present], axis=2))
        elif present_rank3 and kind == "key":
            nodes.append(helper.make_node("Concat", [past, "kv_new"], [f"{present}_4d"], axis=2))
            nodes += hide_rank(f"{present}_4d", present, "present")
        else:
            nodes.append(helper.make_node("Concat", [past, "kv_new"], [present], axis=2))
    # The mask and positions are inputs of the protocol; fold them in so they are consumed.
    nodes += [
        helper.make_node("ReduceSum", ["attention_mask"], ["mask_sum"], keepdims=0),
        helper.make_node("ReduceSum", ["position_ids"], ["pos_sum"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", I, [1, "sequence"]),
        helper.make_tensor_value_info("attention_mask", I, [1, "total_sequence"]),
        helper.make_tensor_value_info("position_ids", I, [1, "sequence"]),
        helper.make_tensor_value_info("past_key_values.0.key", F, past_shape),
        helper.make_tensor_value_info("past_key_values.0.value", F, [1, 1, "past_sequence", 2]),
    ]
    present_key_shape = None if present_rank3 else [1, 1, "total_sequence", 2]
    outputs = [
        helper.make_tensor_value_info("logits", F, logits_shape),
        helper.make_tensor_value_info("present.0.key", F, present_key_shape),
        helper.make_tensor_value_info("present.0.value", F, [1, 1, "total_sequence", 2]),
        helper.make_tensor_value_info("mask_sum", I, []),
        helper.make_tensor_value_info("pos_sum", I, []),
    ]
    graph = helper.make_graph(nodes, "malformed_text_model", inputs, outputs)
    m = helper.make_model(graph, producer_name="onnx-parity make_malformed_exports.py", opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    if logits_shape is not None and not present_rank3:
        # The checker insists on declared output shapes; the undeclared ones are what ORT runs.
        onnx.checker.check_model(m)
    return m


CASES = {
    "logits_rank2": dict(logits_shape=[1, "sequence"], logits_vocab=None, logits_rank2=True),
    "logits_rank2_undeclared": dict(logits_shape=None, logits_vocab=None, logits_rank2=True),
    "empty_vocab": dict(logits_shape=[1, "sequence", "vocab"], logits_vocab=0),
    "empty_vocab_declared": dict(logits_shape=[1, "sequence", 0], logits_vocab=0),
    "present_rank3": dict(logits_shape=[1, "sequence", 1], logits_vocab=1, present_rank3=True),
    "past_rank3": dict(logits_shape=[1, "sequence", 1], logits_vocab=1, past_shape=[1, "past_sequence", 2]),
}


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]], header_extra: dict | None = None) -> bytes:
    """A safetensors file: u64 header length, JSON header (sorted names, offsets in order), data."""
    import json
    import struct

    header, data, offset = {}, b"", 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    header.update(header_extra or {})
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def i64(*values: int) -> bytes:
    import struct

    return b"".join(struct.pack("<q", v) for v in values)


def f32(*values: float) -> bytes:
    import struct

    return b"".join(struct.pack("<f", v) for v in values)


def write_binary_corpus() -> None:
    import struct

    st = OUT.parent / "safetensors"
    st.mkdir(parents=True, exist_ok=True)
    ids = ("I64", [1, 4], i64(2, 10, 11, 12))
    px = ("F32", [1, 2, 6], f32(*[0.0] * 12))
    pos = ("I64", [1, 2, 2], i64(0, 0, 0, 1))
    valid = safetensors_bytes({"input_ids": ids})
    files = {
        # The header length says 200 bytes; the file ends first.
        "truncated_header.safetensors": struct.pack("<Q", 200) + valid[8:40],
        # A header length of 2^64 - 1.
        "huge_header_length.safetensors": struct.pack("<Q", 2**64 - 1) + valid[8:],
        # The header is not JSON.
        "header_not_json.safetensors": struct.pack("<Q", 9) + b"not json!",
        # The header claims 32 bytes of data for input_ids; the file holds 16.
        "data_shorter_than_header.safetensors": valid[:-16],
        "missing_input_ids.safetensors": safetensors_bytes({"pixel_values": px, "image_position_ids": pos}),
        "input_ids_f32.safetensors": safetensors_bytes({"input_ids": ("F32", [1, 4], f32(2, 10, 11, 12))}),
        "input_ids_rank1.safetensors": safetensors_bytes({"input_ids": ("I64", [4], i64(2, 10, 11, 12))}),
        "input_ids_empty.safetensors": safetensors_bytes({"input_ids": ("I64", [1, 0], b"")}),
        "pixel_values_rank2.safetensors": safetensors_bytes(
            {"input_ids": ids, "pixel_values": ("F32", [2, 6], f32(*[0.0] * 12)), "image_position_ids": pos}
        ),
        "image_positions_mismatch.safetensors": safetensors_bytes(
            {"input_ids": ids, "pixel_values": px, "image_position_ids": ("I64", [1, 3, 2], i64(*[0] * 6))}
        ),
        "pixel_values_without_positions.safetensors": safetensors_bytes({"input_ids": ids, "pixel_values": px}),
        "mm_token_type_ids_length.safetensors": safetensors_bytes({"input_ids": ids, "mm_token_type_ids": ("I64", [1, 3], i64(0, 0, 0))}),
        "audio_features.safetensors": safetensors_bytes({"input_ids": ids, "input_features": ("F32", [1, 2], f32(0, 0))}),
    }
    for name, data in files.items():
        (st / name).write_bytes(data)
        print(f"tests/corpus/safetensors/{name}: {len(data)} bytes")

    embedding = (OUT.parent.parent.parent / "fixtures/unified-vision/onnx/embedding/model.onnx").read_bytes()
    no_graph = onnx.ModelProto(ir_version=8, producer_name="onnx-parity")
    # ModelProto.producer_name (field 2) holding the bytes ff fe: not UTF-8.
    bad_utf8 = bytes([2 << 3 | 2, 2, 0xFF, 0xFE])
    graphs = {
        "truncated.onnx": embedding[:1000],
        "not_protobuf.onnx": b"this is a text file, not an ONNX model\n",
        "no_graph.onnx": no_graph.SerializeToString(),
        "bad_utf8_name.onnx": bad_utf8,
    }
    for name, data in graphs.items():
        (OUT / name).write_bytes(data)
        print(f"tests/corpus/onnx/{name}: {len(data)} bytes")


def main() -> int:
    write_binary_corpus()
    for name, kwargs in CASES.items():
        m = model(**kwargs)
        path = OUT / name / "model.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(m.SerializeToString())
        print(f"{path.relative_to(OUT.parent.parent.parent)}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
