"""Benchmark: the official SDK batch-sends 10,000 messages of 1 KB, then receives and completes them.

Starts a broker with scripts/serve on a free loopback port and a temporary data directory, runs
the two phases, and prints messages per second, the broker's CPU seconds per message (user +
system time read from /proc/<pid>/stat) and latency percentiles for each phase. Not part of the
test run:

    .venv/bin/python benchmarks/send_receive.py [--messages 10000] [--size 1024] [--sync FULL|NORMAL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "n/a"
    ordered = sorted(samples)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return f"p50 {pick(0.50):.2f} ms, p90 {pick(0.90):.2f} ms, p99 {pick(0.99):.2f} ms, max {ordered[-1] * 1000:.2f} ms"


def start_broker(data_dir: Path, sync_mode: str) -> tuple[subprocess.Popen[str], str]:
    config = data_dir / "Config.json"
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": [
        {"Name": QUEUE, "Properties": {"LockDuration": "PT5M"}}]}]}}))
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), "--port", "0", "--data-dir", str(data_dir / "data"), "--config",
         str(config), "--sync", sync_mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"Connection string: (\S+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the broker did not start")


def phase(name: str, pid: int, count: int, run: object) -> None:
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    latencies = run()  # type: ignore[operator]
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    print(f"{name}: {count} messages in {elapsed:.2f} s = {count / elapsed:,.0f} msg/s; "
          f"broker CPU {cpu * 1e6 / count:.1f} µs/message; per call {percentiles(latencies)}")


def send_phase(connection_string: str, count: int, size: int) -> list[float]:
    body = b"x" * size
    latencies: list[float] = []
    with ServiceBusClient.from_connection_string(connection_string) as client, client.get_queue_sender(QUEUE) as s:
        remaining = count
        while remaining:
            batch = s.create_message_batch()
            while remaining:
                try:
                    batch.add_message(ServiceBusMessage(body))
                except ValueError:
                    break
                remaining -= 1
            t = time.perf_counter()
            s.send_messages(batch)
            latencies.append(time.perf_counter() - t)
    return latencies


def receive_phase(connection_string: str, count: int) -> list[float]:
    latencies: list[float] = []
    done = 0
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(QUEUE, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=300) as r:
            while done < count:
                batch = r.receive_messages(max_message_count=300, max_wait_time=5)
                if not batch:
                    raise RuntimeError(f"only {done} of {count} messages came back")
                for m in batch:
                    t = time.perf_counter()
                    r.complete_message(m)
                    latencies.append(time.perf_counter() - t)
                done += len(batch)
    return latencies


async def _receive_concurrently(connection_string: str, count: int) -> list[float]:
    latencies: list[float] = []

    async def complete(receiver: object, message: object) -> None:
        t = time.perf_counter()
        await receiver.complete_message(message)  # type: ignore[attr-defined]
        latencies.append(time.perf_counter() - t)

    done = 0
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_receiver(QUEUE, prefetch_count=300) as receiver:
            while done < count:
                batch = await receiver.receive_messages(max_message_count=300, max_wait_time=5)
                if not batch:
                    raise RuntimeError(f"only {done} of {count} messages came back")
                await asyncio.gather(*(complete(receiver, m) for m in batch))
                done += len(batch)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sodalite-bench-") as tmp:
        proc, connection_string = start_broker(Path(tmp), args.sync)
        try:
            print(f"Sodalite benchmark: {args.messages} messages of {args.size} bytes, SQLite synchronous={args.sync}, "
                  f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
            n, size = args.messages, args.size
            phase("send (batches, sync SDK)", proc.pid, n, lambda: send_phase(connection_string, n, size))
            phase("receive+complete (PeekLock, sync SDK)", proc.pid, n, lambda: receive_phase(connection_string, n))
            phase("send (batches, sync SDK)", proc.pid, n, lambda: send_phase(connection_string, n, size))
            phase("receive+complete (PeekLock, aio SDK, concurrent completes)", proc.pid, n,
                  lambda: asyncio.run(_receive_concurrently(connection_string, n)))
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
