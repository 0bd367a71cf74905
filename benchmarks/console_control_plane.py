"""Benchmark: the control plane's JSON API on a big namespace (issue 17's targets).

Builds a data directory with the store port directly (faster than sending): ``--entities`` queues,
one queue ``big`` holding ``--messages`` messages, and one queue ``redrive`` whose dead-letter
queue holds ``--dead`` messages. Then starts the broker with scripts/serve on it, as users do, and
measures over HTTP with a bearer token:

- listing every entity with its counts (what the console's namespace page loads and refreshes);
- a page of 100 messages peeked from random places in ``big``;
- resubmitting every dead-lettered message of ``redrive`` in one background request (its progress
  printed as it goes), then checking that each
  MessageId is in the queue exactly once and none is left in the dead-letter queue.

Not part of the test run:

    .venv/bin/python benchmarks/console_control_plane.py [--entities 1000] [--messages 1000000] [--dead 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, ULong
from sodalite.model import sas
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, PartitionRef, Purge
from sodalite.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"
CHUNK = 50_000


def record(seq: int, prefix: str, dead: bool) -> MessageRecord:
    out = bytearray()
    encode_value(Described(ULong(amqp_message.PROPERTIES), [f"{prefix}{seq}"]), out)
    properties: dict[str, Any] = {"n": seq, "color": "red" if seq % 2 else "blue"}
    if dead:
        properties.update({"DeadLetterReason": "Bench", "DeadLetterErrorDescription": "made by the benchmark"})
    encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), properties), out)
    encode_value(Described(ULong(amqp_message.DATA), b'{"order": %d, "note": "benchmark message"}' % seq), out)
    return MessageRecord(seq, 1_750_000_000_000 + seq, f"{prefix}{seq}", None, None, None, None, None, 0,
                         MessageState.ACTIVE, True, None, b"", 0, bytes(out))


def populate(data_dir: Path, messages: int, dead: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(data_dir / "messages.db", synchronous="NORMAL")
    store.open()
    for path, count, is_dead in (("big", messages, False), ("redrive/$deadletterqueue", dead, True)):
        ref = PartitionRef(path, 0)
        for start in range(1, count + 1, CHUNK):
            # The store numbers them 1, 2, ... in order, as record() names them.
            store.apply([Append(tuple(record(s, path[:3], is_dead)
                                           for s in range(start, min(start + CHUNK, count + 1))), ref=ref)])
    # The queue's own numbers continue after the dead-lettered ones, as if it had issued them.
    main = PartitionRef("redrive", 0)
    for start in range(1, dead + 1, CHUNK):
        store.apply([Append(tuple(record(s, "red", False) for s in range(start, min(start + CHUNK, dead + 1))),
                            ref=main)])
    store.apply([Purge(0, None, ref=main)])
    store.close()


def start_broker(data_dir: Path, config: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([str(ROOT / "scripts" / "serve"), "--host", "127.0.0.1", "--port", "0",
                             "--data-dir", str(data_dir), "--config", str(config), "--admin-port", "-1",
                             "--amqps-port", "-1", "--http-port", "0", "--sync", "FULL"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"Management \(HTTP\): http://[^:]+:(\d+)", line)
        if found:
            return proc, int(found.group(1))
    raise RuntimeError("the broker did not start")


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.token = sas.generate_token("sb://localhost/", KEY_NAME, KEY, int(time.time()) + 7200)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[Any, float]:
        request = urllib.request.Request(self.base + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": "Bearer " + self.token,
                                                  "Content-Type": "application/json"})
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            payload = response.read()
        return json.loads(payload), time.perf_counter() - began


def summary(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return f"median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms over {len(ms)} requests"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sodalite-console-bench-") as tmp:
        base = Path(tmp)
        queues = [{"Name": f"q{i:04d}", "Properties": {}} for i in range(args.entities)]
        queues += [{"Name": "big", "Properties": {}}, {"Name": "redrive", "Properties": {}}]
        config = base / "Config.json"
        config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": queues}]}}))
        began = time.perf_counter()
        populate(base / "data", args.messages, args.dead)
        print(f"built: {args.entities + 2} queues, {args.messages:,} messages in 'big', {args.dead:,} dead-lettered "
              f"in 'redrive' ({time.perf_counter() - began:.1f} s)", flush=True)
        began = time.perf_counter()
        proc, port = start_broker(base / "data", config)
        print(f"broker started and loaded in {time.perf_counter() - began:.1f} s", flush=True)
        try:
            api = Api(port)
            listing = []
            for _ in range(20):
                entities, took = api.call("GET", "/entities")
                listing.append(took)
            print(f"list {len(entities)} entities with counts: {summary(listing)} (target: the page loads < 1 s, "
                  "refreshes every 2 s)", flush=True)

            peeks = []
            rng = random.Random(17)
            for _ in range(20):
                start = rng.randrange(1, max(2, args.messages - 100))
                page, took = api.call("GET", f"/entities/big/$messages?count=100&fromSequenceNumber={start}")
                assert len(page["messages"]) == 100 and page["messages"][0]["sequenceNumber"] == start
                peeks.append(took)
            print(f"peek 100 from anywhere in {args.messages:,}: {summary(peeks)} (target < 200 ms)", flush=True)

            began = time.perf_counter()
            operation, _ = api.call("POST", "/entities/redrive/$move",
                                    {"all": True, "subQueue": "deadletter", "background": True})
            while operation["state"] == "running":
                print(f"  resubmitting: {operation['done']:,} of {operation['total']:,}", flush=True)
                time.sleep(2)
                operation, _ = api.call("GET", f"/operations/{operation['id']}")
            took = time.perf_counter() - began
            outcome = operation["outcome"] if operation["state"] == "succeeded" else operation["error"]
            print(f"resubmit {args.dead:,} dead-lettered messages: {took:.1f} s, {args.dead / took:,.0f} msg/s, "
                  f"outcome {outcome} (target < 60 s)", flush=True)
            counts = {e["path"]: e["counts"] for e in api.call("GET", "/entities")[0]}["redrive"]
            seen: list[str] = []
            start = 0
            while True:
                page, _ = api.call("GET", f"/entities/redrive/$messages?count=100&fromSequenceNumber={start}")
                seen += [m["messageId"] for m in page["messages"]]
                if page["nextSequenceNumber"] is None:
                    break
                start = page["nextSequenceNumber"]
            lost = args.dead - len(set(seen))
            doubled = len(seen) - len(set(seen))
            print(f"after the resubmit: active {counts['active']:,}, dead-letter {counts['deadLetter']:,}; "
                  f"lost {lost}, doubled {doubled}", flush=True)
            if lost or doubled or counts["deadLetter"]:
                sys.exit(1)
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
