"""Benchmark: the `sodalite` Spark data source on this machine, beside Spark's own ceiling.

Starts two brokers with scripts/serve on free loopback ports (a partitioned queue in each, so Spark
reads 16 partitions in parallel), fills broker A with N messages of S bytes with the project's own
AMQP client, then times on local[2]:

* export: spark.read.format("sodalite") -> write.parquet (browse: nothing removed), all columns, then
  with a narrow schema (``.schema("body binary, messageId string, sequenceNumber long, enqueuedTime
  timestamp")``: the reader decodes only what those columns need), with broker CPU per message;
* ceiling: spark.read.parquet(the export) -> write.parquet elsewhere (Spark itself on this machine);
* the Python data source ceiling: a Python data source that does no work at all (it yields the same
  prebuilt Arrow batches of the full schema, 1 KiB bodies) -> write.parquet: what any Python data
  source can reach here, Spark's own cost of taking Arrow batches from a Python worker;
* replicate: the streaming replicate pipeline A -> B (consuming A, processing-time trigger), end to end
  until B holds every message, with both brokers' CPU per message, then the lag per partition that
  the pipeline's progress reports, until every partition's lag is 0 and A is drained.

Not part of the test run:

    .venv/bin/python benchmarks/spark_export.py [--messages 100000] [--replicate-messages N] [--size 1024]
        [--master local[2]] [--repeat 2] [--no-replicate]

Each export and ceiling is run ``--repeat`` times in the same warm session (the spread is printed);
beside the wall-clock rate, the CPU seconds of the broker and of Spark (the JVM and its Python workers:
every process under this one) over the span.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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


def tree_cpu(root: int) -> float:
    """CPU seconds of every process below ``root`` (Spark's JVM and Python workers): each one alive now, with
    the children it reaped (a Python worker that ended is counted in the daemon that forked it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    total, stack = 0.0, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
        stack += children.get(pid, [])
    return total


def start_broker(base: Path) -> tuple[subprocess.Popen[str], str]:
    base.mkdir(parents=True, exist_ok=True)
    config = base / "Config.json"
    namespace = {"Name": "bench", "Queues": [{"Name": name, "Properties": {
        "EnablePartitioning": True, "MaxSizeInMegabytes": 81920}} for name in (QUEUE, REPLICATED)]}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), "--port", "0", "--data-dir", str(base / "data"), "--config", str(config),
         "--admin-port", "-1", "--http-port", "-1", "--amqps-port", "-1", "--sync", "FULL"],
        stdout=subprocess.PIPE, text=True)
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


def fill(conn: str, queue: str, count: int, size: int, senders: int = 4) -> float:
    """Send ``count`` messages from ``senders`` connections at once (each waits for every batch to be durable)."""
    from concurrent.futures import ThreadPoolExecutor

    settings = connection_string.parse(conn)
    body = b"x" * size

    def send(offsets: range) -> None:
        with AmqpClient(settings.host, settings.port, settings.key_name, settings.key, timeout=120) as client:
            for offset in offsets:
                client.send(queue, [encode_message(OutgoingMessage(body, message_id=f"m{i}",
                                                                   partition_key=f"k{i % 64}"))
                                    for i in range(offset, min(count, offset + 1000))])

    started = time.perf_counter()
    with ThreadPoolExecutor(senders) as pool:
        for done in [pool.submit(send, range(first * 1000, count, senders * 1000)) for first in range(senders)]:
            done.result()
    return time.perf_counter() - started


