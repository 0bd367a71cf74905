"""``sodalite syphon``: drain a paired namespace's backlog queues into the primary, until Ctrl-C.

Theory of operation: the same ``Syphon`` pumps the paired client runs (``sodalite.client.paired``),
one thread per backlog queue, each long-polling its queue and moving every message to its
``x-ms-path`` entity in the primary, completing it only after that send succeeded. The main thread
prints progress every ``--progress-interval`` seconds; Ctrl-C (or SIGTERM) stops the pumps, closes
both clients and prints the totals. A message in flight when it stops stays locked in its backlog
queue until its lock expires, then is moved by the next run: nothing is lost, at worst one is sent
twice.

Needs the official SDK (the ``client`` extra); works against any Service Bus namespace.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from sodalite.cli.progress import Progress
from sodalite.extras import MissingExtra


def register(commands: Any) -> None:
    syphon = commands.add_parser(
        "syphon", help="move messages from a paired namespace's backlog queues to the primary, until Ctrl-C")
    syphon.add_argument("--primary", required=True, help="the primary namespace's connection string")
    syphon.add_argument("--secondary", required=True,
                        help="the secondary namespace's connection string (where the backlog queues are)")
    syphon.add_argument("--primary-namespace", default=None,
                        help="the name in the backlog queues' paths (default: the first label of the primary's "
                             "host name)")
    syphon.add_argument("--backlog-queue-count", type=int, default=10, help="backlog queues 0..N-1 (default 10)")
    syphon.add_argument("--receive-wait", type=float, default=900.0,
                        help="seconds each long-poll receive waits (default 900, the seed's 15 minutes)")
    syphon.add_argument("--retry-pause", type=float, default=60.0,
                        help="seconds to wait after the primary or secondary failed before trying again (default 60)")
    syphon.add_argument("--progress-interval", type=float, default=5.0,
                        help="seconds between progress lines (default 5)")
    syphon.add_argument("--ca-file", default=None,
                        help="certificate to trust for TLS and the management API (connection_verify)")
    syphon.set_defaults(handler=run_syphon)


def run_syphon(args: argparse.Namespace) -> None:
    try:
        from azure.servicebus import ServiceBusClient

        from sodalite.client import backlog
        from sodalite.client.paired import Syphon, close_sdk_client, ensure_backlog_queues
    except ImportError as exc:  # the SDK is an optional dependency of the broker
        raise ValueError(str(MissingExtra("client", "sodalite syphon", exc))) from None
    namespace = args.primary_namespace or backlog.namespace_of(args.primary)
    names = backlog.backlog_queue_names(namespace, args.backlog_queue_count)
    kwargs: dict[str, Any] = {}
    if args.ca_file:
        kwargs["connection_verify"] = args.ca_file
    ensure_backlog_queues(args.secondary, names, **kwargs)
    stop = threading.Event()
    primary = ServiceBusClient.from_connection_string(args.primary, **kwargs)
    secondary = ServiceBusClient.from_connection_string(args.secondary, **kwargs)
    faults: list[str] = []

    def fault(role: str, exc: BaseException) -> None:
        faults.append(f"the {role} namespace refused the syphon: {exc}")
        stop.set()

    syphons = [Syphon(primary, secondary, name, timedelta(seconds=args.receive_wait),
                      timedelta(seconds=args.retry_pause), stop, on_fault=fault) for name in names]
    threads = [threading.Thread(target=s.run, name=f"syphon {s.backlog_queue}", daemon=True) for s in syphons]
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"syphon: draining {len(names)} backlog queues {names[0]} .. {names[-1]} into the primary; "
          "Ctrl-C stops", flush=True)
    for thread in threads:
        thread.start()
    started = time.monotonic()
    shown = (-1, -1)
    status = Progress("syphon: moved")  # on a terminal: one status line, count and rate
    try:
        while not stop.wait(1.0 if status.terminal else args.progress_interval):
            totals = _totals(syphons)
            if status.terminal:
                status.update(totals[0], detail=f"dead-lettered {totals[1]}")
            elif totals != shown:
                print(f"syphon: moved {totals[0]}, dead-lettered {totals[1]} "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
                shown = totals
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        signal.signal(signal.SIGTERM, previous)
        # Each syphon leaves its receive within --receive-wait once told to stop and closes its own
        # receiver (which releases what it had prefetched): wait for that before closing the clients,
        # so no receive is in flight on a connection being closed under it.
        for thread in threads:
            thread.join(timeout=args.receive_wait + args.retry_pause + 10)
        for client in (primary, secondary):
            try:
                close_sdk_client(client)
            except Exception as exc:  # closing while a receive is in flight may complain; we are leaving
                print(f"syphon: closing a client: {exc}", file=sys.stderr)
        for thread in threads:
            thread.join(timeout=5)
    moved, dead = _totals(syphons)
    status.finish(f"syphon: stopped; moved {moved}, dead-lettered {dead} in {status.elapsed()}")
    if faults:
        raise ValueError("; ".join(faults))


def _totals(syphons: list[Any]) -> tuple[int, int]:
    return (sum(s.counters.moved for s in syphons), sum(s.counters.dead_lettered for s in syphons))
