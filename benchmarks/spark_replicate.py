"""Benchmark: replicate A -> B through Spark, in msg/s, with each broker's CPU per message.

Starts two brokers (``sodalite serve --sync FULL`` on free loopback ports, a queue of 16 partitions in
each), fills A with N messages of S bytes with the project's own AMQP client (batches of 1,000,
partition keys spread over 64 values), then:

* target receive: the same kind of load the Spark sink puts on B, without Spark: M messages sent to B
  as unsettled single transfers, 500 per link as the sink sends them, each waited for until durable;
  B's CPU per message (the receive path this benchmark is about);
* replicate: the streaming replicate pipeline A -> B on Spark ``local[2]`` (consuming A, 50,000 messages
  per trigger, triggers back to back) until B holds every message, end to end from the query's start,
  with A's and B's CPU per message; then the lag per partition until it is 0 and A is drained.

``--target-src`` runs B from another checkout's ``src`` (for an A/B of the target's receive path,
e.g. ``--target-src /path/to/main/src``); A and the Spark side always run this checkout.
Broker CPU is user + system time of the broker process from ``/proc/<pid>/stat``. Not part of the
test run:

    .venv/bin/python -u benchmarks/spark_replicate.py [--messages 100000] [--size 1024]
        [--receive-messages 20000] [--master local[2]] [--target-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import cpu_seconds as tree_cpu_seconds
from sodalite.amqpclient import AmqpClient, connection_string
from sodalite.amqpclient.message_codec import OutgoingMessage, encode_message

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench-replicate"
SEND_CHUNK = 500  # what the Spark sink sends per link (sodalite.spark.broker.SEND_CHUNK)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_cpu_seconds(pids: tuple[int, int]) -> float:
    """CPU of this process and its descendants but the brokers: Spark's driver JVM, its executors
    (local mode: the same JVM) and its Python workers, and this driver's Python."""
    return tree_cpu_seconds(os.getpid()) - sum(tree_cpu_seconds(pid) for pid in pids)


