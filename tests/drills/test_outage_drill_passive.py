"""Passive replication through an outage: the primary killed under a steady send load and restarted.

The first send after the kill goes to the backup within the short attempt policy (not the SDK's
whole retry chain), the backup takes the active role and keeps it; nothing is lost."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from outage_drill import Phases, run, start_pair

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PHASES = Phases(before=5, during=10, after=8, ping_interval=1, attempt_timeout=2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    primary, secondary = start_pair(tmp_path_factory.mktemp("outage-passive"), paired=False)
    yield primary, secondary
    primary.stop()
    secondary.stop()


def test_passive_replication_switches_roles_without_waiting_for_the_sdk_retries(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    report = run("passive", *pair, PHASES)
    print("\n" + "\n".join(report.lines()))
    assert report.lost == 0
    assert report.let_through == 0
    assert report.longest_send < PHASES.attempt_timeout + 3  # today: about 11.7 s with the SDK's defaults
    assert report.time_to_failover is not None and report.time_to_failover < PHASES.attempt_timeout + 3
    assert report.during_rate >= 0.1 * report.before_rate  # the goal is half: benchmarks/outage.py; load moves rates
    assert report.stored["secondary"] > 0  # the backup took the active role and kept it
    assert report.close_seconds < 3
