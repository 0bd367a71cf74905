"""The client library through an outage, per mode: active and passive replication, paired namespaces.

For each mode: two brokers started with ``scripts/serve`` (``--sync FULL``, the default), one sender
thread sending single 1-message sends through the library as fast as it lets it, the primary killed
with SIGKILL after ``--before`` seconds and restarted after ``--during`` more, ``--after`` seconds of
load after the restart; then the client is closed and every copy counted and drained. The
application's SDK retry options are the SDK's defaults. Printed per mode:

- sends per second before the kill, during the outage (from the first send accepted after the kill,
  i.e. after the failover) and after the restart (from the fail back where there is one);
- the longest single send; the time from the kill to the first accepted send (failover) and from the
  restart to the library's return to the primary (fail back: the probe or the ping);
- messages lost (acknowledged but never received: must be 0); copies stored in both namespaces, the
  duplicates stored, and the duplicates the library's receiver let through (must be 0);
- how long closing the client took.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/outage.py [--modes active,passive,paired] [--json FILE]``.
The drill itself is ``tests/interop/outage_drill.py`` (the tests run it with smaller phases).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "interop"), str(ROOT / "tests")]

from outage_drill import Phases, Report, run, start_pair  # noqa: E402


def _figures(report: Report, phases: Phases) -> dict[str, object]:
    return {
        "mode": report.mode, "acknowledged": report.sent, "send_calls_raised": report.failed_calls,
        "sends_per_s": {"before": round(report.before_rate, 1), "during": round(report.during_rate, 1),
                        "after": round(report.after_rate, 1)},
        "longest_send_s": round(report.longest_send, 2),
        "failover_s": None if report.time_to_failover is None else round(report.time_to_failover, 2),
        "failback_s": None if report.time_to_failback is None else round(report.time_to_failback, 2),
        "lost": report.lost, "stored": report.stored, "duplicates_stored": report.duplicates_stored,
        "duplicates_let_through": report.let_through, "single_copy_sends": report.single_copy_sends,
        "close_s": round(report.close_seconds, 2),
        "phases": {"before": phases.before, "during": phases.during, "after": phases.after,
                   "failover_interval": phases.failover_interval, "ping_or_probe_interval": phases.ping_interval,
                   "attempt_timeout": phases.attempt_timeout},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="active,passive,paired")
    parser.add_argument("--before", type=float, default=10.0)
    parser.add_argument("--during", type=float, default=20.0)
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--failover-interval", type=float, default=10.0, help="paired namespaces (the default)")
    parser.add_argument("--ping-interval", type=float, default=2.0, help="paired ping; replication probe")
    parser.add_argument("--attempt-timeout", type=float, default=2.0, help="replication: a namespace in doubt")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    phases = Phases(before=args.before, during=args.during, after=args.after,
                    failover_interval=args.failover_interval, ping_interval=args.ping_interval,
                    attempt_timeout=args.attempt_timeout)
    results = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix=f"outage-{mode}-") as base:
            primary, secondary = start_pair(Path(base), paired=mode == "paired")
            try:
                report = run(mode, primary, secondary, phases)
            finally:
                primary.stop()
                secondary.stop()
        print("\n".join(report.lines()), flush=True)
        results.append(_figures(report, phases))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