def register_zero_work(spark: Any, rows_total: int, size: int) -> None:
    """The ``zero-work`` Python data source: the full schema, 16 partitions, each yielding the same
    prebuilt Arrow batch of 4,096 rows (1 KiB bodies) until it has given its share of ``rows_total``."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from sodalite.spark import rows

    class Share(InputPartition):  # type: ignore[misc]
        def __init__(self, count: int) -> None:
            self.count = count

    class Reader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[Share]:
            return [Share(rows_total // 16 + (1 if i < rows_total % 16 else 0)) for i in range(16)]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            n = 4096
            schema = rows.arrow_schema()
            values: dict[str, Any] = {
                "body": [b"x" * size] * n, "messageId": [f"m{i}" for i in range(n)], "partitionKey": ["k1"] * n,
                "enqueuedTime": [1_700_000_000_000_000] * n, "sequenceNumber": list(range(n)),
                "partition": [0] * n, "deliveryCount": [0] * n, "state": ["active"] * n,
                "applicationProperties": [[]] * n, "amqpMessage": [b"y" * (size + 60)] * n}
            batch = pa.RecordBatch.from_arrays(
                [pa.array(values.get(f.name, [None] * n), type=f.type) for f in schema], schema=schema)
            left = partition.count
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class ZeroWork(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "zero-work"

        def schema(self) -> str:
            return rows.SCHEMA

        def reader(self, schema: Any) -> Reader:
            return Reader()

    spark.dataSource.register(ZeroWork)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-replicate", action="store_true")
    parser.add_argument("--replicate-messages", type=int, default=None,
                        help="messages for the replicate (a queue of their own; default: --messages)")
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each export and ceiling (default 2)")
    parser.add_argument("--fill-senders", type=int, default=4, help="connections filling the queue (default 4)")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="a copy of broker A's directory (data/ and Config.json) already holding --messages "
                             "messages in the export queue: no fill (and no replicate)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    n = args.messages

    from pyspark.sql import SparkSession

    from sodalite.spark import pipelines, register

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sodalite-spark-bench-") as tmp:
        base = Path(tmp)
        if args.reuse is not None:  # broker A's directory from an earlier run, already filled
            shutil.copytree(args.reuse, base / "a")
        proc, conn = start_broker(base / "a")
        target, target_conn = start_broker(base / "b")
        try:
            if args.reuse is None:
                took = fill(conn, QUEUE, n, args.size, args.fill_senders)
                print(f"filled {n} messages of {args.size} B in {took:.1f} s ({n / took:,.0f} msg/s, own AMQP client)")
                lines.append(f"{'fill A (own AMQP client, durable sends)':<44}: {n / took:>9,.0f} msg/s "
                             f"({took:6.1f} s)")
            n_repl = n if args.replicate_messages is None else args.replicate_messages
            if args.reuse is not None:
                args.no_replicate = True
            if not args.no_replicate:
                fill(conn, REPLICATED, n_repl, args.size, args.fill_senders)
            spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            # A warm-up on a tiny read, so the session's first-job costs are not counted.
            spark.read.format("sodalite").option("connectionString", conn).option("entity", QUEUE).load() \
                .limit(10).collect()

            register_zero_work(spark, n, args.size)
            me = os.getpid()
            rates: dict[str, list[float]] = {}

            def timed(label: str, job: Any, out: str) -> None:
                for run in range(args.repeat):
                    cpu0, spark0, t0 = cpu_seconds(proc.pid), tree_cpu(me), time.perf_counter()
                    job(out)
                    took = time.perf_counter() - t0
                    cpu, spark_cpu = cpu_seconds(proc.pid) - cpu0, tree_cpu(me) - spark0
                    exported = spark.read.parquet(str(base / out)).count()
                    assert exported == n, f"{label}: wrote {exported} of {n}"
                    rates.setdefault(label, []).append(n / took)
                    line = (f"{label:<44}: {n / took:>9,.0f} rows/s ({took:6.1f} s), broker CPU {cpu / n * 1e6:.0f} "
                            f"us/msg, Spark CPU {spark_cpu / n * 1e6:.0f} us/row (run {run + 1})")
                    lines.append(line)
                    print(line, flush=True)

            def export(schema: str | None) -> Any:
                def job(out: str) -> None:
                    reader = spark.read.format("sodalite")
                    if schema:
                        reader = reader.schema(schema)
                    reader.option("connectionString", conn).option("entity", QUEUE).load() \
                        .write.mode("overwrite").parquet(str(base / out))
                return job

            timed("export broker -> Parquet, all columns", export(None), "export")
            timed("export broker -> Parquet, 4 columns", export("body binary, messageId string, sequenceNumber long, "
                                                               "enqueuedTime timestamp"), "narrow")
            timed("Parquet -> Parquet (the ceiling)", lambda out: spark.read.parquet(str(base / "export"))
                  .write.mode("overwrite").parquet(str(base / out)), "copy")
            timed("zero-work Python source -> Parquet", lambda out: spark.read.format("zero-work").load()
                  .write.mode("overwrite").parquet(str(base / out)), "zero")
            ceiling = max(rates["Parquet -> Parquet (the ceiling)"])
            for label, seen in rates.items():
                spread = (max(seen) - min(seen)) / max(seen) * 100
                lines.append(f"{label:<44}: best {max(seen):>9,.0f} rows/s, {max(seen) / ceiling:4.0%} of the "
                             f"ceiling's best; spread {spread:.0f}% over {len(seen)} runs")
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
