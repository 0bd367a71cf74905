"""Cycle benchmark: N messages of 1 KB sent in batches, received in PeekLock and completed.

Side by side in one run, in interleaved rounds (every target once per round, so drift on a shared
machine hits all of them alike):

- Sodalite with ``--sync FULL`` and with ``--sync NORMAL`` (``scripts/serve``), official SDK; with
  ``--targets v2full,v2normal`` also Sodalite ``--core v2`` (the partition core, store port v2);
- the null peer (``benchmarks/null_peer.py``: answers without storing), the same SDK client;
- RabbitMQ, a quorum queue (``x-queue-type: quorum``), driven with pika: publisher confirms per
  batch, 4 consumers with manual acks and a prefetch.

Two SDK client modes: ``sync`` (a sync sender, then 4 concurrent receiver threads, each with its own
client, completing one message at a time) and ``aio`` (an aio sender, then one aio receiver completing
each received batch concurrently). Per phase it prints msg/s, broker CPU µs per message (user + system
of the broker process tree over the phase), broker RSS after the phase and latency percentiles (per
batch send, per complete); then a summary with ranges over the rounds and the ratio columns
Sodalite / RabbitMQ and Sodalite / null peer. Not part of the test run:

    .venv/bin/python benchmarks/cycle.py [--messages 10000] [--rounds 3] [--targets full,normal,null,rabbit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import harness
import workloads
from harness import Broker, Meter

QUEUE = "bench"
TARGETS = {"full": "Sodalite FULL", "normal": "Sodalite NORMAL", "v2full": "Sodalite v2 FULL",
           "v2normal": "Sodalite v2 NORMAL", "null": "null peer", "rabbit": "RabbitMQ quorum"}


@dataclass
class Phase:
    rate: float
    cpu_us: float
    rss: int
    latency: str
    elapsed: float
    cpu: float


@dataclass
class Cycle:
    target: str
    mode: str
    send: Phase
    receive: Phase

    @property
    def rate(self) -> float:
        return self.count / (self.send.elapsed + self.receive.elapsed)

    @property
    def cpu_us(self) -> float:
        return (self.send.cpu + self.receive.cpu) * 1e6 / self.count

    count: int = 0


def measure(broker: Broker, count: int, run: Callable[[Meter], list[float] | None]) -> Phase:
    meter = Meter(broker.measured_pid)
    latencies = run(meter) or []
    return Phase(count / meter.elapsed, meter.cpu * 1e6 / count, harness.rss_bytes(broker.measured_pid),
                 harness.percentiles(latencies), meter.elapsed, meter.cpu)


def sdk_cycle(broker: Broker, mode: str, n: int, size: int, receivers: int, prefetch: int) -> Cycle:
    cs = broker.connection_string
    if mode == "sync":
        send = measure(broker, n, lambda m: workloads.sdk_send(m, cs, QUEUE, n, size))
        receive = measure(broker, n, lambda m: workloads.sdk_receive_threads(m, cs, QUEUE, n, receivers, prefetch))
    else:
        send = measure(broker, n, lambda m: workloads.sdk_aio_send(m, cs, QUEUE, n, size))
        receive = measure(broker, n, lambda m: workloads.sdk_aio_receive(m, cs, QUEUE, n, prefetch * receivers))
    return Cycle(broker.name, mode, send, receive, n)


def rabbit_cycle(broker: Broker, n: int, size: int, receivers: int, prefetch: int) -> Cycle:
    params = harness.rabbit_params(broker)
    send = measure(broker, n, lambda m: workloads.pika_publish(m, params, QUEUE, n, size, batch=250))
    receive = measure(broker, n, lambda m: workloads.pika_consume_threads(m, params, QUEUE, n, receivers, prefetch))
    receive.latency = "n/a (0-9-1 acks are not confirmed)"
    return Cycle(broker.name, "pika", send, receive, n)


def print_cycle(r: int, c: Cycle) -> None:
    print(f"round {r} | {c.target:16} {c.mode:4} | send {c.send.rate:8,.0f} msg/s {c.send.cpu_us:6.1f} µs CPU/msg"
          f" | recv+complete {c.receive.rate:7,.0f} msg/s {c.receive.cpu_us:6.1f} µs CPU/msg"
          f" | cycle {c.rate:7,.0f} msg/s {c.cpu_us:6.1f} µs CPU/msg | RSS {harness.mb(c.receive.rss)}", flush=True)
    print(f"        send per batch: {c.send.latency}; per complete: {c.receive.latency}", flush=True)


def summary(results: list[tuple[int, Cycle]], n: int) -> None:
    by: dict[tuple[str, str], list[Cycle]] = defaultdict(list)
    for _, c in results:
        by[(c.target, c.mode)].append(c)
    print(f"\n## Summary: {n} messages of 1 KB per cycle, ranges over {max(r for r, _ in results)} rounds\n")
    print("| target | client | send msg/s | send µs/msg | recv+complete msg/s | recv+complete µs/msg "
          "| cycle msg/s | cycle µs/msg | RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (target, mode), cs in by.items():
        print(f"| {target} | {mode} | {harness.span([c.send.rate for c in cs])} "
              f"| {harness.span([c.send.cpu_us for c in cs], '{:.1f}')} "
              f"| {harness.span([c.receive.rate for c in cs])} "
              f"| {harness.span([c.receive.cpu_us for c in cs], '{:.1f}')}"
              f" | {harness.span([c.rate for c in cs])} | {harness.span([c.cpu_us for c in cs], '{:.1f}')} "
              f"| {harness.span([c.receive.rss / 1e6 for c in cs], '{:,.0f} MB')} |")
    rounds: dict[int, dict[tuple[str, str], Cycle]] = defaultdict(dict)
    for r, c in results:
        rounds[r][(c.target, c.mode)] = c
    print("\n## Ratios (per round, then the range; msg/s ratio > 1 = Sodalite faster; CPU ratio > 1 = Sodalite"
          " costlier)\n")
    print("| Sodalite | vs | client | send msg/s | recv+complete msg/s | cycle msg/s | send CPU | "
          "recv+complete CPU | cycle CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in (TARGETS["full"], TARGETS["normal"], TARGETS["v2full"], TARGETS["v2normal"]):
        for mode in ("sync", "aio"):
            for other, other_mode in ((TARGETS["rabbit"], "pika"), (TARGETS["null"], mode), (TARGETS["full"], mode)):
                if other == name:
                    continue
                pairs = [(rs[(name, mode)], rs[(other, other_mode)]) for rs in rounds.values()
                         if (name, mode) in rs and (other, other_mode) in rs]
                if not pairs:
                    continue

                def ratio(get: Callable[[Cycle], float], ps: list[tuple[Cycle, Cycle]] = pairs) -> str:
                    return harness.span([get(a) / get(b) for a, b in ps], "{:.2f}")

                print(f"| {name} | {other} | {mode} | {ratio(lambda c: c.send.rate)} "
                      f"| {ratio(lambda c: c.receive.rate)} | {ratio(lambda c: c.rate)} "
                      f"| {ratio(lambda c: c.send.cpu_us)} | {ratio(lambda c: c.receive.cpu_us)} "
                      f"| {ratio(lambda c: c.cpu_us)} |")
    medians = {k: statistics.median(c.rate for c in v) for k, v in by.items()}
    print("\nMedian cycle msg/s: " + ", ".join(f"{t} {m}: {v:,.0f}" for (t, m), v in medians.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="messages per cycle (default 10,000)")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--receivers", type=int, default=4, help="concurrent sync receivers / consumers (default 4)")
    parser.add_argument("--prefetch", type=int, default=100, help="prefetch per receiver (default 100)")
    parser.add_argument("--targets", default="full,normal,null,rabbit",
                        help="comma-separated subset of full,normal,v2full,v2normal,null,rabbit (default: "
                             "full,normal,null,rabbit; v2*: `serve --core v2`, the partition core)")
    parser.add_argument("--modes", default="sync,aio", help="SDK client modes: sync,aio (default both)")
    parser.add_argument("--max-seconds", type=float, default=1800, help="run-time bound (default 1800)")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    modes = [m for m in args.modes.split(",") if m]
    unknown = [t for t in targets if t not in TARGETS] + [m for m in modes if m not in ("sync", "aio")]
    if unknown:
        parser.error(f"unknown target or mode: {', '.join(unknown)}")
    print(f"# Cycle benchmark: {args.messages} messages of {args.size} B, {args.rounds} interleaved rounds, "
          f"{args.receivers} receivers x prefetch {args.prefetch}; {harness.version_line()}", flush=True)
    with harness.bounded_run(args.max_seconds) as cleanup:
        tmp = harness.temp_dir(cleanup, "sodalite-cycle-")
        brokers: dict[str, Broker] = {}
        for t in targets:
            if t in ("full", "normal"):
                brokers[t] = harness.start_sodalite(cleanup, tmp / t, t.upper(), [QUEUE], TARGETS[t])
            elif t in ("v2full", "v2normal"):
                brokers[t] = harness.start_sodalite(cleanup, tmp / t, t[2:].upper(), [QUEUE], TARGETS[t],
                                                    extra_args=["--core", "v2"])
            elif t == "null":
                brokers[t] = harness.start_null_peer(cleanup)
            else:
                brokers[t] = harness.start_rabbitmq(cleanup, tmp / "rabbit")
                harness.declare_quorum(brokers[t], QUEUE)
        results: list[tuple[int, Cycle]] = []
        for r in range(1, args.rounds + 1):
            for t in targets:
                broker = brokers[t]
                if t == "rabbit":
                    c = rabbit_cycle(broker, args.messages, args.size, args.receivers, args.prefetch)
                    results.append((r, c))
                    print_cycle(r, c)
                    continue
                for mode in modes:
                    c = sdk_cycle(broker, mode, args.messages, args.size, args.receivers, args.prefetch)
                    results.append((r, c))
                    print_cycle(r, c)
        summary(results, args.messages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
