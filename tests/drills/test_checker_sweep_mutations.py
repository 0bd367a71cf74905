"""Proof that the random sweep can fail: with a known defect re-enabled by a test-only switch
(``SODALITE_TEST_DEFECT``, docs/reliability.md), a short seeded run of the checker (concurrent SDK
clients, the same runner as ``scripts/fault-sweep``) reports a violation of the promise it breaks,
and the same run without the defect is clean."""

from __future__ import annotations

from typing import Any

import pytest

from checker.runner import RunSpec, run
from checker.script import node_for

pytestmark = pytest.mark.interop

# The runs the later switches are caught in (each a seed whose operations exercise the defect's place):
# ReceiveAndDelete receivers leaving as the broker takes messages for them (the close-midstream fault);
# dead-letter queues moved and resubmitted through the JSON API, then recounted; a second `serve` started
# on the broker's data directory (at least once: the kind fires 0.6 times a seed unless told more).
RAD_DROP: dict[str, Any] = {"seed": 5, "faults": ("close-midstream",), "admin": True}
SIZE_AFTER_MOVE: dict[str, Any] = {"seed": 7, "faults": (), "admin": True}
SECOND_SERVE: dict[str, Any] = {"seed": 7, "faults": ("second-serve",), "faults_per_kind": 2.0, "admin": False}


def _spec(defect: str | None, **options: Any) -> RunSpec:
    return RunSpec(**{"ops": 40, "clients": 2, "async_client": False, "phases": 1, **options}, defect=defect)


@pytest.mark.parametrize(("defect", "promise"), [("ack-before-commit", "durable"),
                                                 ("complete-not-committed", "peeklock")])
def test_the_sweep_catches_a_known_defect(defect: str, promise: str) -> None:
    # No ReceiveAndDelete: without the broker's delivery trace, each such receive excuses losses up to its credit.
    result = run(RunSpec(seed=7, ops=40, clients=2, async_client=False, faults=(), phases=1, admin=False, rad=False,
                         defect=defect), node_for(defect))
    assert promise in {v.promise for v in result.violations}, result.violations


def test_the_same_run_without_the_defect_is_clean() -> None:
    result = run(RunSpec(seed=7, ops=40, clients=2, async_client=False, faults=(), phases=1, admin=False),
                 node_for(None))
    assert result.violations == []


@pytest.mark.parametrize(("defect", "promise", "options"), [("rad-drop", "durable", RAD_DROP),
                                                            ("size-after-move", "counts", SIZE_AFTER_MOVE),
                                                            ("no-data-lock", "one-broker", SECOND_SERVE)])
def test_the_sweep_catches_a_defect_the_issue_names(defect: str, promise: str, options: dict[str, Any]) -> None:
    result = run(_spec(defect, **options), node_for(defect))
    assert promise in {v.promise for v in result.violations}, (result.violations, result.faults)


@pytest.mark.parametrize("options", [RAD_DROP, SIZE_AFTER_MOVE, SECOND_SERVE], ids=["rad", "move", "second-serve"])
def test_those_runs_without_the_defect_are_clean(options: dict[str, Any]) -> None:
    result = run(_spec(None, **options), node_for(None))
    assert result.violations == []