def start_broker(base: Path, src: Path | None) -> tuple[subprocess.Popen[str], str]:
    base.mkdir(parents=True, exist_ok=True)
    config = base / "Config.json"
    namespace = {"Name": "bench", "Queues": [{"Name": QUEUE, "Properties": {
        "EnablePartitioning": True, "MaxSizeInMegabytes": 81920}}]}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src) if src is not None else str(ROOT / "src")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sodalite.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(base / "data"), "--config", str(config), "--sync", "FULL", "--admin-port", "-1",
         "--http-port", "-1", "--amqps-port", "-1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"Connection string: (\S+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the broker did not start")


def payloads(count: int, size: int, prefix: str) -> list[bytes]:
    body = b"x" * size
    return [encode_message(OutgoingMessage(body, message_id=f"{prefix}{i}", partition_key=f"k{i % 64}"))
            for i in range(count)]


def client(conn: str) -> AmqpClient:
    s = connection_string.parse(conn)
    return AmqpClient(s.host, s.port, s.key_name, s.key, timeout=120)


def fill(conn: str, count: int, size: int) -> float:
    started = time.perf_counter()
    with client(conn) as c:
        for offset in range(0, count, 1000):
            c.send(QUEUE, payloads(min(1000, count - offset), size, f"m{offset}-"))
    return time.perf_counter() - started


def stored(conn: str) -> tuple[int, int]:
    """(messages made visible so far, messages still stored) in the queue, from the partition bounds."""
    from sodalite.spark.broker import Broker

    broker = Broker(conn)
    try:
        bounds = broker.bounds(QUEUE)
    finally:
        broker.close()
    return sum(b.next - (b.partition << 48) for b in bounds), sum(b.next - b.first for b in bounds
                                                                    if b.first is not None)


def target_receive(conn: str, pid: int, count: int, size: int) -> str:
    """B's receive path alone: unsettled single transfers, SEND_CHUNK per link, as the sink sends them."""
    messages = payloads(count, size, "t")
    with client(conn) as c:
        c.send(QUEUE, messages[:SEND_CHUNK])  # warm-up: the link, the token, the first commits
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        for offset in range(SEND_CHUNK, count, SEND_CHUNK):
            c.send(QUEUE, messages[offset : offset + SEND_CHUNK])
        took, used = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    sent = count - SEND_CHUNK
    return (f"{'target receive, unsettled single transfers':<46}: {sent / took:>8,.0f} msg/s ({took:5.1f} s), "
            f"broker CPU {used / sent * 1e6:.0f} us/msg (B)")


def replicate(spark: Any, conn: str, target_conn: str, pids: tuple[int, int], n: int, base: Path,
              per_trigger: int) -> list[str]:
    from sodalite.spark import pipelines

    before = stored(target_conn)[0]
    lines = []
    cpu_a, cpu_b, cpu_spark = cpu_seconds(pids[0]), cpu_seconds(pids[1]), spark_cpu_seconds(pids)
    t0 = time.perf_counter()
    query = pipelines.replicate(spark, conn, target_conn, [QUEUE], str(base / "checkpoint"), consume=True,
                                max_messages_per_trigger=per_trigger, processing_time="0 seconds")
    seen: dict[int, int] = {}
    try:
        while stored(target_conn)[0] - before < n:
            if query.exception() is not None:
                raise RuntimeError(f"replicate failed: {query.exception()}")
            time.sleep(0.5)
        took = time.perf_counter() - t0
        used_a, used_b = cpu_seconds(pids[0]) - cpu_a, cpu_seconds(pids[1]) - cpu_b
        used_spark = spark_cpu_seconds(pids) - cpu_spark
        lines.append(f"{f'replicate A -> B of {n:,}, streaming, consuming':<46}: {n / took:>8,.0f} msg/s "
                     f"({took:5.1f} s), broker CPU {used_a / n * 1e6:.0f} us/msg (A) + {used_b / n * 1e6:.0f} us/msg "
                     f"(B); Spark CPU {used_spark / n * 1e6:.0f} us/msg")
        print(lines[-1], flush=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = pipelines.progress(query, seen)
            left = stored(conn)[1]
            if state.lag and not any(state.lag.values()) and left == 0:
                lines.append(f"{'':<46}  lag 0 in all {len(state.lag)} partitions, A drained "
                             f"{time.perf_counter() - t0 - took:.1f} s after B held every message")
                break
            time.sleep(1)
        else:
            lines.append(f"{'':<46}  lag did not reach 0 in 300 s: {state.lag}, {left} left in A")
    finally:
        query.stop()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="replicated messages")
    parser.add_argument("--receive-messages", type=int, default=20_000, help="messages of the target receive run")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--target-src", type=Path, default=None, help="run broker B from this src directory")
    parser.add_argument("--no-spark", action="store_true", help="the target receive run only")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sodalite-replicate-bench-") as tmp:
        base = Path(tmp)
        source, conn = start_broker(base / "a", None)
        target, target_conn = start_broker(base / "b", args.target_src)
        try:
            lines.append(f"B runs {args.target_src or ROOT / 'src'}")
            lines.append(target_receive(target_conn, target.pid, args.receive_messages, args.size))
            print(lines[-1], flush=True)
            if not args.no_spark:
                took = fill(conn, args.messages, args.size)
                lines.append(f"{'fill A (own AMQP client, batches of 1,000)':<46}: {args.messages / took:>8,.0f} "
                             f"msg/s ({took:5.1f} s)")
                print(lines[-1], flush=True)
                from pyspark.sql import SparkSession

                from sodalite.spark import register

                spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
                spark.sparkContext.setLogLevel("ERROR")
                register(spark)
                lines += replicate(spark, conn, target_conn, (source.pid, target.pid), args.messages, base,
                                   args.max_per_trigger)
                spark.stop()
        finally:
            for p in (source, target):
                p.terminate()
                p.wait(30)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
