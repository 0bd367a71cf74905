"""Backlog benchmark: a queue of N messages of 1 KB, and what that depth costs.

For Sodalite (``scripts/serve --sync FULL`` by default) and, in the same run, a RabbitMQ quorum queue
(pika, publisher confirms):

1. receive + complete rate of ``--probe`` messages on the empty queue (4 concurrent PeekLock receivers;
   pika: 4 consumers with manual acks), the baseline;
2. fill the queue with ``--messages`` messages (batch sends from 2 senders; default 1,000,000): fill
   rate and the broker's CPU per message;
3. broker RSS and data on disk at that depth;
4. ``kill -9`` of the broker, start it again on the same data, and the time from the kill until the
   broker listens and until a receiver gets its first message;
5. RSS after the restart, and the receive + complete rate of ``--probe`` messages at that depth,
   beside the empty queue's.

Not part of the test run:

    .venv/bin/python benchmarks/backlog.py [--messages 1000000] [--probe 5000] [--targets sodalite,rabbit]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from azure.servicebus import ServiceBusClient

import harness
import workloads
from harness import Broker, Cleanup, Meter

QUEUE = "backlog"


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.t0, self.last = total, time.perf_counter(), 0.0
        self.count = 0

    def __call__(self, n: int, absolute: bool = True) -> None:
        self.count = n if absolute else self.count + n
        now = time.perf_counter()
        if now - self.last > 10:
            self.last = now
            print(f"    ... {self.count:,} of {self.total:,} ({self.count / (now - self.t0):,.0f} msg/s)", flush=True)


def report_rate(label: str, count: int, meter: Meter) -> float:
    rate = count / meter.elapsed
    print(f"  {label}: {count:,} messages in {meter.elapsed:.1f} s = {rate:,.0f} msg/s, "
          f"broker CPU {meter.cpu * 1e6 / count:.1f} µs/msg", flush=True)
    return rate


def sdk_first_delivery(connection_string: str) -> float:
    """Receive (and complete) one message; the perf_counter time it arrived."""
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_receiver(QUEUE, max_wait_time=60) as receiver:
        for _ in range(3):
            batch = receiver.receive_messages(max_message_count=1, max_wait_time=60)
            if batch:
                at = time.perf_counter()
                receiver.complete_message(batch[0])
                return at
    raise RuntimeError("no message after the restart")


def pika_first_delivery(broker: Broker) -> float:
    import pika

    conn = pika.BlockingConnection(harness.rabbit_params(broker))
    ch = conn.channel()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        method, _props, _body = ch.basic_get(QUEUE, auto_ack=False)
        if method is not None:
            at = time.perf_counter()
            ch.basic_ack(method.delivery_tag)
            conn.close()
            return at
        time.sleep(0.01)
    raise RuntimeError("no message after the restart")


def run_target(name: str, cleanup: Cleanup, tmp: Path, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    print(f"\n## {name}", flush=True)
    if name == "rabbit":
        broker = harness.start_rabbitmq(cleanup, tmp / "rabbit")
        harness.declare_quorum(broker, QUEUE)
        params = harness.rabbit_params(broker)

        def send(m: Meter | None, n: int) -> None:
            workloads.pika_publish(m, params, QUEUE, n, batch=250)

        def receive(m: Meter, n: int) -> None:
            workloads.pika_consume_threads(m, harness.rabbit_params(broker), QUEUE, n)

        def fill(n: int, progress: Progress) -> None:
            workloads.pika_fill(params, QUEUE, n, publishers=2, progress=lambda k: progress(k, absolute=False))
    else:
        broker = harness.start_sodalite(cleanup, tmp / "sodalite", args.sync, [QUEUE],
                                         f"Sodalite {args.sync}")

        def send(m: Meter | None, n: int) -> None:
            workloads.sdk_send(m or Meter(broker.measured_pid), broker.connection_string, QUEUE, n)

        def receive(m: Meter, n: int) -> None:
            workloads.sdk_receive_threads(m, broker.connection_string, QUEUE, n)

        def fill(n: int, progress: Progress) -> None:
            workloads.sdk_fill(broker.connection_string, QUEUE, n, senders=2, progress=progress)

    def phase(label: str, run: Callable[[Meter], None], count: int) -> float:
        meter = Meter(broker.measured_pid)
        run(meter)
        return report_rate(label, count, meter)

    send(None, args.probe)
    out["empty_rate"] = phase("receive + complete, empty queue", lambda m: receive(m, args.probe), args.probe)
    out["rss_empty"] = harness.rss_bytes(broker.measured_pid)
    progress = Progress(args.messages)

    def timed_fill(meter: Meter) -> None:
        meter.start()
        fill(args.messages, progress)
        meter.stop()

    out["fill_rate"] = phase(f"fill {args.messages:,}", timed_fill, args.messages)
    send(None, args.probe)  # the probe messages go last, behind the backlog
    out["rss_full"] = harness.rss_bytes(broker.measured_pid)
    data = broker.data_dir / ("mnesia" if name == "rabbit" else "data")
    out["disk"] = harness.dir_bytes(data)
    print(f"  at depth {args.messages + args.probe:,}: broker RSS {harness.mb(out['rss_full'])} "
          f"(empty: {harness.mb(out['rss_empty'])}), data on disk {harness.mb(out['disk'])}", flush=True)

    t_kill = time.perf_counter()
    harness.kill9(broker)
    if name == "rabbit":
        broker = harness.start_rabbitmq(cleanup, tmp / "rabbit", node=broker.extra["node"],
                                        ports={k: int(broker.extra[k]) for k in ("amqp", "dist", "epmd")})
        t_listen = time.perf_counter()
        t_first = pika_first_delivery(broker)
    else:
        broker = harness.start_sodalite(cleanup, tmp / "sodalite", args.sync, [QUEUE],
                                         f"Sodalite {args.sync}")
        t_listen = time.perf_counter()
        t_first = sdk_first_delivery(broker.connection_string)
    out["listen_s"], out["first_s"] = t_listen - t_kill, t_first - t_kill
    out["rss_restart"] = harness.rss_bytes(broker.measured_pid)
    print(f"  kill -9 + start: listening after {out['listen_s']:.1f} s, first message delivered after "
          f"{out['first_s']:.1f} s; RSS after restart {harness.mb(out['rss_restart'])}", flush=True)
    out["depth_rate"] = phase(f"receive + complete at depth {args.messages:,}", lambda m: receive(m, args.probe),
                              args.probe)
    print(f"  at depth / empty: {out['depth_rate'] / out['empty_rate']:.2f}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog depth (default 1,000,000)")
    parser.add_argument("--probe", type=int, default=5000, help="messages received at each depth (default 5,000)")
    parser.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL", help="Sodalite's --sync (default FULL)")
    parser.add_argument("--core", choices=("v2",), default="v2",  # accepted for older command lines
                        help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="sodalite,rabbit", help="sodalite,rabbit (default both)")
    parser.add_argument("--max-seconds", type=float, default=3600, help="run-time bound (default 3600)")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    if any(t not in ("sodalite", "rabbit") for t in targets):
        parser.error("targets are sodalite and rabbit")
    print(f"# Backlog benchmark: {args.messages:,} messages of 1 KB, probe {args.probe:,}, Sodalite --sync {args.sync};"
          f" {harness.version_line()}", flush=True)
    results: dict[str, dict[str, float]] = {}
    with harness.bounded_run(args.max_seconds) as cleanup:
        for t in targets:
            tmp = harness.temp_dir(cleanup, f"sodalite-backlog-{t}-")
            step = Cleanup()
            try:
                results[t] = run_target(t, step, tmp, args)
            finally:
                step.run()  # one broker at a time: the next one is measured without this one's memory
    names = {"sodalite": f"Sodalite {args.sync}", "rabbit": "RabbitMQ quorum"}
    print(f"\n## Summary at {args.messages:,} messages of 1 KB\n")
    print("| broker | fill msg/s | RSS at depth | data on disk | kill -9 to listening | kill -9 to first delivery "
          "| RSS after restart | recv+complete msg/s empty | at depth | depth / empty |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t, r in results.items():
        print(f"| {names[t]} | {r['fill_rate']:,.0f} | {harness.mb(r['rss_full'])} | {harness.mb(r['disk'])} "
              f"| {r['listen_s']:.1f} s | {r['first_s']:.1f} s | {harness.mb(r['rss_restart'])} "
              f"| {r['empty_rate']:,.0f} | {r['depth_rate']:,.0f} | {r['depth_rate'] / r['empty_rate']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
