"""Benchmark: the official SDK batch-sends 10,000 messages of 1 KB, then receives and completes them.

Starts a broker with scripts/serve on a free loopback port and a temporary data directory, runs
the two phases, and prints messages per second, the broker's CPU seconds per message (user +
system time read from /proc/<pid>/stat) and latency percentiles for each phase. Not part of the
test run:

    .venv/bin/python benchmarks/send_receive.py [--messages 10000] [--size 1024] [--sync FULL|NORMAL]
        [--partitioned] [--stores N] [--store postgresql://...] [--receive-and-delete [--rounds N]]

``--store`` puts the default messaging store in that PostgreSQL database (docs/postgresql.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.aio import ServiceBusReceiver

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


def start_broker(data_dir: Path, sync_mode: str, partitioned: bool = False,
                 stores: int = 1, store_url: str | None = None) -> tuple[subprocess.Popen[str], str]:
    config = data_dir / "Config.json"
    namespace = {"Name": "bench", "Queues": [
        {"Name": QUEUE, "Properties": {"LockDuration": "PT5M", "EnablePartitioning": partitioned}}],
        "MessagingStores": [{"Name": f"s{i}", "Path": f"s{i}.db"} for i in range(1, stores)]}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), "--port", "0", "--data-dir", str(data_dir / "data"), "--config",
         str(config), "--sync", sync_mode, "--admin-port", "-1", "--http-port", "-1", "--amqps-port", "-1",
         *(["--store", store_url] if store_url else [])],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"Connection string: (\S+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the broker did not start")


class Meter:
    """Times a phase from its first message to its last, with the broker's CPU over the same span.

    The SDK spends about 50 ms per frame while it opens or closes a handler (it reads one frame per
    polling cycle), so handler setup and teardown are kept outside the measured span.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu0 = self.t0 = self.elapsed = self.cpu = 0.0

    def start(self) -> None:
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.perf_counter()

    def stop(self) -> None:
        self.elapsed, self.cpu = time.perf_counter() - self.t0, cpu_seconds(self.pid) - self.cpu0


def phase(name: str, pid: int, count: int, run: Callable[[Meter], list[float]]) -> None:
    meter = Meter(pid)
    latencies = run(meter)
    print(f"{name}: {count} messages in {meter.elapsed:.2f} s = {count / meter.elapsed:,.0f} msg/s; "
          f"broker CPU {meter.cpu * 1e6 / count:.1f} µs/message; per call {percentiles(latencies)}")


def send_phase(meter: Meter, connection_string: str, count: int, size: int) -> list[float]:
    body = b"x" * size
    latencies: list[float] = []
    with ServiceBusClient.from_connection_string(connection_string) as client, client.get_queue_sender(QUEUE) as s:
        batches = []
        remaining = count
        while remaining:
            batch = s.create_message_batch()
            while remaining:
                try:
                    batch.add_message(ServiceBusMessage(body))
                except ValueError:
                    break
                remaining -= 1
            batches.append(batch)
        meter.start()
        for batch in batches:
            t = time.perf_counter()
            s.send_messages(batch)
            latencies.append(time.perf_counter() - t)
        meter.stop()
    return latencies


def receive_phase(meter: Meter, connection_string: str, count: int) -> list[float]:
    latencies: list[float] = []
    done = 0
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(QUEUE, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=300) as r:
            meter.start()
            while done < count:
                batch = r.receive_messages(max_message_count=300, max_wait_time=5)
                if not batch:
                    raise RuntimeError(f"only {done} of {count} messages came back")
                for m in batch:
                    t = time.perf_counter()
                    r.complete_message(m)
                    latencies.append(time.perf_counter() - t)
                done += len(batch)
            meter.stop()
    return latencies


def receive_and_delete_phase(meter: Meter, connection_string: str, count: int) -> list[float]:
    """ReceiveAndDelete with the sync SDK (prefetch 300): the latencies are per receive call."""
    latencies: list[float] = []
    done = 0
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       prefetch_count=300) as r:
            meter.start()
            while done < count:
                t = time.perf_counter()
                batch = r.receive_messages(max_message_count=300, max_wait_time=5)
                latencies.append(time.perf_counter() - t)
                if not batch:
                    raise RuntimeError(f"only {done} of {count} messages came back")
                done += len(batch)
            meter.stop()
    return latencies


async def _receive_concurrently(meter: Meter, connection_string: str, count: int) -> list[float]:
    latencies: list[float] = []

    async def complete(receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage) -> None:
        t = time.perf_counter()
        await receiver.complete_message(message)
        latencies.append(time.perf_counter() - t)

    done = 0
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_receiver(QUEUE, prefetch_count=300) as receiver:
            meter.start()
            while done < count:
                batch = await receiver.receive_messages(max_message_count=300, max_wait_time=5)
                if not batch:
                    raise RuntimeError(f"only {done} of {count} messages came back")
                await asyncio.gather(*(complete(receiver, m) for m in batch))
                done += len(batch)
            meter.stop()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL")
    parser.add_argument("--partitioned", action="store_true", help="a partitioned queue (16 partitions)")
    parser.add_argument("--stores", type=int, default=1, help="messaging stores the partitions spread over")
    parser.add_argument("--store", default=None, help="a PostgreSQL URL for the default messaging store")
    parser.add_argument("--receive-and-delete", action="store_true",
                        help="only send, then receive in ReceiveAndDelete mode (sync SDK), --rounds times")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of --receive-and-delete (default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sodalite-bench-") as tmp:
        proc, connection_string = start_broker(Path(tmp), args.sync, args.partitioned, args.stores, args.store)
        try:
            where = "PostgreSQL" if args.store else f"SQLite synchronous={args.sync}"
            print(f"Sodalite benchmark: {args.messages} messages of {args.size} bytes, {where}, "
                  f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
            n, size = args.messages, args.size
            if args.receive_and_delete:
                for _ in range(args.rounds):
                    phase("send (batches, sync SDK)", proc.pid, n, lambda m: send_phase(m, connection_string, n, size))
                    phase("receive (ReceiveAndDelete, sync SDK, prefetch 300)", proc.pid, n,
                          lambda m: receive_and_delete_phase(m, connection_string, n))
                return 0
            phase("send (batches, sync SDK)", proc.pid, n, lambda m: send_phase(m, connection_string, n, size))
            phase("receive+complete (PeekLock, sync SDK)", proc.pid, n,
                  lambda m: receive_phase(m, connection_string, n))
            phase("send (batches, sync SDK)", proc.pid, n, lambda m: send_phase(m, connection_string, n, size))
            phase("receive+complete (PeekLock, aio SDK, concurrent completes)", proc.pid, n,
                  lambda m: asyncio.run(_receive_concurrently(m, connection_string, n)))
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
