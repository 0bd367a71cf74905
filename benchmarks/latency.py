"""Latency benchmark: send-to-receive latency at a fixed rate, on an empty queue and beside a backlog.

A paced sender process sends ``--rate`` messages per second of 1 KB for ``--seconds`` (by default
each phase runs twice, at 1,000 and at 5,000 msg/s: ``--rates``);
message i is stamped (application property ``t``) with the time it was *due*, so a sender that falls
behind shows up in the latency instead of hiding it. Receiver processes (``--receivers``, default 4,
each with its own connection) take the messages in PeekLock one at a time (prefetch 50; a larger
receive call would wait up to 0.2 s for more), note ``now - t`` on arrival, and complete
(ack) them. Printed: p50, p99, p99.9 and max, and the rate achieved.

Two phases per broker, in one run: the queue alone (an empty broker), then the same with a backlog of
``--backlog`` messages (default 1,000,000) held in another queue of the same broker, in the same store,
so the backlog's memory, collector and timer costs are present. Brokers: Sodalite (``--sync FULL``,
official sync SDK, batches of whatever is due) and a RabbitMQ quorum queue (pika; persistent messages,
published without waiting for confirms). Not part of the test run:

    .venv/bin/python benchmarks/latency.py [--rates 1000,5000 | --rate 1000] [--seconds 30] [--backlog 1000000]
        [--targets sodalite,rabbit] [--backlog-dir DIR]

``--backlog-dir DIR`` keeps Sodalite's backlog store in ``DIR`` after the run and reopens it in later
runs instead of filling it again (10M messages take about an hour to send here); the empty phase
still runs on a fresh broker.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import sys
import time
from pathlib import Path
from typing import Any

import harness
import workloads
from harness import Broker, Cleanup, stop_process

QUEUE = "latency"
MAX_PER_SEND = 100  # a sender that fell behind catches up in batches of at most this many
BACKLOG = "backlog"


# ---- processes (spawned) -------------------------------------------------------------------------


def stamp(start_at: float, k: int, rate: float) -> int:
    """When message ``k`` is due, in microseconds since the epoch (pika encodes no floats; the SDK no
    64-bit ints in application properties, so it sends seconds as a double)."""
    return int((start_at + k / rate) * 1e6)


def sdk_sender(connection_string: str, count: int, rate: float, started: Any, sent: Any) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    body = b"x" * 1024
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(QUEUE) as sender:
        start_at = started.value = time.time()  # the link is open: the schedule starts now
        i = 0
        while i < count:
            now = time.time()
            due = min(count, int((now - start_at) * rate) + 1, i + MAX_PER_SEND)
            if due <= i:
                time.sleep(max(0.0, start_at + i / rate - now))
                continue
            sender.send_messages([ServiceBusMessage(body, application_properties={"t": start_at + k / rate})
                                  for k in range(i, due)])
            i = due
        sent.value = time.time() - start_at


def sdk_receiver(connection_string: str, total: int, received: Any, out: Any, deadline: float) -> None:
    from azure.servicebus import ServiceBusClient

    samples: list[float] = []
    last = [0.0]
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_receiver(QUEUE, prefetch_count=50) as receiver:
        while received.value < total and time.time() < deadline:
            for m in receiver.receive_messages(max_message_count=1, max_wait_time=0.5):
                now = time.time()
                props = m.application_properties or {}
                stamp = props.get(b"t", props.get("t"))
                if isinstance(stamp, float):
                    samples.append(now - stamp)
                    last[0] = now
                receiver.complete_message(m)
                with received.get_lock():
                    received.value += 1
    out.put((samples, last[0]))


def pika_sender(port: int, count: int, rate: float, started: Any, sent: Any) -> None:
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    ch = conn.channel()
    body = b"x" * 1024
    start_at = started.value = time.time()
    i = 0
    while i < count:
        now = time.time()
        due = min(count, int((now - start_at) * rate) + 1)
        if due <= i:
            conn.sleep(max(0.0, start_at + i / rate - now))
            continue
        for k in range(i, due):
            ch.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2,
                                                                   headers={"t": stamp(start_at, k, rate)}))
        i = due
    sent.value = time.time() - start_at
    conn.close()


def pika_receiver(port: int, total: int, received: Any, out: Any, deadline: float) -> None:
    import pika

    samples: list[float] = []
    last = [0.0]
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)

    def handle(channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        now = time.time()
        stamp = (properties.headers or {}).get("t")
        if isinstance(stamp, int):
            samples.append(now - stamp / 1e6)
            last[0] = now
        channel.basic_ack(method.delivery_tag)
        with received.get_lock():
            received.value += 1

    ch.basic_consume(QUEUE, handle, auto_ack=False)
    while received.value < total and time.time() < deadline:
        conn.process_data_events(time_limit=0.2)
    conn.close()
    out.put((samples, last[0]))


# ---- one phase ----------------------------------------------------------------------------------


def run_phase(label: str, broker: Broker, kind: str, args: argparse.Namespace, rate: float) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    count = int(rate * args.seconds)
    received = ctx.Value("q", 0)
    out = ctx.Queue()
    deadline = time.time() + args.seconds + 120
    if kind == "rabbit":
        target: Any = broker.amqp_port
        recv_fn: Any = pika_receiver
        send_fn: Any = pika_sender
    else:
        target, recv_fn, send_fn = broker.connection_string, sdk_receiver, sdk_sender
    receivers = [ctx.Process(target=recv_fn, args=(target, count, received, out, deadline), daemon=True)
                 for _ in range(args.receivers)]
    for p in receivers:
        p.start()
    time.sleep(8)  # the receivers open their links (the SDK takes seconds per handler on a loaded machine)
    started = ctx.Value("d", 0.0)  # when the sender's schedule began
    sent = ctx.Value("d", 0.0)  # how long the sender took to send everything (== --seconds if it kept pace)
    sender = ctx.Process(target=send_fn, args=(target, count, rate, started, sent), daemon=True)
    sender.start()
    cpu0 = harness.cpu_seconds(broker.measured_pid)
    samples: list[float] = []
    try:
        pending = len(receivers)
        last_arrival = 0.0
        while pending:
            try:
                got, at = out.get(timeout=1)
                samples += got
                last_arrival = max(last_arrival, at)
                pending -= 1
            except queue.Empty:
                if sender.exitcode or time.time() > deadline + 30:
                    raise RuntimeError(f"{label}: the sender failed or the phase overran") from None
        sender.join(30)
    finally:
        for p in [sender, *receivers]:
            if p.is_alive():
                p.kill()
            p.join(5)
    elapsed = max(1e-3, last_arrival - started.value)  # from the first due time to the last arrival
    cpu = harness.cpu_seconds(broker.measured_pid) - cpu0
    ordered = sorted(samples)
    if not ordered:
        raise RuntimeError(f"{label}: no message received")
    r = {"p50": harness.pick(ordered, 0.5), "p99": harness.pick(ordered, 0.99),
         "p999": harness.pick(ordered, 0.999), "max": ordered[-1], "n": len(ordered),
         "rate": len(ordered) / elapsed, "cpu_us": cpu * 1e6 / max(1, len(ordered)),
         "rss": harness.rss_bytes(broker.measured_pid), "send_s": sent.value, "at": rate}
    print(f"  {label} at {rate:,.0f} msg/s: {len(ordered):,} of {count:,} messages, {r['rate']:,.0f} msg/s received "
          f"(the sender needed {sent.value:.1f} s for its {args.seconds:.0f} s schedule); latency p50 "
          f"{r['p50'] * 1000:.1f} ms, p99 {r['p99'] * 1000:.1f} ms, p99.9 {r['p999'] * 1000:.1f} ms, max "
          f"{r['max'] * 1000:.1f} ms; broker CPU {r['cpu_us']:.0f} µs/msg, RSS {harness.mb(r['rss'])}", flush=True)
    return r


def run_target(kind: str, cleanup: Cleanup, tmp: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    print(f"\n## {kind}", flush=True)
    if kind == "rabbit":
        broker = harness.start_rabbitmq(cleanup, tmp / "rabbit")
        harness.declare_quorum(broker, QUEUE, BACKLOG)
    else:
        broker = harness.start_sodalite(cleanup, tmp / "sodalite", args.sync, [QUEUE, BACKLOG],
                                         f"Sodalite {args.sync}",
                                         root=args.base if kind == "base" else harness.ROOT)
    results = {f"empty {rate:g}": run_phase("empty broker", broker, kind, args, rate) for rate in args.rates}
    if args.backlog and kind == "sodalite" and args.backlog_dir:
        results.update(beside_kept_backlog(broker, cleanup, args))
    elif args.backlog:
        t0 = time.perf_counter()
        if kind == "rabbit":
            workloads.pika_fill(harness.rabbit_params(broker), BACKLOG, args.backlog)
        else:
            workloads.sdk_fill(broker.connection_string, BACKLOG, args.backlog)
        print(f"  backlog of {args.backlog:,} in '{BACKLOG}' filled in {time.perf_counter() - t0:.0f} s; "
              f"RSS {harness.mb(harness.rss_bytes(broker.measured_pid))}", flush=True)
        for rate in args.rates:
            results[f"backlog {rate:g}"] = run_phase(f"beside a backlog of {args.backlog:,}", broker, kind, args, rate)
    return results


def stored_depth(data_dir: Path) -> int:
    """Messages counted in the store of a Sodalite data directory (0 when it holds none)."""
    import sqlite3

    db = data_dir / "data" / "messages.db"
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT coalesce(sum(active), 0) FROM partitions WHERE entity = ?", (BACKLOG,)).fetchone()
    return int(row[0])


def beside_kept_backlog(empty: Broker, cleanup: Cleanup, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The backlog phase on a data directory that outlives the run (``--backlog-dir``): filled once,
    then reopened by later runs, so a 10M backlog (about an hour to fill here) is measured again
    without filling it again. The empty broker is stopped first; the backlog's broker starts on the
    kept directory."""
    stop_process(empty.proc)
    kept = Path(args.backlog_dir)
    depth = stored_depth(kept)
    t0 = time.perf_counter()
    broker = harness.start_sodalite(cleanup, kept, args.sync, [QUEUE, BACKLOG], f"Sodalite {args.sync}")
    print(f"  kept backlog directory {kept}: {depth:,} messages in '{BACKLOG}' before start; broker up in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    if depth < args.backlog:
        t0 = time.perf_counter()
        workloads.sdk_fill(broker.connection_string, BACKLOG, args.backlog - depth)
        print(f"  backlog topped up by {args.backlog - depth:,} to {args.backlog:,} in "
              f"{time.perf_counter() - t0:.0f} s; RSS {harness.mb(harness.rss_bytes(broker.measured_pid))}", flush=True)
    return {f"backlog {rate:g}": run_phase(f"beside a backlog of {max(depth, args.backlog):,}", broker, "sodalite",
                                           args, rate) for rate in args.rates}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,5000",
                        help="comma-separated rates in messages per second, each phase once per rate "
                             "(default 1000,5000)")
    parser.add_argument("--rate", type=float, default=None, help="one rate only (overrides --rates)")
    parser.add_argument("--seconds", type=float, default=30, help="seconds per phase (default 30)")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="backlog in another queue (default 1M; 0: none)")
    parser.add_argument("--receivers", type=int, default=4, help="receiver processes (default 4)")
    parser.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL", help="Sodalite's --sync (default FULL)")
    parser.add_argument("--core", choices=("v2",), default="v2",  # accepted for older command lines
                        help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="sodalite,rabbit",
                        help="sodalite,rabbit (default both); base: Sodalite served from --base")
    parser.add_argument("--base", type=Path, default=None, metavar="CHECKOUT",
                        help="target 'base': Sodalite served from this other checkout (an A/B against main)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the targets this many times, interleaved (default 1)")
    parser.add_argument("--backlog-dir", default="",
                        help="Sodalite only: a data directory kept after the run for the backlog phase; one that "
                             "already holds the backlog is reopened instead of filled again")
    parser.add_argument("--max-seconds", type=float, default=3600, help="run-time bound (default 3600)")
    args = parser.parse_args()
    try:
        args.rates = [args.rate] if args.rate else [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        parser.error(f"--rates: not a list of numbers: {args.rates}")
    if not args.rates or min(args.rates) <= 0:
        parser.error("rates must be positive")
    targets = [t for t in args.targets.split(",") if t]
    if any(t not in ("sodalite", "rabbit", "base") for t in targets):
        parser.error("targets are sodalite, base and rabbit")
    if "base" in targets and args.base is None:
        parser.error("target 'base' needs --base CHECKOUT")
    shown = ", ".join(f"{r:,.0f}" for r in args.rates)
    print(f"# Latency benchmark: {shown} msg/s of 1 KB for {args.seconds:.0f} s per phase, "
          f"{args.receivers} receivers, backlog {args.backlog:,}; {harness.version_line()}", flush=True)
    results: list[tuple[str, dict[str, dict[str, float]]]] = []
    with harness.bounded_run(args.max_seconds) as cleanup:
        for _ in range(args.rounds):
            for t in targets:
                tmp = harness.temp_dir(cleanup, f"sodalite-latency-{t}-")
                step = Cleanup()
                try:
                    results.append((t, run_target(t, step, tmp, args)))
                finally:
                    step.run()
    names = {"sodalite": f"Sodalite {args.sync}", "rabbit": "RabbitMQ quorum",
             "base": f"Sodalite {args.sync} before (A/B)"}
    print(f"\n## Summary: send-to-receive latency at {shown} msg/s\n")
    print("| broker | queue | rate | sender s | received msg/s | p50 | p99 | p99.9 | max | broker CPU µs/msg | RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t, phases in results:
        for phase, r in phases.items():
            where = "empty broker" if phase.startswith("empty") else f"beside {args.backlog:,} backlog"
            print(f"| {names[t]} | {where} | {r['at']:,.0f} | {r['send_s']:.1f} | {r['rate']:,.0f} "
                  f"| {r['p50'] * 1000:.1f} ms "
                  f"| {r['p99'] * 1000:.1f} ms | {r['p999'] * 1000:.1f} ms | {r['max'] * 1000:.1f} ms "
                  f"| {r['cpu_us']:.0f} | {harness.mb(r['rss'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
