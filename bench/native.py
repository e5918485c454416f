"""Each compiled part against its Python reference, on the inputs the hot paths give it.

Prints ns per call of both and the ratio; what docs/performance.md says about which C is kept.
``--cython`` also times the references compiled by Cython (the alternative to hand-written C:
one source, compiled), which needs Cython installed and a C compiler.

    python bench/native.py [--repeat 7] [--cython]
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from gateway._speedups import _frames, _plain, _sketch, frames_py, plain_py, sketch_py
from gateway.delivery import wire as delivery_wire
from partitioner._speedups import _murmur2, murmur2_py
from storage._speedups import ENTRY_LAYOUT, _entries, _wire, entries_py, wire_py
from storage.models import Delivery

# the modules holding the Python references, by the name the pairs use
REFERENCES: dict[str, ModuleType] = {
    "plain": plain_py, "murmur2": murmur2_py, "sketch": sketch_py, "append": wire_py,
    "entries": entries_py, "wire": delivery_wire, "frames": frames_py}

BATCH = 100  # messages in a publish (the bench's batch)
PAGE = 500  # entries in a group read page
VALUE = orjson.dumps({"order": 123456, "customer": "c-0001", "items": [1, 2, 3], "note": "x" * 120})


def _publish_inputs() -> dict[str, Any]:
    keys: list[bytes | None] = [b"key-%d" % (i % 1000) for i in range(BATCH)]
    values = [VALUE] * BATCH
    partitions = murmur2_py.partitions_of(keys, 8, 0)
    body = orjson.dumps({"messages": [{"key": k.decode(), "value": orjson.loads(VALUE)}
                                      for k in keys if k is not None]})
    head = b"*5\r\n$4\r\nXADD\r\n$12\r\nsg:{t.0}:log\r\n$1\r\n*\r\n"
    groups = wire_py.split_by_partition(partitions, values, keys)
    offsets = {p: [f"1732000000000-{i}" for i in range(len(g[0]))] for p, g in groups.items()}
    replies = [b"OK", *[b"QUEUED"] * BATCH, [b"1732000000000-%d" % i for i in range(BATCH)]]
    return {"keys": keys, "values": values, "partitions": partitions, "body": body,
            "head": head, "groups": groups, "offsets": offsets, "replies": replies,
            "flat": [o for i in range(BATCH) for o in (b"1732000000000-%d" % i, 0)],
            "messages": orjson.loads(body)["messages"],
            "results": [f"1732000000000-{i}" for i in range(BATCH)]}


def _read_inputs() -> dict[str, Any]:
    items = [[b"1732000000000-%d" % i, [b"Kkey-%d" % i, VALUE]] for i in range(PAGE)]
    entries = entries_py.decode_raw_entries(3, items)
    deliveries = [Delivery(entry, 1) for entry in entries]
    return {"items": items, "deliveries": deliveries,
            "frames": [delivery_wire.message_frame("t", e, 1) for e in entries]}


def _pairs(refs: dict[str, Any] = REFERENCES,
           ) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(what, compiled call, reference call) on the same input; the references from ``refs``."""
    p, r = _publish_inputs(), _read_inputs()
    plain, murmur2, sketch, append, entries, delivery_wire, frames = (
        refs["plain"], refs["murmur2"], refs["sketch"], refs["append"], refs["entries"],
        refs["wire"], refs["frames"])
    limits = (BATCH, 4096, 1 << 20)
    prefix = b'{"type":"message","topic":"t","partition":'
    layout = delivery_wire._FRAME_LAYOUT
    sketches_c = [_sketch.SpaceSaving(16) for _ in range(8)]
    sketches_py = [sketch.SpaceSaving(16) for _ in range(8)]
    return [
        ("publish: scan_plain_body (100 messages)",
         lambda: _plain.scan_plain_body(p["body"], *limits, orjson.loads, orjson.dumps),
         lambda: plain.scan_plain_body(p["body"], *limits, orjson.loads, orjson.dumps)),
        ("publish: parse_plain (100 parsed messages)",
         lambda: _plain.parse_plain(p["messages"], 4096, 1 << 20, orjson.dumps),
         lambda: plain.parse_plain(p["messages"], 4096, 1 << 20, orjson.dumps)),
        ("publish: plain_results_json (100 offsets)",
         lambda: _plain.plain_results_json(p["partitions"], p["results"]),
         lambda: plain.plain_results_json(p["partitions"], p["results"])),
        ("publish: partitions_of (100 keys)",
         lambda: _murmur2.partitions_of(p["keys"], 8, 0),
         lambda: murmur2.partitions_of(p["keys"], 8, 0)),
        ("publish: count_batch (hot keys, 100 keys)",
         lambda: _sketch.count_batch(sketches_c, p["partitions"], p["keys"]),
         lambda: sketch.count_batch(sketches_py, p["partitions"], p["keys"])),
        ("append: split_by_partition (100 records)",
         lambda: _wire.split_by_partition(p["partitions"], p["values"], p["keys"]),
         lambda: append.split_by_partition(p["partitions"], p["values"], p["keys"])),
        ("append: xadd_transaction (100 records)",
         lambda: _wire.xadd_transaction(p["head"], p["head"], b"", p["values"], p["keys"]),
         lambda: append.xadd_transaction(p["head"], p["head"], b"", p["values"], p["keys"])),
        ("append: fold_transaction (100 replies)",
         lambda: _wire.fold_transaction(p["replies"]),
         lambda: append.fold_transaction(p["replies"])),
        ("append: reply_offsets (100 offsets)",
         lambda: _wire.reply_offsets(0, p["flat"]),
         lambda: append.reply_offsets(0, p["flat"])),
        ("append: in_input_order (100 offsets)",
         lambda: _wire.in_input_order(BATCH, p["groups"], p["offsets"]),
         lambda: append.in_input_order(BATCH, p["groups"], p["offsets"])),
        ("read: decode_raw_entries (500 entries)",
         lambda: _entries.decode_raw_entries(3, r["items"], ENTRY_LAYOUT),
         lambda: entries.decode_raw_entries(3, r["items"])),
        ("deliver: message_frames (500 deliveries)",
         lambda: _frames.message_frames(prefix, r["deliveries"], layout),
         lambda: [delivery_wire.message_frame("t", d.entry, 1) for d in r["deliveries"]]),
        ("deliver: text_frames (500 frames)",
         lambda: _frames.text_frames(r["frames"]),
         lambda: frames.text_frames(r["frames"])),
    ]


