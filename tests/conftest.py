"""How the suite is spread over pytest-xdist workers.

Each test module is a unit of its own, so a module's tests share one worker and its module-scoped
broker or database server (what `--dist loadfile` does). The modules that drive Spark form two units
instead: the pipelines run through the CLI (test_spark_pipelines_*: a JVM per `sodalite pipeline`
process, and the suite's session to resume them) with the standalone cluster's module
(test_spark_cluster.py: a master, two workers and their executors, and a driver JVM per run, so it
runs after the other CLI runs rather than beside them), and the rest (the data source, its
projections, the syphon and redrive). Each unit shares one worker and one Spark session
(tests/interop/conftest.py), so two session JVMs run at a time rather than one per worker, and the
Python workers Spark starts (which must connect back to the JVM within Spark's fixed 10 s) do not
compete with several other JVMs. (They were one unit, the suite's long pole: about 5 minutes of its
12 on a quiet machine.)

The units are handed out longest first (LPT): `scripts/test` runs every tier in one session, and a
long unit started last would leave the other workers idle while it finishes. The interop units
(mostly waiting) and the unit and store ones (mostly computing) are interleaved (``unit_order``).
A unit's length is the sum of its tests' durations (setup, call and teardown) in
tests/durations.json, written by a run with SODALITE_RECORD_DURATIONS=1
(`SODALITE_RECORD_DURATIONS=1 scripts/test`; the units that ran replace their entries, the others
are kept while their files exist). A unit missing from the file counts as DEFAULT_INTEROP_SECONDS
in tests/interop (so a new one starts early rather than late), else as DEFAULT_SECONDS. The order
only decides when a module starts, never whether or how it runs.

This is a scheduler of our own (xdist's loadfile with one more rule) rather than `xdist_group`
marks: with pytest 9.2, xdist 3.8's loadgroup no longer sees the groups (its node-id suffix is
ignored), and the suite silently ran as plain loadfile.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

SPARK_UNIT = "spark"
SPARK_PIPELINES_UNIT = "spark-pipelines"
SPARK_UNITS = (SPARK_UNIT, SPARK_PIPELINES_UNIT)
DURATIONS = Path(__file__).with_name("durations.json")
DEFAULT_INTEROP_SECONDS = 30.0
DEFAULT_SECONDS = 2.0
RECORD = os.environ.get("SODALITE_RECORD_DURATIONS") == "1"


def uses_spark(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_spark_") and name != "test_spark_broker_extension.py"


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if not uses_spark(path):
        return path
    own_jvms = path.rsplit("/", 1)[-1].startswith(("test_spark_pipelines_", "test_spark_cluster"))
    return SPARK_PIPELINES_UNIT if own_jvms else SPARK_UNIT


def is_interop(unit: str) -> bool:
    return unit in SPARK_UNITS or unit.startswith("tests/interop/")


@cache
def known_durations() -> dict[str, float]:
    try:
        loaded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(unit): float(seconds) for unit, seconds in loaded.get("units", {}).items()}


def expected_seconds(unit: str) -> float:
    known = known_durations().get(unit)
    if known is not None:
        return known
    return DEFAULT_INTEROP_SECONDS if is_interop(unit) else DEFAULT_SECONDS


class ModuleScheduling(LoadScopeScheduling):
    """loadfile, with every Spark module in one unit."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None  # another mode asked for on the command line: xdist's own
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


def unit_order(units: list[str]) -> dict[str, int]:
    """Each list longest first (LPT), the two interleaved so that both advance through their expected
    time at the same pace: the interop modules mostly wait (on brokers, timers, clients) and the
    unit and store modules mostly compute, so a worker that frees up alternately gets one of each
    and the cores stay busy from the first minute to the last."""
    waiting = sorted((u for u in units if is_interop(u)), key=lambda u: (-expected_seconds(u), u))
    computing = sorted((u for u in units if not is_interop(u)), key=lambda u: (-expected_seconds(u), u))
    totals = [sum(map(expected_seconds, waiting)) or 1.0, sum(map(expected_seconds, computing)) or 1.0]
    done = [0.0, 0.0]
    lists = [waiting, computing]
    order: list[str] = []
    while waiting or computing:
        pick = 0 if not computing or (waiting and done[0] / totals[0] <= done[1] / totals[1]) else 1
        unit = lists[pick].pop(0)
        done[pick] += expected_seconds(unit)
        order.append(unit)
    return {unit: index for index, unit in enumerate(order)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: a unit's tests keep their order; xdist hands the units out in the order of their first
    # test. Deterministic, so every worker collects the same order.
    order = unit_order(sorted({unit_of(item.nodeid) for item in items}))
    items.sort(key=lambda item: order[unit_of(item.nodeid)])


_recorded: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if RECORD:
        _recorded[unit_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not RECORD or hasattr(session.config, "workerinput") or not _recorded:
        return  # only the controller (or a run without xdist) writes the file
    units = {**known_durations(), **{unit: round(seconds, 1) for unit, seconds in _recorded.items()}}
    root = session.config.rootpath
    units = {unit: seconds for unit, seconds in units.items() if unit in SPARK_UNITS or (root / unit).exists()}
    ordered = dict(sorted(units.items(), key=lambda kv: (-kv[1], kv[0])))
    DURATIONS.write_text(json.dumps({"about": "seconds per xdist unit (tests/conftest.py); "
                                              "SODALITE_RECORD_DURATIONS=1 scripts/test rewrites it",
                                     "units": ordered}, indent=1) + "\n", encoding="utf-8")
