"""Cycle benchmark: N messages of 1 KB sent in batches, received in PeekLock and completed.

Side by side in one run, in interleaved rounds (every target once per round, so drift on a shared
machine hits all of them alike):

- Sodalite with ``--sync FULL`` and with ``--sync NORMAL`` (``scripts/serve``), official SDK
  (``v2full`` and ``v2normal`` are older names of the same two targets);
- the null peer (``benchmarks/null_peer.py``: answers without storing), the same SDK client;
- RabbitMQ, a quorum queue (``x-queue-type: quorum``), driven with pika: publisher confirms per
  batch, 4 consumers with manual acks and a prefetch;
- with ``--targets pg1,pg2``: Sodalite ``--store postgresql://...`` on a PostgreSQL server
  the benchmark starts itself (``tests/pg_server.py``: ``initdb`` and ``postgres`` as the ``postgres``
  user, ``synchronous_commit = on``), one node (``pg1``), and two nodes on one database (``pg2``,
  each with its own database on that server): the clients are split over the two nodes (a sender
  per node sending half; sync receivers round robin over the nodes; one aio receiver per node).
  For these it also prints the broker CPU per message of each node, the PostgreSQL server's CPU per
  message (user + system of every process of that server: postmaster, backends, background
  workers, from ``/proc/<pid>/stat``) and the database round trips per message: the PostgreSQL
  store counts one per pipeline sync or single statement it sends (a batch's ``BEGIN`` ..
  ``COMMIT`` pipeline is one; reads and the ring's maintenance count too), and each node reports
  the count as ``sodalite_store_round_trips_total`` on its ``/metrics``, read before and after
  the phase.

Two SDK client modes, each with 4 client processes (``--receivers``; the fixed configuration: 4
processes, prefetch 300, 1 KiB): ``sync`` (4 sync senders sending a quarter each in batches, then 4
sync PeekLock receivers completing one message at a time) and ``aio`` (the same with the asyncio SDK,
each receiver completing each received batch concurrently). ``--threads`` runs the clients as before
(one sender; sync receivers as threads of this process, one aio receiver). Per phase it prints msg/s,
broker CPU µs per message (user + system of the broker process tree over the phase), the clients' CPU
per message (summed over the client processes; with ``--threads`` and for RabbitMQ, this process's),
broker RSS after the phase and latency percentiles (per batch send, per complete); then a summary with
ranges over the rounds and the ratio columns Sodalite / RabbitMQ and Sodalite / null peer. Not part of the test run:

    .venv/bin/python benchmarks/cycle.py [--messages 10000] [--rounds 3] [--targets full,normal,null,rabbit]
    .venv/bin/python benchmarks/cycle.py --messages 5000 --rounds 3 --targets full,pg1,pg2
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import harness
import workloads
from harness import Broker, Meter

sys.path.insert(0, str(harness.ROOT / "tests"))
from pg_server import PgServer, find_bin_dir  # the tests' throwaway PostgreSQL server

QUEUE = "bench"
TARGETS = {"full": "Sodalite FULL", "normal": "Sodalite NORMAL", "null": "null peer", "rabbit": "RabbitMQ quorum",
           "pg1": "Sodalite PG 1 node", "pg2": "Sodalite PG 2 nodes", "base": "Sodalite FULL before (A/B)"}
ALIASES = {"v2full": "full", "v2normal": "normal"}  # the names of the partition core's targets while v1 existed
_ROUND_TRIPS = re.compile(r'^sodalite_store_round_trips_total\{store="default"\} (\S+)$', re.MULTILINE)


@dataclass
class Phase:
    rate: float
    cpu_us: float
    rss: int
    latency: str
    elapsed: float
    cpu: float
    # PostgreSQL targets: broker CPU seconds of each node, the database server's CPU seconds, round trips
    node_cpu: list[float] = field(default_factory=list)
    db_cpu: float | None = None
    round_trips: int | None = None
    client_cpu: float = 0.0  # CPU seconds of this process (the SDK or pika clients run in it) over the phase


@dataclass
class Nodes:
    """Sodalite nodes on one PostgreSQL database, and that database's server."""

    brokers: list[Broker]
    db_pid: int
    metrics: list[str]  # each node's /metrics URL

    @property
    def connection_strings(self) -> list[str]:
        return [b.connection_string for b in self.brokers]


