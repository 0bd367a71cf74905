"""The random sweep (``scripts/fault-sweep``): checker runs over a range of seeds, figures, and for each
violation its seed and the shortest reproduction found by shrinking (bounded re-runs that drop
operations, fault kinds, clients and phases while a violation of the same promise still shows)."""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from sdk_builds import GO, ensure_built

from checker.history import History
from checker.promises import check_all
from checker.runner import FAULT_KINDS, PARTITIONED, Node, RunResult, RunSpec, run
from pg_server import shared_server


def _promises(result: RunResult) -> set[str]:
    return {v.promise for v in result.violations}


def shrink(result: RunResult, max_runs: int = 8, log: object = print) -> RunResult:
    """The smallest spec (fewer operations, fault kinds, clients, phases) still showing one of the
    violated promises, within ``max_runs`` re-runs."""
    wanted = _promises(result)
    best, runs = result, 0

    def candidates(spec: RunSpec) -> list[RunSpec]:
        found = []
        if spec.ops > 10:
            found.append(replace(spec, ops=spec.ops // 2))
        found += [replace(spec, faults=tuple(f for f in spec.faults if f != kind)) for kind in spec.faults]
        if spec.clients > 1:
            found.append(replace(spec, clients=spec.clients - 1))
        if spec.async_client:
            found.append(replace(spec, async_client=False))
        if spec.phases > 1:
            found.append(replace(spec, phases=1))
        return found

    progress = True
    while progress and runs < max_runs:
        progress = False
        for spec in candidates(best.spec):
            if runs >= max_runs:
                break
            runs += 1
            attempt = run(spec)
            log(f"  shrink {runs}/{max_runs}: {describe(spec)} -> {sorted(_promises(attempt)) or 'clean'}")
            if _promises(attempt) & wanted:
                best, progress = attempt, True
                break
    return best


def describe(spec: RunSpec) -> str:
    faults = ",".join(spec.faults) if spec.faults else "none"
    return (f"--seed {spec.seed} --ops {spec.ops} --clients {spec.clients} --faults {faults} --phases {spec.phases}"
            f"{'' if spec.async_client else ' --no-async'}{'' if spec.admin else ' --no-admin'}"
            f"{f' --defect {spec.defect}' if spec.defect else ''} --go {spec.go} --pg {1 if spec.pg else 0} --jobs 1")


def _interrupt(_signal: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _worker(tasks: Any, results: Any, quiet: bool, database: str | None) -> None:
    """A sweep process: brokers (``Node``s) serving seed after seed from ``tasks``, one for each defect switch
    and store (SQLite, or two nodes on this worker's PostgreSQL ``database`` for the seeds marked ``pg``); a
    broker that would not start again is replaced."""
    signal.signal(signal.SIGTERM, _interrupt)  # stopped: its brokers stopped and its filesystem unmounted
    signal.signal(signal.SIGINT, _interrupt)
    if quiet:
        logging.getLogger("azure").setLevel(logging.CRITICAL)
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    nodes: dict[tuple[str | None, tuple[str, ...], bool], Node] = {}
    try:
        while (spec := tasks.get()) is not None:
            if spec.pg is not None:
                if database is None:
                    results.put(f"seed {spec.seed}: no PostgreSQL database for this worker")
                    continue
                spec = replace(spec, pg=database)
            key = (spec.defect, spec.broker_args, spec.pg is not None)
            try:
                node = nodes.get(key)
                if node is None:
                    node = nodes[key] = Node(spec.defect, spec.broker_args,
                                             disk="disk-full" in spec.faults and os.geteuid() == 0, pg=spec.pg)
                results.put(run(spec, node))
            except Exception as exc:
                results.put(f"seed {spec.seed}: the run itself failed: {exc!r}")
                broken = nodes.pop(key, None)
                if broken is not None:
                    broken.close()
    finally:
        for node in nodes.values():
            node.close()


def run_seeds(specs: list[RunSpec], jobs: int, minutes: float = 0, quiet: bool = True,
              databases: list[str] | None = None) -> Iterator[RunResult | str]:
    """Each seed's result as it finishes, from ``jobs`` processes (each with its own brokers, and its own of
    ``databases`` for the seeds on PostgreSQL). With ``minutes``, no seed starts after that long."""
    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    workers = [context.Process(target=_worker, args=(tasks, results, quiet, (databases or [None] * jobs)[i]),
                               daemon=True) for i in range(jobs)]
    for worker in workers:
        worker.start()
    started = time.monotonic()
    pending = list(reversed(specs))
    running = 0
    try:
        while pending and running < jobs:
            tasks.put(pending.pop())
            running += 1
        while running:
            result = results.get()
            running -= 1
            yield result
            if pending and not (minutes and time.monotonic() - started > minutes * 60):
                tasks.put(pending.pop())
                running += 1
    finally:
        for _ in workers:
            tasks.put(None)
        for worker in workers:
            worker.join(60)
            if worker.is_alive():
                worker.kill()


def recheck(paths: list[Path]) -> int:
    """The promise checks over saved histories (``--save``; gzipped ones too): after a change to the checks."""
    found = 0
    for path in paths:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        history = History.loads(text)
        partitioned = frozenset(op.queue for op in history.ops if op.queue.startswith(PARTITIONED + "-"))
        violations = check_all(history, partitioned=partitioned)
        found += bool(violations)
        print(f"{path.name}: {len(violations)} violation(s)")
        for violation in violations[:20]:
            print(f"  {violation}")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fault-sweep", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--ops", type=int, default=200, help="client operations per seed")
    parser.add_argument("--clients", type=int, default=4, help="sync SDK clients (one asyncio client more)")
    parser.add_argument("--no-async", action="store_true", help="no asyncio client")
    parser.add_argument("--faults", default=",".join(FAULT_KINDS), help="fault kinds, comma-separated, or none")
    parser.add_argument("--faults-per-kind", type=float, default=1.0,
                        help="mean injections of each broker-wide fault kind per seed")
    parser.add_argument("--phases", type=int, default=2, help="quiescent points (recounts) per run")
    parser.add_argument("--defect", default=None, help="a test-only defect switch for the broker (docs/reliability.md)")
    parser.add_argument("--no-admin", action="store_true", help="no resubmit, move or purge through the JSON API")
    parser.add_argument("--shrink-seeds", type=int, default=1, help="how many failing seeds to shrink")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1) * 4),
                        help="processes running seeds side by side, each with its own broker (default: 4 a core)")
    parser.add_argument("--shrink", type=int, default=8, help="re-runs spent shrinking each failing seed (0: none)")
    parser.add_argument("--minutes", type=float, default=0, help="stop starting seeds after this long (0: no limit)")
    parser.add_argument("--save", type=Path, default=None, help="write the history of each failing seed here")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    parser.add_argument("--go", type=float, default=0.25,
                        help="the share of seeds with one more client, the official Go SDK (0: none)")
    parser.add_argument("--pg", type=float, default=0.25,
                        help="the share of seeds on two broker nodes sharing a PostgreSQL database (0: none)")
    parser.add_argument("--verbose", action="store_true", help="let the SDK log its warnings")
    parser.add_argument("--recheck", type=Path, nargs="+", default=None,
                        help="only check saved histories (files written by --save, or .json.gz) and exit")
    args = parser.parse_args(argv)
    if args.recheck:
        return recheck(args.recheck)
    signal.signal(signal.SIGTERM, _interrupt)
    faults = () if args.faults == "none" else tuple(f for f in args.faults.split(",") if f)
    unknown = set(faults) - set(FAULT_KINDS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
    if args.go:
        try:
            ensure_built(GO)
        except Exception as exc:
            print(f"no Go client ({exc}): the seeds run without it", flush=True)
            args.go = 0
    specs = [RunSpec(seed=s, ops=args.ops, go=args.go, clients=args.clients, async_client=not args.no_async,
                     faults=faults,
                     faults_per_kind=args.faults_per_kind, phases=args.phases, defect=args.defect,
                     admin=not args.no_admin, save_failing=args.save) for s in range(args.seed, args.seed + args.seeds)]
    databases = None
    if args.pg:
        try:
            server = shared_server()
            databases = [server.create_database("checker") for _ in range(args.jobs)]
        except Exception as exc:
            print(f"no PostgreSQL ({exc}): every seed runs on SQLite", flush=True)
            args.pg = 0
    for spec in specs:
        if args.pg and random.Random(f"pg{spec.seed}").random() < args.pg:
            spec.pg = "this worker's database"
    started = time.monotonic()
    totals: Counter[str] = Counter()
    fault_totals: Counter[str] = Counter()
    timings: Counter[str] = Counter()
    failing: list[RunResult] = []
    errors: list[str] = []
    for result in run_seeds(specs, args.jobs, args.minutes, quiet=not args.verbose, databases=databases):
        if isinstance(result, str):
            errors.append(result)
            print(result, flush=True)
            continue
        history = result.history
        acked = {uid for op in history.ops if op.kind in ("send", "schedule") and op.result == "ok"
                 for uid in op.uids}
        totals["seeds"] += 1
        totals["seeds on PostgreSQL (two nodes)"] += result.spec.pg is not None
        totals["operations"] += result.client_ops
        totals["ok"] += sum(op.result == "ok" and op.kind not in ("fault", "recount") for op in history.ops)
        totals["info"] += sum(op.result == "info" for op in history.ops)
        totals["messages checked"] += len(acked)
        totals["deliveries checked"] += sum(len(op.deliveries) for op in history.ops if op.result == "ok")
        totals["recounts"] += sum(op.kind == "recount" for op in history.ops)
        totals["violations"] += len(result.violations)
        totals["seconds in runs"] += round(result.seconds)
        fault_totals.update(result.faults)
        timings.update(result.timings)
        print(f"seed {result.spec.seed}: {result.client_ops} ops, {len(acked)} messages, "
              f"faults {dict(result.faults)}, {result.seconds:.0f} s, "
              f"{len(result.violations)} violation(s)", flush=True)
        for violation in result.violations[:20]:
            print(f"  {violation}", flush=True)
        slowest = max((op for op in history.ops if op.kind != "recount"), key=lambda op: op.end - op.start,
                      default=None)
        if slowest is not None and slowest.end - slowest.start > 30:
            print(f"  slowest operation: {slowest.kind} on {slowest.queue} by client {slowest.client}, "
                  f"{slowest.end - slowest.start:.0f} s, {slowest.result} {slowest.error[:120]}", flush=True)
        if result.violations:
            failing.append(result)
    elapsed = time.monotonic() - started
    for number, result in enumerate(failing):
        print(f"VIOLATION seed {result.spec.seed}: {sorted(_promises(result))}", flush=True)
        smallest = shrink(result, args.shrink) if args.shrink and number < args.shrink_seeds else result
        print(f"  shortest reproduction: scripts/fault-sweep {describe(smallest.spec)}", flush=True)
        for violation in smallest.violations[:5]:
            print(f"    {violation}", flush=True)
    totals["seeds with a Go client"] = fault_totals.pop("go-client", 0)
    figures = {**totals, "faults": dict(sorted(fault_totals.items())), "wall seconds": round(elapsed),
               "seeds per hour": round(totals["seeds"] * 3600 / elapsed) if elapsed else 0,
               "operations per second": round(totals["operations"] / elapsed, 2) if elapsed else 0,
               "seconds by part": {k: round(v) for k, v in sorted(timings.items())},
               "jobs": args.jobs, "failing seeds": [r.spec.seed for r in failing], "errors": errors}
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 1 if failing or errors else 0


if __name__ == "__main__":
    sys.exit(main())
