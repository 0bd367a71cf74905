"""Micro benchmark of the AMQP codec's hot path: decode 8 frames, encode 2 (pure Python unless compiled).

One round decodes 4 disposition frames and 4 transfer frames carrying a 1 KiB message (the
performative lifted to its dataclass, the message cut into its sections and its annotations and
properties decoded, as the broker reads a send), and encodes one transfer and one disposition as
the broker writes them. It prints the best CPU microseconds per round of ``--repeat`` timings.

A/B against another checkout, interleaved so that both sides see the same machine:

    python benchmarks/codec_micro.py --compare /path/to/other/src --pairs 5

runs this file once per side and pair, alternately, each in a fresh interpreter whose
``sys.path`` starts with that side's ``src``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import timeit
import uuid
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parent.parent / "src"


def _frames() -> tuple[list[bytes], list[bytes], bytes]:
    from sodalite.amqp import framing
    from sodalite.amqp.codec import encode_value
    from sodalite.amqp.performatives import Accepted
    from sodalite.amqp.types import Symbol, Timestamp

    annotations = bytearray()
    encode_value({Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000),
                  Symbol("x-opt-sequence-number"): 12345, Symbol("x-opt-partition-key"): "p"}, annotations)
    properties = bytearray()
    encode_value([uuid.uuid4().hex, None, None, None, None, None, Symbol("text/plain")], properties)
    application = bytearray()
    encode_value({"kind": "order", "count": 3, "priority": 1.5}, application)
    message = (b"\x00\x53\x70" + bytes([0xC0, 2, 1, 0x41])  # header: durable
               + b"\x00\x53\x72" + bytes(annotations) + b"\x00\x53\x73" + bytes(properties)
               + b"\x00\x53\x74" + bytes(application) + b"\x00\x53\x75\xb0" + (1024).to_bytes(4, "big")
               + os.urandom(1024))
    transfers = [framing.encode_transfer(0, 1, n, n.to_bytes(4, "big"), 0, False, False, message)[8:]
                 for n in range(4)]
    dispositions = [framing.encode_disposition(0, True, n, None, True, Accepted())[8:] for n in range(4)]
    return transfers, dispositions, message


def _round_fn() -> object:
    from sodalite.amqp import framing
    from sodalite.amqp import message as amqp_message
    from sodalite.amqp.codec import decode_value
    from sodalite.amqp.performatives import PERFORMATIVE_CODES, Accepted, lift_performative

    transfers, dispositions, message = _frames()
    accepted = Accepted()

    def one_round() -> None:
        for body in dispositions:
            value, _ = decode_value(body, 0)
            lift_performative(value, PERFORMATIVE_CODES)
        for body in transfers:
            value, end = decode_value(body, 0)
            lift_performative(value, PERFORMATIVE_CODES)
            payload = body[end:]
            for section in amqp_message.split_sections(payload):
                if section.code in (0x72, 0x73, 0x74):
                    amqp_message.section_value(payload, section)
        framing.encode_transfer(0, 1, 7, b"\x00\x00\x00\x07", 0, False, False, message)
        framing.encode_disposition(0, False, 7, None, True, accepted)

    return one_round


def measure(repeat: int, number: int) -> float:
    fn = _round_fn()
    # CPU time of this process: on a shared machine, the time it waits for a core is not the codec's.
    best = min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time))  # type: ignore[arg-type]
    return best / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--compare", type=Path, help="another checkout's src directory (the 'before' side)")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    if args.compare is None:
        import sodalite.amqp.codec as codec

        print(f"{measure(args.repeat, args.number):.2f} us/round  ({Path(codec.__file__).parent.parent.parent})")
        return 0
    sides = {"before": args.compare.resolve(), "after": HERE_SRC}
    results: dict[str, list[float]] = {"before": [], "after": []}
    for pair in range(args.pairs):
        order = ("before", "after") if pair % 2 == 0 else ("after", "before")
        for side in order:
            env = {**os.environ, "PYTHONPATH": str(sides[side])}
            out = subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat), "--number", str(args.number)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            results[side].append(float(out.split()[0]))
            print(f"pair {pair + 1} {side:6s} {out.strip()}", flush=True)
    for side, values in results.items():
        print(f"{side:6s} best {min(values):.2f}  median {sorted(values)[len(values) // 2]:.2f} us/round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