def _ns_per_call(call: Callable[[], Any], repeat: int) -> float:
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number * 1e9


def _cython_references(build: Path) -> dict[str, Any]:
    """The reference modules compiled by Cython (as they are: pure Python, no declarations)."""
    files = []
    for name, module in REFERENCES.items():
        file = build / f"cy_{name}.py"
        shutil.copy(str(module.__file__), file)
        files.append(str(file))
    subprocess.run([sys.executable, "-m", "Cython.Build.Cythonize", "-3", "-i", "-q", *files],
                   check=True, cwd=build, capture_output=True)
    sys.path.insert(0, str(build))
    return {name: importlib.import_module(f"cy_{name}") for name in REFERENCES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cython", action="store_true", help="also the Cython-compiled references")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as build:
        cythonized = _pairs(_cython_references(Path(build))) if args.cython else None
        print(f"{'part':46} {'compiled ns':>12} {'python ns':>12} {'ratio':>7}"
              + (f" {'cython ns':>10} {'ratio':>7}" if cythonized else ""))
        for index, (what, compiled, reference) in enumerate(_pairs()):
            assert compiled() == reference(), what
            fast, slow = _ns_per_call(compiled, args.repeat), _ns_per_call(reference, args.repeat)
            line = f"{what:46} {fast:12,.0f} {slow:12,.0f} {slow / fast:7.1f}"
            if cythonized:
                cython_call = cythonized[index][2]
                assert cython_call() == reference(), what
                cy = _ns_per_call(cython_call, args.repeat)
                line += f" {cy:10,.0f} {cy / fast:7.1f}"
            print(line)


if __name__ == "__main__":
    main()
