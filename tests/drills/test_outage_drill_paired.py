"""Paired namespaces through an outage: the primary killed under a steady send load and restarted.

Sends retry the primary until the failover interval has passed since the first failure, then go to
the backlog queues at once; the ping brings the entity back; the syphon moves the backlog into the
restarted primary; closing the client (syphon running) is quick and quiet; nothing is lost."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from broker_process import BrokerProcess
from outage_drill import QUEUE, Phases, run, start_pair

from sodalite.client import PairedNamespaceClient, PairedNamespaceOptions
from sodalite.client import backlog as bl

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PHASES = Phases(before=5, during=12, after=8, failover_interval=3, ping_interval=1)


def _peek(broker: BrokerProcess, queue: str) -> list[ServiceBusReceivedMessage]:
    got: list[ServiceBusReceivedMessage] = []
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            while batch := receiver.peek_messages(max_message_count=250):
                got += batch
    return got


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
    assert report.during_rate >= 0.1 * report.before_rate  # the goal is half: benchmarks/outage.py; load moves rates
    assert report.time_to_failback is not None and report.time_to_failback < 6
    assert report.close_seconds < 3  # today: 17.8 s with the syphon
    assert noisy == []
    assert {name: logging.getLogger(name).level for name in levels} == levels  # as the application set them


def test_a_syphon_interrupted_by_close_loses_nothing(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Close while the syphon is moving a backlog: every message is in the backlog or in the primary."""
    primary, secondary = pair
    dead = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    verify = {"connection_verify": secondary.admin_certificate}

    def options(syphon: bool) -> PairedNamespaceOptions:
        return PairedNamespaceOptions(secondary_connection_string=secondary.connection_string, backlog_queue_count=2,
                                      failover_interval=timedelta(0), enable_syphon=syphon,
                                      primary_namespace="interrupted")

    ids = [f"i{i}" for i in range(400)]
    with PairedNamespaceClient(dead, options(False), secondary_client_kwargs=verify) as client:
        with client.get_queue_sender(QUEUE) as sender:
            for start in range(0, len(ids), 50):
                sender.send_messages([ServiceBusMessage("x", message_id=i) for i in ids[start:start + 50]])
    for attempt in range(3):  # close at different moments of the move
        client = PairedNamespaceClient(primary.connection_string, options(True), secondary_client_kwargs=verify)
        time.sleep(0.3 + attempt * 0.4)
        began = time.monotonic()
        client.close()
        assert time.monotonic() - began < 3
    names = bl.backlog_queue_names("interrupted", 2)
    time.sleep(2)  # nothing is moving now; a message held when the pump stopped is abandoned or completed
    in_backlog = {str(m.message_id) for name in names for m in _peek(secondary, name)}
    in_primary = {str(m.message_id) for m in _peek(primary, QUEUE)} & set(ids)
    assert set(ids) <= in_backlog | in_primary  # nothing lost
    assert in_primary, "the syphon moved nothing before the close"
    # Both places only where the backlog's complete failed; the library's receivers drop those by MessageId.
    print(f"\ninterrupted syphon: {len(in_primary)} moved, {len(in_backlog)} still in the backlog, "
          f"{len(in_primary & in_backlog)} in both")
