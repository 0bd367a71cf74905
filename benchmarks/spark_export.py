"""Benchmark: a batch export of N messages from a broker to Parquet with the `sodalite` Spark data source,
beside the same Spark job reading the same rows from a Parquet file (the ceiling for Spark itself here).

Starts a broker with scripts/serve on a free loopback port (a partitioned queue, so Spark reads 16
partitions in parallel), fills it with the project's own AMQP client, then times on local[2]:

* export: spark.read.format("sodalite") -> write.parquet (browse: nothing removed), with the broker's
  CPU seconds per message over the same span;
* ceiling: spark.read.parquet(the export) -> write.parquet elsewhere.

Not part of the test run:

    .venv/bin/python benchmarks/spark_export.py [--messages 100000] [--size 1024] [--master local[2]]
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

from sodalite.amqpclient import AmqpClient, connection_string
from sodalite.amqpclient.message_codec import OutgoingMessage, encode_message

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(base: Path) -> tuple[subprocess.Popen[str], str]:
    config = base / "Config.json"
    namespace = {"Name": "bench", "Queues": [{"Name": QUEUE, "Properties": {
        "EnablePartitioning": True, "MaxSizeInMegabytes": 81920}}]}
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


def fill(conn: str, count: int, size: int) -> float:
    settings = connection_string.parse(conn)
    body = b"x" * size
    started = time.perf_counter()
    with AmqpClient(settings.host, settings.port, settings.key_name, settings.key, timeout=120) as client:
        for offset in range(0, count, 1000):
            client.send(QUEUE, [encode_message(OutgoingMessage(body, message_id=f"m{i}", partition_key=f"k{i % 64}"))
                                for i in range(offset, min(count, offset + 1000))])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from sodalite.spark import register

    with tempfile.TemporaryDirectory(prefix="sodalite-spark-bench-") as tmp:
        base = Path(tmp)
        proc, conn = start_broker(base)
        try:
            took = fill(conn, args.messages, args.size)
            print(f"filled {args.messages} messages of {args.size} B in {took:.1f} s "
                  f"({args.messages / took:,.0f} msg/s, own AMQP client)")
            spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            register(spark)
            # A warm-up on a tiny read, so the session's first-job costs are not counted.
            spark.read.format("sodalite").option("connectionString", conn).option("entity", QUEUE).load() \
                .limit(10).collect()

            cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
            df = spark.read.format("sodalite").option("connectionString", conn).option("entity", QUEUE).load()
            df.write.mode("overwrite").parquet(str(base / "export"))
            export_s, broker_cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
            exported = spark.read.parquet(str(base / "export")).count()
            assert exported == args.messages, f"exported {exported} of {args.messages}"

            t0 = time.perf_counter()
            spark.read.parquet(str(base / "export")).write.mode("overwrite").parquet(str(base / "copy"))
            ceiling_s = time.perf_counter() - t0
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"export broker -> Parquet : {args.messages / export_s:>10,.0f} rows/s ({export_s:.1f} s), "
          f"broker CPU {broker_cpu / args.messages * 1e6:.0f} us/msg")
    print(f"Parquet -> Parquet       : {args.messages / ceiling_s:>10,.0f} rows/s ({ceiling_s:.1f} s), "
          "the ceiling for Spark on this machine")


if __name__ == "__main__":
    main()
