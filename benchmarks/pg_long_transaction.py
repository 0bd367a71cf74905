"""The long-transaction drill (issue 18 item 7): the store cycle on PostgreSQL, with and without a
transaction that holds back VACUUM.

It starts its own PostgreSQL (``tests/pg_server.py``: ``initdb`` and ``postgres`` as the
``postgres`` user in a temporary directory, on a free port of 127.0.0.1), opens the PostgreSQL
store and drives the store port directly, one partition, the cycle: ``Append`` a batch of
``--batch`` messages of ``--size`` bytes, ``Claim`` them, ``Settle`` them COMPLETE, calling
``maintain()`` once a second as the broker's store worker does. Two phases of the same workload:

1. ``--seconds`` without any other transaction;
2. ``--hold-seconds`` while another connection holds ``BEGIN ISOLATION LEVEL REPEATABLE READ``
   after reading a table of its own (``report_data``, the user's table, not Sodalite's): a report
   or a backup. Its snapshot keeps VACUUM from removing any row version deleted after it began.

Every ``--interval`` seconds it prints the throughput, the size of the message ring and of the
counter tables (with indexes: ``sodalite_partitions`` and, from schema 3, ``sodalite_counters_g*``),
the dead row versions PostgreSQL counts in them, the size of ``sodalite_ring`` (its one row is
updated at each switch), the ring's switches and truncations so far, and the database round trips
per message (counted by the adapter: one per pipeline sync or single statement, maintenance
included). A summary compares the phases. With
``--rotate-bytes 0`` the ring never turns (the design without rotation, for comparison).

With ``--dedup-window-ms N`` every message carries a new MessageId and the cycle's send is the one
duplicate detection makes (``ClaimMessageIds`` then the gated ``Append``, one batch), with the ids
past the window (the clock is the drill's wall time) pruned as the core prunes them on a shared
store (``PruneMessageIds``); the lines then also show the history's tables (``sodalite_duplicate_history_g*``,
schema 4: a ring of their own) with their dead row versions, and its switches and truncations;
``--no-history-ring`` keeps that ring from turning (for comparison).

    .venv/bin/python benchmarks/pg_long_transaction.py [--seconds 60] [--hold-seconds 600] [--dedup-window-ms 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pg_server import PgServer, find_bin_dir
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    Append,
    Appended,
    Claim,
    Claimed,
    ClaimMessageIds,
    Gate,
    Outcome,
    PartitionRef,
    PruneMessageIds,
    Settle,
    SettleItem,
    StoreOp,
)
from sodalite.store.postgres import GENERATIONS, PostgresStore, ring

REF = PartitionRef("drill", 0)
NEVER = 2**62  # rotate_bytes that the ring never reaches
# The counters: sodalite_partitions (schema 2: the counter rows; schema 3: the base rows) and, from
# schema 3, the ring's counter tables sodalite_counters_g*.
_COUNTERS = "(relname = 'sodalite_partitions' OR relname LIKE 'sodalite_counters_g%%')"
SIZES = (
    "SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relname LIKE 'sodalite_messages_g%%'),"
    f" (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relkind = 'r' AND {_COUNTERS}),"
    " (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname LIKE 'sodalite_messages_g%%'),"
    f" (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE {_COUNTERS}),"
    " pg_total_relation_size('sodalite_ring'),"
    " (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
    "  WHERE c.relname LIKE 'sodalite_duplicate_history%%' AND c.relkind = 'r'),"
    " (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname LIKE 'sodalite_duplicate_history%%')"
)


@dataclass
class Interval:
    rate: float
    ring_bytes: int
    counter_bytes: int
    dead_ring: int
    dead_counters: int
    ring_row_bytes: int
    trips_per_message: float
    history_bytes: int = 0
    dead_history: int = 0


@dataclass
class Phase:
    name: str
    intervals: list[Interval] = field(default_factory=list)
    messages: int = 0
    seconds: float = 0.0


def record(size: int, message_id: str | None = None) -> MessageRecord:
    return MessageRecord(sequence_number=0, enqueued_time=1_700_000_000_000, message_id=message_id, session_id=None,
                         partition_key=None, time_to_live=None, expires_at=None, scheduled_enqueue_time=None,
                         delivery_count=0, state=MessageState.ACTIVE, durable=True, priority=None,
                         annotations=b"", annotation_count=0, tail=b"x" * size)


def run_phase(store: PostgresStore, monitor: psycopg.Connection[tuple[object, ...]], name: str, seconds: float,
              args: argparse.Namespace) -> Phase:
    phase = Phase(name)
    batch = tuple(record(args.size) for _ in range(args.batch))
    window = args.dedup_window_ms
    seen: deque[int] = deque()  # when ids were taken: the core prunes once some are past the window
    started = time.monotonic()
    now = 1_700_000_000_000 + int(started * 1000)
    mark, mark_messages, mark_trips = started, 0, store.round_trips
    last_maintain = started
    print(f"\n== {name}: {seconds:.0f} s")
    print(f"{'t (s)':>6} {'msg/s':>8} {'ring MiB':>9} {'counter KiB':>12} {'dead (ring)':>12} "
          f"{'dead (ctr)':>11} {'ring row KiB':>13} {'switches':>9} {'truncated':>10} {'put off':>8} "
          f"{'trips/msg':>10}" + (f" {'hist KiB':>9} {'dead (hist)':>12} {'h.switch':>9} {'h.trunc':>8}"
                                   if window else ""))
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        now = max(now + 1, 1_700_000_000_000 + int(time.monotonic() * 1000))
        send: list[StoreOp] = [Append(batch, ref=REF)]
        if window:
            ids = tuple(uuid.uuid4().hex for _ in range(args.batch))
            claim = uuid.uuid4()
            send = [ClaimMessageIds(now, window, claim, ids, ref=REF),
                    Append(tuple(record(args.size, mid) for mid in ids), Gate(claim, ids, ref=REF), ref=REF)]
            gone = False
            while seen and seen[0] < now - window:
                seen.popleft()
                gone = True
            if gone:  # as the core prunes on a shared store: every entry past the window
                send.append(PruneMessageIds(now - window, ref=REF))
            seen.append(now)
        appended = store.apply(send)[1 if window else 0]
        assert isinstance(appended, Appended) and all(appended.sequence_numbers)
        tokens = tuple(uuid.uuid4() for _ in range(args.batch))
        (claimed,) = store.apply([Claim(now=now, locked_until=now + 60_000, owner="drill", tokens=tokens, ref=REF)])
        assert isinstance(claimed, Claimed)
        items = tuple(SettleItem(m.record.sequence_number, m.lock_token, Outcome.COMPLETE)  # type: ignore[arg-type]
                      for m in claimed.messages)
        store.apply([Settle(now=now, items=items, ref=REF)])
        phase.messages += len(claimed.messages)
        current = time.monotonic()
        if current - last_maintain >= 1.0:
            store.maintain()
            last_maintain = current
        if current - mark >= args.interval:
            ring, counters, dead_ring, dead_counters, ring_row, history, dead_history = \
                monitor.execute(SIZES).fetchone()  # type: ignore[misc]
            done = phase.messages - mark_messages
            interval = Interval(rate=done / (current - mark), ring_bytes=int(ring or 0),
                                counter_bytes=int(counters or 0), dead_ring=int(dead_ring or 0),
                                dead_counters=int(dead_counters or 0), ring_row_bytes=int(ring_row or 0),
                                trips_per_message=(store.round_trips - mark_trips) / max(done, 1),
                                history_bytes=int(history or 0), dead_history=int(dead_history or 0))
            phase.intervals.append(interval)
            print(f"{current - started:6.0f} {interval.rate:8.0f} {interval.ring_bytes / 2**20:9.1f} "
                  f"{interval.counter_bytes / 1024:12.0f} {interval.dead_ring:12d} {interval.dead_counters:11d} "
                  f"{interval.ring_row_bytes / 1024:13.0f} "
                  f"{store.ring_switches:9d} {store.truncations:10d} {store.lock_timeouts:8d} "
                  f"{interval.trips_per_message:10.4f}"
                  + (f" {interval.history_bytes / 1024:9.0f} {interval.dead_history:12d} "
                     f"{store.history_switches:9d} {store.history_truncations:8d}" if window else ""), flush=True)
            mark, mark_messages, mark_trips = current, phase.messages, store.round_trips
    phase.seconds = time.monotonic() - started
    return phase


def summary(phases: list[Phase]) -> None:
    print("\n== summary")
    base = phases[0].messages / phases[0].seconds
    for phase in phases:
        rate = phase.messages / phase.seconds
        rates = [i.rate for i in phase.intervals] or [rate]
        sizes = [i.ring_bytes for i in phase.intervals] or [0]
        counters = [i.counter_bytes for i in phase.intervals] or [0]
        trips = [i.trips_per_message for i in phase.intervals] or [0.0]
        history = [i.history_bytes for i in phase.intervals] or [0]
        first = phase.intervals[0].rate if phase.intervals else rate
        last = phase.intervals[-1].rate if phase.intervals else rate
        print(f"{phase.name}: {phase.messages} messages in {phase.seconds:.0f} s = {rate:.0f} msg/s "
              f"({rate / base:.0%} of the first phase); per interval min {min(rates):.0f}, median "
              f"{statistics.median(rates):.0f}, first {first:.0f}, last {last:.0f}; ring size min "
              f"{min(sizes) / 2**20:.1f} MiB, max {max(sizes) / 2**20:.1f} MiB, last {sizes[-1] / 2**20:.1f} MiB; "
              f"counter tables min {min(counters) / 1024:.0f} KiB, max {max(counters) / 1024:.0f} KiB, "
              f"last {counters[-1] / 1024:.0f} KiB; "
              f"history tables min {min(history) / 1024:.0f} KiB, max {max(history) / 1024:.0f} KiB, "
              f"last {history[-1] / 1024:.0f} KiB; "
              f"round trips per message {statistics.median(trips):.4f} (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="the phase without the long transaction")
    parser.add_argument("--hold-seconds", type=float, default=600.0, help="how long the transaction is held")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024, help="message body bytes")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between report lines")
    parser.add_argument("--dedup-window-ms", type=int, default=0,
                        help="send with duplicate detection, this window (0: none, the default)")
    parser.add_argument("--no-history-ring", action="store_true",
                        help="the history's ring never turns (the schema-3 behaviour, for comparison)")
    parser.add_argument("--rotate-bytes", type=int, default=None,
                        help="the store's rotate_bytes (default: the store's default); 0: never rotate")
    args = parser.parse_args()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
    if args.no_history_ring:
        ring.HISTORY_ROTATE_BYTES = NEVER  # type: ignore[misc]  # the drill's comparison only (read by the ring)
    server = PgServer(bin_dir).start()
    try:
        url = server.create_database("drill")
        kwargs = {} if args.rotate_bytes is None else {"rotate_bytes": args.rotate_bytes or NEVER}
        store = PostgresStore(url, application_name="sodalite-drill", **kwargs)
        store.open()
        with psycopg.connect(url, autocommit=True) as monitor, psycopg.connect(url) as reporter:
            version = monitor.execute("SHOW server_version").fetchone()
            print(f"PostgreSQL {version[0] if version else '?'}, synchronous_commit on, ring of {GENERATIONS} tables, "
                  f"rotate_bytes {'never' if args.rotate_bytes == 0 else args.rotate_bytes or 'default'}, "
                  f"batch {args.batch}, {args.size} B per message"
                  + (f", duplicate detection (window {args.dedup_window_ms} ms)" if args.dedup_window_ms else ""))
            monitor.execute("CREATE TABLE report_data (id int PRIMARY KEY, amount numeric)")
            monitor.execute("INSERT INTO report_data SELECT g, g * 1.5 FROM generate_series(1, 10000) g")
            phases = [run_phase(store, monitor, "without a long transaction", args.seconds, args)]
            # The report: a snapshot taken by reading the user's own table, then held open.
            reporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            total = reporter.execute("SELECT sum(amount) FROM report_data").fetchone()
            held = monitor.execute("SELECT backend_xmin FROM pg_stat_activity WHERE backend_xmin IS NOT NULL "
                                   "AND pid = %s", (reporter.info.backend_pid,)).fetchone()
            print(f"\nreport transaction open (sum {total[0] if total else '?'}), "
                  f"holding xmin {held[0] if held else '?'}")
            phases.append(run_phase(store, monitor, "with a REPEATABLE READ transaction held open", args.hold_seconds,
                                    args))
            reporter.rollback()
        summary(phases)
        store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
