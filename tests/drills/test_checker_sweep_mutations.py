"""Proof that the random sweep can fail: with a known defect re-enabled by a test-only switch
(``SODALITE_TEST_DEFECT``, docs/reliability.md), a short seeded run of the checker (concurrent SDK
clients, the same runner as ``scripts/fault-sweep``) reports a violation of the promise it breaks."""

from __future__ import annotations

import pytest

from checker.runner import RunSpec, run
from checker.script import node_for

pytestmark = pytest.mark.interop


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
