"""Active replication through an outage: the primary killed under a steady send load and restarted.

The namespace that failed is marked unavailable at once; sends then go to the other namespace only,
as fast as before, until a probe (a link opened, no message sent) clears the mark after the restart.
The application's SDK retry options are the SDK's defaults (whose chain alone takes about 11 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from outage_drill import Phases, run, start_pair

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PHASES = Phases(before=5, during=10, after=8, ping_interval=1, attempt_timeout=2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    primary, secondary = start_pair(tmp_path_factory.mktemp("outage-active"), paired=False)
    yield primary, secondary
    primary.stop()
    secondary.stop()


def test_active_replication_keeps_sending_through_an_outage(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    report = run("active", *pair, PHASES)
    print("\n" + "\n".join(report.lines()))
    assert report.lost == 0
    assert report.let_through == 0
    assert report.longest_send < PHASES.attempt_timeout + 3  # today: about 11 s, the SDK's retry chain
    assert report.time_to_failover is not None and report.time_to_failover < PHASES.attempt_timeout + 3
    assert report.during_rate >= 0.25 * report.before_rate  # the goal is half; a busy machine gets slack
    assert report.single_copy_sends > 0
    assert report.time_to_failback is not None and report.time_to_failback < 6  # the probe cleared the mark
    assert report.close_seconds < 3