def _round_trips(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found = _ROUND_TRIPS.search(text)
    if found is None:
        raise RuntimeError(f"{url} reports no sodalite_store_round_trips_total")
    return int(float(found.group(1)))


class GroupMeter:
    """Wall time, each node's CPU, the database server's CPU and the nodes' store round trips over
    one phase run by ``parts`` workloads at once (one per node): the first to start starts it, the
    last to stop stops it."""

    def __init__(self, nodes: Nodes, parts: int = 1) -> None:
        self.nodes, self.parts = nodes, parts
        self._lock = threading.Lock()
        self._started = self._stopped = 0
        self.elapsed = self.cpu = self.db_cpu = 0.0
        self.node_cpu: list[float] = []
        self.round_trips = 0

    def _read(self) -> tuple[float, list[float], float, int]:
        return (time.perf_counter(), [harness.cpu_seconds(b.measured_pid) for b in self.nodes.brokers],
                harness.cpu_seconds(self.nodes.db_pid), sum(_round_trips(u) for u in self.nodes.metrics))

    def start(self) -> None:
        with self._lock:
            self._started += 1
            if self._started == 1:
                self._begin = self._read()

    def stop(self, at: float | None = None) -> None:
        with self._lock:
            self._stopped += 1
            if self._stopped < self.parts:
                return
            t, nodes, db, trips = self._read()
            t0, nodes0, db0, trips0 = self._begin
            self.elapsed = (at if at is not None else t) - t0
            self.node_cpu = [b - a for a, b in zip(nodes0, nodes, strict=True)]
            self.cpu = sum(self.node_cpu)
            self.db_cpu = db - db0
            self.round_trips = trips - trips0


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

    @property
    def client_us(self) -> float:
        """The clients' CPU per message over the cycle (send + receive + complete)."""
        return (self.send.client_cpu + self.receive.client_cpu) * 1e6 / self.count

    count: int = 0


def measure(broker: Broker, count: int,
            run: Callable[[Meter], list[float] | tuple[list[float], float] | None]) -> Phase:
    """One phase: ``run`` returns its latencies, or its latencies and its clients' CPU seconds when the
    clients run in processes of their own (else the clients' CPU is this process's)."""
    meter = Meter(broker.measured_pid)
    client0 = time.process_time()
    ran = run(meter)
    client = time.process_time() - client0
    latencies = ran or []
    if isinstance(ran, tuple):
        latencies, client = ran
    return Phase(count / meter.elapsed, meter.cpu * 1e6 / count, harness.rss_bytes(broker.measured_pid),
                 harness.percentiles(latencies), meter.elapsed, meter.cpu, client_cpu=client)


def sdk_cycle(broker: Broker, mode: str, n: int, size: int, receivers: int, prefetch: int,
              threads: bool = False) -> Cycle:
    cs = broker.connection_string
    if not threads:  # the fixed configuration: each SDK client a process of its own
        send = measure(broker, n, lambda m: workloads.sdk_processes(m, cs, QUEUE, n, "send", mode, receivers, size,
                                                                    prefetch))
        receive = measure(broker, n, lambda m: workloads.sdk_processes(m, cs, QUEUE, n, "receive", mode, receivers,
                                                                       size, prefetch))
    elif mode == "sync":
        send = measure(broker, n, lambda m: workloads.sdk_send(m, cs, QUEUE, n, size))
        receive = measure(broker, n, lambda m: workloads.sdk_receive_threads(m, cs, QUEUE, n, receivers, prefetch))
    else:
        send = measure(broker, n, lambda m: workloads.sdk_aio_send(m, cs, QUEUE, n, size))
        receive = measure(broker, n, lambda m: workloads.sdk_aio_receive(m, cs, QUEUE, n, prefetch))
    return Cycle(broker.name, mode, send, receive, n)


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def pg_measure(nodes: Nodes, count: int, parts: int, run: Callable[[GroupMeter], list[float] | None]) -> Phase:
    meter = GroupMeter(nodes, parts)
    latencies = run(meter) or []
    return Phase(count / meter.elapsed, meter.cpu * 1e6 / count,
                 sum(harness.rss_bytes(b.measured_pid) for b in nodes.brokers), harness.percentiles(latencies),
                 meter.elapsed, meter.cpu, meter.node_cpu, meter.db_cpu, meter.round_trips)


def _per_node(meter: GroupMeter, work: Sequence[Callable[[GroupMeter], list[float]]]) -> list[float]:
    """Run one workload per node at once (threads), all under ``meter``; their latencies together."""
    out: list[list[float]] = [[] for _ in work]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = work[i](meter)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [x for part in out for x in part]


def pg_cycle(name: str, nodes: Nodes, mode: str, n: int, size: int, receivers: int, prefetch: int) -> Cycle:
    css = nodes.connection_strings
    shares = _split(n, len(css))
    if mode == "sync":
        def send_one(cs: str, k: int) -> Callable[[GroupMeter], list[float]]:
            return lambda m: workloads.sdk_send(m, cs, QUEUE, k, size)

        senders = [send_one(c, k) for c, k in zip(css, shares, strict=True)]
        send = pg_measure(nodes, n, len(css), lambda m: _per_node(m, senders))
        receive = pg_measure(nodes, n, 1, lambda m: workloads.sdk_receive_threads(
            m, css, QUEUE, n, receivers, prefetch))
    else:
        def aio_one(cs: str, k: int) -> Callable[[GroupMeter], list[float]]:
            return lambda m: workloads.sdk_aio_send(m, cs, QUEUE, k, size)

        senders = [aio_one(c, k) for c, k in zip(css, shares, strict=True)]
        send = pg_measure(nodes, n, len(css), lambda m: _per_node(m, senders))
        receive = pg_measure(nodes, n, 1, lambda m: workloads.sdk_aio_receive(
            m, css, QUEUE, n, prefetch * receivers))
    return Cycle(name, mode, send, receive, n)


def start_pg_nodes(cleanup: harness.Cleanup, server: PgServer, base: Path, count: int, name: str) -> Nodes:
    """``count`` Sodalite nodes on a new database of ``server``, each with /metrics."""
    url = server.create_database("cycle")
    brokers, metrics = [], []
    for i in range(count):
        port = harness.free_port()
        brokers.append(harness.start_sodalite(
            cleanup, base / f"node{i}", "FULL", [QUEUE], name,
            extra_args=["--store", url, "--node-id", f"node{i}", "--metrics-port", str(port)]))
        metrics.append(f"http://127.0.0.1:{port}/metrics")
    assert server.proc is not None
    return Nodes(brokers, server.proc.pid, metrics)


def print_pg(r: int, c: Cycle) -> None:
    for label, phase in (("send", c.send), ("recv+complete", c.receive)):
        if phase.db_cpu is None or phase.round_trips is None:
            return
        per_node = " / ".join(f"{cpu * 1e6 / c.count:.1f}" for cpu in phase.node_cpu)
        db = phase.db_cpu * 1e6 / c.count
        print(f"        {label}: broker CPU per node {per_node} µs/msg; PostgreSQL CPU {db:.1f} µs/msg; "
              f"round trips {phase.round_trips / c.count:.3f}/msg", flush=True)


def rabbit_cycle(broker: Broker, n: int, size: int, receivers: int, prefetch: int) -> Cycle:
    params = harness.rabbit_params(broker)
    send = measure(broker, n, lambda m: workloads.pika_publish(m, params, QUEUE, n, size, batch=250))
    receive = measure(broker, n, lambda m: workloads.pika_consume_threads(m, params, QUEUE, n, receivers, prefetch))
    receive.latency = "n/a (0-9-1 acks are not confirmed)"
    return Cycle(broker.name, "pika", send, receive, n)


def print_cycle(r: int, c: Cycle) -> None:
    print(f"round {r} | {c.target:16} {c.mode:4} | send {c.send.rate:8,.0f} msg/s {c.send.cpu_us:6.1f} µs CPU/msg"
          f" | recv+complete {c.receive.rate:7,.0f} msg/s {c.receive.cpu_us:6.1f} µs CPU/msg"
          f" | cycle {c.rate:7,.0f} msg/s {c.cpu_us:6.1f} µs CPU/msg | client {c.client_us:6.1f} µs CPU/msg"
          f" | RSS {harness.mb(c.receive.rss)}", flush=True)
    print(f"        send per batch: {c.send.latency}; per complete: {c.receive.latency}", flush=True)


def summary(results: list[tuple[int, Cycle]], n: int) -> None:
    by: dict[tuple[str, str], list[Cycle]] = defaultdict(list)
    for _, c in results:
        by[(c.target, c.mode)].append(c)
    print(f"\n## Summary: {n} messages of 1 KB per cycle, ranges over {max(r for r, _ in results)} rounds\n")
    print("| target | client | send msg/s | send µs/msg | recv+complete msg/s | recv+complete µs/msg "
          "| cycle msg/s | cycle µs/msg | client cycle µs/msg | RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (target, mode), cs in by.items():
        print(f"| {target} | {mode} | {harness.span([c.send.rate for c in cs])} "
              f"| {harness.span([c.send.cpu_us for c in cs], '{:.1f}')} "
              f"| {harness.span([c.receive.rate for c in cs])} "
              f"| {harness.span([c.receive.cpu_us for c in cs], '{:.1f}')}"
              f" | {harness.span([c.rate for c in cs])} | {harness.span([c.cpu_us for c in cs], '{:.1f}')} "
              f"| {harness.span([c.client_us for c in cs], '{:.1f}')} "
              f"| {harness.span([c.receive.rss / 1e6 for c in cs], '{:,.0f} MB')} |")
    rounds: dict[int, dict[tuple[str, str], Cycle]] = defaultdict(dict)
    for r, c in results:
        rounds[r][(c.target, c.mode)] = c
    print("\n## Ratios (per round, then the range; msg/s ratio > 1 = Sodalite faster; CPU ratio > 1 = Sodalite"
          " costlier)\n")
    print("| Sodalite | vs | client | send msg/s | recv+complete msg/s | cycle msg/s | send CPU | "
          "recv+complete CPU | cycle CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in (TARGETS["full"], TARGETS["normal"]):
        for mode in ("sync", "aio"):
            for other, other_mode in ((TARGETS["rabbit"], "pika"), (TARGETS["null"], mode), (TARGETS["base"], mode),
                                      (TARGETS["full"], mode)):
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
    pg_summary(by, rounds)
    medians = {k: statistics.median(c.rate for c in v) for k, v in by.items()}
    print("\nMedian cycle msg/s: " + ", ".join(f"{t} {m}: {v:,.0f}" for (t, m), v in medians.items()))


def pg_summary(by: dict[tuple[str, str], list[Cycle]], rounds: dict[int, dict[tuple[str, str], Cycle]]) -> None:
    """The PostgreSQL targets' costs per message over the whole cycle (send + receive + complete)."""
    pg = {k: v for k, v in by.items() if v[0].send.db_cpu is not None}
    if not pg:
        return
    print("\n## PostgreSQL: costs per message over the cycle (send + receive + complete), ranges over the rounds\n")
    print("| target | client | cycle msg/s | broker CPU µs/msg, each node | broker CPU µs/msg, all nodes "
          "| PostgreSQL CPU µs/msg | round trips/msg (send, recv+complete) | broker CPU vs Sodalite FULL |")
    print("|---|---|---|---|---|---|---|---|")
    for (target, mode), cs in pg.items():
        nodes = len(cs[0].send.node_cpu)
        each = " / ".join(harness.span([(c.send.node_cpu[i] + c.receive.node_cpu[i]) * 1e6 / c.count for c in cs],
                                       "{:.0f}") for i in range(nodes))
        db = harness.span([((c.send.db_cpu or 0) + (c.receive.db_cpu or 0)) * 1e6 / c.count for c in cs], "{:.0f}")
        trips = harness.span([((c.send.round_trips or 0) + (c.receive.round_trips or 0)) / c.count for c in cs],
                             "{:.3f}")
        split = (harness.span([(c.send.round_trips or 0) / c.count for c in cs], "{:.3f}") + ", "
                 + harness.span([(c.receive.round_trips or 0) / c.count for c in cs], "{:.3f}"))
        pairs = [(rs[(target, mode)], rs[(TARGETS["full"], mode)]) for rs in rounds.values()
                 if (target, mode) in rs and (TARGETS["full"], mode) in rs]
        ratio = harness.span([a.cpu_us / b.cpu_us for a, b in pairs], "{:.2f}") if pairs else "n/a"
        print(f"| {target} | {mode} | {harness.span([c.rate for c in cs])} | {each} "
              f"| {harness.span([c.cpu_us for c in cs], '{:.0f}')} | {db} | {trips} ({split}) | {ratio} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="messages per cycle (default 10,000)")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--receivers", type=int, default=4,
                        help="SDK client processes per phase (senders, then receivers), RabbitMQ consumers (default 4)")
    parser.add_argument("--prefetch", type=int, default=300,
                        help="prefetch per receiver (default 300, the fixed configuration)")
    parser.add_argument("--targets", default="full,normal,null,rabbit",
                        help="comma-separated subset of full,normal,null,rabbit,pg1,pg2 (default: "
                             "full,normal,null,rabbit; v2full, v2normal: older names of full, normal; pg1, pg2: "
                             "PostgreSQL, one node and two nodes on one database)")
    parser.add_argument("--threads", action="store_true",
                        help="run the SDK clients as before 2026-11-29: one sender, and the receivers as threads of "
                             "this process (aio: one receiver); by default each of the --receivers clients is a "
                             "process of its own, senders and receivers alike")
    parser.add_argument("--modes", default="sync,aio", help="SDK client modes: sync,aio (default both)")
    parser.add_argument("--max-seconds", type=float, default=1800, help="run-time bound (default 1800)")
    parser.add_argument("--base", type=Path, default=None, metavar="CHECKOUT",
                        help="target 'base': Sodalite FULL served from this other checkout (e.g. a git worktree "
                             "of main before a change), for an A/B in the same run")
    args = parser.parse_args()
    if "base" in args.targets.split(",") and args.base is None:
        parser.error("target 'base' needs --base CHECKOUT")
    targets = list(dict.fromkeys(ALIASES.get(t, t) for t in args.targets.split(",") if t))
    modes = [m for m in args.modes.split(",") if m]
    unknown = [t for t in targets if t not in TARGETS] + [m for m in modes if m not in ("sync", "aio")]
    if unknown:
        parser.error(f"unknown target or mode: {', '.join(unknown)}")
    print(f"# Cycle benchmark: {args.messages} messages of {args.size} B, {args.rounds} interleaved rounds, "
          f"{args.receivers} receivers x prefetch {args.prefetch}; {harness.version_line()}", flush=True)
    with harness.bounded_run(args.max_seconds) as cleanup:
        tmp = harness.temp_dir(cleanup, "sodalite-cycle-")
        brokers: dict[str, Broker] = {}
        groups: dict[str, Nodes] = {}
        server: PgServer | None = None
        for t in targets:
            if t in ("pg1", "pg2"):
                if server is None:
                    bin_dir = find_bin_dir()
                    if bin_dir is None:
                        parser.error("pg1/pg2 need PostgreSQL: apt-get install postgresql")
                    server = PgServer(bin_dir).start()
                    cleanup.push(server.stop)
                groups[t] = start_pg_nodes(cleanup, server, tmp / t, 1 if t == "pg1" else 2, TARGETS[t])
                continue
            if t in ("full", "normal"):
                brokers[t] = harness.start_sodalite(cleanup, tmp / t, t.upper(), [QUEUE], TARGETS[t])
            elif t == "base":
                brokers[t] = harness.start_sodalite(cleanup, tmp / t, "FULL", [QUEUE], TARGETS[t], root=args.base)
            elif t == "null":
                brokers[t] = harness.start_null_peer(cleanup)
            else:
                brokers[t] = harness.start_rabbitmq(cleanup, tmp / "rabbit")
                harness.declare_quorum(brokers[t], QUEUE)
        results: list[tuple[int, Cycle]] = []
        for r in range(1, args.rounds + 1):
            for t in targets:
                if t in groups:
                    for mode in modes:
                        c = pg_cycle(TARGETS[t], groups[t], mode, args.messages, args.size, args.receivers,
                                     args.prefetch)
                        results.append((r, c))
                        print_cycle(r, c)
                        print_pg(r, c)
                    continue
                broker = brokers[t]
                if t == "rabbit":
                    c = rabbit_cycle(broker, args.messages, args.size, args.receivers, args.prefetch)
                    results.append((r, c))
                    print_cycle(r, c)
                    continue
                for mode in modes:
                    c = sdk_cycle(broker, mode, args.messages, args.size, args.receivers, args.prefetch,
                                  args.threads)
                    results.append((r, c))
                    print_cycle(r, c)
        summary(results, args.messages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
