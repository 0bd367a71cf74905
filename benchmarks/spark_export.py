"""Benchmark: the `sodalite` Spark data source on this machine, beside Spark's own ceiling.

Starts two brokers with scripts/serve on free loopback ports (a partitioned queue in each, so Spark
reads 16 partitions in parallel), fills broker A with N messages of S bytes with the project's own
AMQP client, then times on local[2]:

* export: spark.read.format("sodalite") -> write.parquet (browse: nothing removed), all columns, then
  with a narrow schema (``.schema("body binary, messageId string, sequenceNumber long, enqueuedTime
  timestamp")``: the reader decodes only what those columns need), with broker CPU per message;
* ceiling: spark.read.parquet(the export) -> write.parquet elsewhere (Spark itself on this machine);
* replicate: the streaming replicate pipeline A -> B (consuming A, processing-time trigger), end to end
  until B holds every message, with both brokers' CPU per message, then the lag per partition that
  the pipeline's progress reports, until every partition's lag is 0 and A is drained.

Not part of the test run:

    .venv/bin/python benchmarks/spark_export.py [--messages 100000] [--replicate-messages N] [--size 1024]
        [--master local[2]]
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

from sodalite.amqpclient import AmqpClient, connection_string
from sodalite.amqpclient.message_codec import OutgoingMessage, encode_message

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"  # exported
REPLICATED = "bench-replicate"  # replicated (its own, usually smaller, fill)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(base: Path) -> tuple[subprocess.Popen[str], str]:
    base.mkdir(parents=True, exist_ok=True)
    config = base / "Config.json"
    namespace = {"Name": "bench", "Queues": [{"Name": name, "Properties": {
        "EnablePartitioning": True, "MaxSizeInMegabytes": 81920}} for name in (QUEUE, REPLICATED)]}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), "--port", "0", "--data-dir", str(base / "data"), "--config", str(config),
         "--admin-port", "-1", "--http-port", "-1", "--amqps-port", "-1"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"Connection string: (\S+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the broker did not start")


def stored(conn: str, queue: str) -> tuple[int, int]:
    """(messages made visible so far, messages still stored) in ``queue``, from the partition bounds."""
    from sodalite.spark.broker import Broker

    broker = Broker(conn)
    try:
        bounds = broker.bounds(queue)
    finally:
        broker.close()
    made = sum(b.next - (b.partition << 48) for b in bounds)
    left = sum(b.next - b.first for b in bounds if b.first is not None)
    return made, left


def fill(conn: str, queue: str, count: int, size: int) -> float:
    settings = connection_string.parse(conn)
    body = b"x" * size
    started = time.perf_counter()
    with AmqpClient(settings.host, settings.port, settings.key_name, settings.key, timeout=120) as client:
        for offset in range(0, count, 1000):
            client.send(queue, [encode_message(OutgoingMessage(body, message_id=f"m{i}", partition_key=f"k{i % 64}"))
                                for i in range(offset, min(count, offset + 1000))])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-replicate", action="store_true")
    parser.add_argument("--replicate-messages", type=int, default=None,
                        help="messages for the replicate (a queue of their own; default: --messages)")
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    n = args.messages

    from pyspark.sql import SparkSession

    from sodalite.spark import pipelines, register

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sodalite-spark-bench-") as tmp:
        base = Path(tmp)
        proc, conn = start_broker(base / "a")
        target, target_conn = start_broker(base / "b")
        try:
            took = fill(conn, QUEUE, n, args.size)
            print(f"filled {n} messages of {args.size} B in {took:.1f} s ({n / took:,.0f} msg/s, own AMQP client)")
            lines.append(f"{'fill A (own AMQP client, durable sends)':<44}: {n / took:>9,.0f} msg/s ({took:6.1f} s)")
            n_repl = n if args.replicate_messages is None else args.replicate_messages
            if not args.no_replicate:
                fill(conn, REPLICATED, n_repl, args.size)
            spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            # A warm-up on a tiny read, so the session's first-job costs are not counted.
            spark.read.format("sodalite").option("connectionString", conn).option("entity", QUEUE).load() \
                .limit(10).collect()

            def export(label: str, schema: str | None, out: str) -> None:
                cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
                reader = spark.read.format("sodalite")
                if schema:
                    reader = reader.schema(schema)
                reader.option("connectionString", conn).option("entity", QUEUE).load() \
                    .write.mode("overwrite").parquet(str(base / out))
                took, cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
                exported = spark.read.parquet(str(base / out)).count()
                assert exported == n, f"exported {exported} of {n}"
                lines.append(f"{label:<44}: {n / took:>9,.0f} rows/s ({took:6.1f} s), "
                             f"broker CPU {cpu / n * 1e6:.0f} us/msg")

            export("export broker -> Parquet, all columns", None, "export")
            export("export broker -> Parquet, 4 columns", "body binary, messageId string, sequenceNumber long, "
                   "enqueuedTime timestamp", "narrow")
            t0 = time.perf_counter()
            spark.read.parquet(str(base / "export")).write.mode("overwrite").parquet(str(base / "copy"))
            took = time.perf_counter() - t0
            lines.append(f"{'Parquet -> Parquet (the ceiling)':<44}: {n / took:>9,.0f} rows/s ({took:6.1f} s)")
            for line in lines:
                print(line, flush=True)

            if not args.no_replicate:
                replicate(spark, pipelines, conn, target_conn, proc.pid, target.pid, n_repl, base, args.max_per_trigger,
                          lines)
            spark.stop()
        finally:
            for p in (proc, target):
                p.terminate()
                p.wait(30)
    print("\n".join(lines))


def replicate(spark: Any, pipelines: Any, conn: str, target_conn: str, source_pid: int, target_pid: int, n: int,
              base: Path, per_trigger: int, lines: list[str]) -> None:
    cpu_a, cpu_b, t0 = cpu_seconds(source_pid), cpu_seconds(target_pid), time.perf_counter()
    query = pipelines.replicate(spark, conn, target_conn, [REPLICATED], str(base / "checkpoint"), consume=True,
                                max_messages_per_trigger=per_trigger, processing_time="0 seconds")
    seen: dict[int, int] = {}
    try:
        while stored(target_conn, REPLICATED)[0] < n:
            if query.exception() is not None:
                raise RuntimeError(f"replicate failed: {query.exception()}")
            time.sleep(0.5)
        took = time.perf_counter() - t0
        used_a, used_b = cpu_seconds(source_pid) - cpu_a, cpu_seconds(target_pid) - cpu_b
        label = f"replicate A -> B of {n:,}, streaming, consuming"
        lines.append(f"{label:<44}: {n / took:>9,.0f} msg/s ({took:6.1f} s), "
                     f"broker CPU {used_a / n * 1e6:.0f} us/msg (A) + {used_b / n * 1e6:.0f} us/msg (B)")
        print(lines[-1], flush=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = pipelines.progress(query, seen)
            left = stored(conn, REPLICATED)[1]
            print(f"  progress: moved {state.moved}, lag {sum(state.lag.values())} over {len(state.lag)} "
                  f"partitions, {left} left in A", flush=True)
            if state.lag and not any(state.lag.values()) and left == 0:
                lines.append(f"{'':<44}  lag 0 in all {len(state.lag)} partitions, A drained "
                             f"{time.perf_counter() - t0 - took:.1f} s after B held every message")
                break
            time.sleep(2)
        else:
            lines.append(f"{'':<44}  lag did not reach 0 in 300 s: {state.lag}, {left} left in A")
    finally:
        query.stop()


if __name__ == "__main__":
    main()
