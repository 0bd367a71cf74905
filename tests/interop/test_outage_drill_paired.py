"""Paired namespaces through an outage: the primary killed under a steady send load and restarted.

Sends retry the primary until the failover interval has passed since the first failure, then go to
the backlog queues at once; the ping brings the entity back; the syphon moves the backlog into the
restarted primary; closing the client (syphon running) is quick and quiet; nothing is lost."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from outage_drill import Phases, run, start_pair

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PHASES = Phases(before=5, during=12, after=8, failover_interval=3, ping_interval=1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    primary, secondary = start_pair(tmp_path_factory.mktemp("outage-paired"), paired=True)
    yield primary, secondary
    primary.stop()
    secondary.stop()


def test_paired_namespaces_fail_over_after_the_interval_and_close_quietly(
        pair: tuple[BrokerProcess, BrokerProcess], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="azure")
    levels = {name: logging.getLogger(name).level for name in ("azure", "azure.servicebus", "sodalite.client")}
    noisy: list[str] = []

    def after_close() -> None:  # what the SDK logged (and Python would print) while the client closed
        noisy.extend(r.getMessage() for r in caplog.records if r.name.startswith("azure") and
                     (r.exc_info or "Unexpected error" in r.getMessage()))

    report = run("paired", *pair, PHASES, on_close=after_close)
    print("\n" + "\n".join(report.lines()))
    assert report.lost == 0
    assert report.let_through == 0
    assert report.stored["backlog"] == 0  # the syphon moved everything
    # Today: 23 s for the first send with a 10 s interval (the SDK's retry chain inside each attempt).
    assert report.longest_send < PHASES.failover_interval + 3
    assert report.time_to_failover is not None and report.time_to_failover < PHASES.failover_interval + 3
    assert report.during_rate >= 0.25 * report.before_rate
    assert report.time_to_failback is not None and report.time_to_failback < 6
    assert report.close_seconds < 3  # today: 17.8 s with the syphon
    assert noisy == []
    assert {name: logging.getLogger(name).level for name in levels} == levels  # as the application set them
