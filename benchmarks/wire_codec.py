"""The broker's per-message wire work, pure Python: parse a received 1 KiB transfer, encode a delivery.

    benchmarks/wire_codec.py                       # this tree
    benchmarks/wire_codec.py --against ../main/src # A/B: this tree and another, interleaved

Each round runs every tree once in a fresh interpreter (``-c``, so neither inherits the other's
imports), alternating which goes first; the figure per tree is the median over rounds of the best
of five timed loops; each tree's Python calls and bytecodes per parse and per encode are counted
exactly too (a tracer), since a loaded machine blurs the times. It measures
``server.wire.received_messages`` on a transfer as the Python SDK
sends it (header, properties, application properties, a 1 KiB data body) and
``server.wire.delivery_payload`` of the stored record (PeekLock: lock token, locked-until).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import dataclasses, json, timeit, uuid
from sodalite.amqp import message as m
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, Symbol, Timestamp, UInt, ULong
from sodalite.model.partition_core import record_for
from sodalite.server import wire

out = bytearray()
encode_value(Described(ULong(m.HEADER), [True, None, UInt(60000)]), out)
encode_value(Described(ULong(m.MESSAGE_ANNOTATIONS), {Symbol("x-opt-partition-key"): "k"}), out)
encode_value(Described(ULong(m.PROPERTIES), [uuid.uuid4().hex, None, None, "subject", None, "corr",
                                                Symbol("application/json")]), out)
encode_value(Described(ULong(m.APPLICATION_PROPERTIES), {"kind": "order", "n": 7}), out)
encode_value(Described(ULong(m.DATA), b"x" * 1024), out)
payload = bytes(out)
draft = wire.received_messages(payload, 0, 1 << 20)[0]
record = dataclasses.replace(record_for(draft, 1_700_000_000_000, None), sequence_number=42)
token = uuid.uuid4()
number = 20000
parse = min(timeit.repeat(lambda: wire.received_messages(payload, 0, 1 << 20), number=number, repeat=5)) / number
encode = min(timeit.repeat(lambda: wire.delivery_payload(record, 1_700_000_030_000, lock_token=token),
                           number=number, repeat=5)) / number
import sys
work = {"calls": 0, "ops": 0}
def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    work["calls" if event == "call" else "ops"] += event in ("call", "opcode")
    return tracer
counted = {}
for name, step in (("parse", lambda: wire.received_messages(payload, 0, 1 << 20)),
                   ("encode", lambda: wire.delivery_payload(record, 1_700_000_030_000, lock_token=token))):
    work.update(calls=0, ops=0)
    sys.settrace(tracer); step(); sys.settrace(None)
    counted[name + "_calls"], counted[name + "_ops"] = work["calls"] - 1, work["ops"]
print(json.dumps({"parse": parse * 1e6, "encode": encode * 1e6, **counted}))
"""


def _probe(src: Path) -> dict[str, float]:
    """One tree's figures: microseconds per parse and per encode, and the Python calls and bytecodes
    one of each executes (exact, whatever else the machine is doing)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another tree's src/ directory to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = {"this": Path(__file__).resolve().parent.parent / "src"}
    if args.against is not None:
        trees["against"] = args.against.resolve()
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            figures[name].append(_probe(trees[name]))
    for name, runs in figures.items():
        parse = statistics.median(r["parse"] for r in runs)
        encode = statistics.median(r["encode"] for r in runs)
        work = runs[0]
        print(f"{name:8} {trees[name]}\n    parse 1 KiB transfer {parse:6.2f} us "
              f"({work['parse_calls']:.0f} Python calls, "
              f"{work['parse_ops']:.0f} bytecodes)   encode delivery {encode:6.2f} us "
              f"({work['encode_calls']:.0f} calls, {work['encode_ops']:.0f} bytecodes)")


if __name__ == "__main__":
    main()
