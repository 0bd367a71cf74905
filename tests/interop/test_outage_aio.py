"""The asyncio twins through an outage, at a small scale: the primary killed and restarted under sends.

Active replication marks the dead namespace at its first failure and sends one copy until the probe
clears the mark; passive replication switches roles without the SDK's retry chain; a paired client
fails over within the failover interval and closes (syphon running) quickly and quietly. The
application's SDK retry options are the SDK's defaults throughout."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusMessage
from broker_process import BrokerProcess
from outage_drill import QUEUE, start_pair

from sodalite.client.aio import PairedNamespaceClient, PairedNamespaceOptions, ReplicatedClient, ReplicationMode

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

ATTEMPT = 2.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    primary, secondary = start_pair(tmp_path_factory.mktemp("outage-aio"), paired=False)
    yield primary, secondary
    primary.stop()
    secondary.stop()


async def _timed_sends(sender: object, prefix: str, count: int) -> list[float]:
    took = []
    for i in range(count):
        began = time.monotonic()
        await sender.send_messages(ServiceBusMessage(prefix, message_id=f"{prefix}-{i}"))  # type: ignore[attr-defined]
        took.append(time.monotonic() - began)
    return took


async def _restart(broker: BrokerProcess) -> None:
    await asyncio.to_thread(broker.start)


def test_aio_active_marks_the_dead_namespace_and_the_probe_clears_it(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = pair

    async def run() -> tuple[list[float], list[float], float, int, float]:
        async with ReplicatedClient(primary.connection_string, secondary.connection_string,
                                    mode=ReplicationMode.ACTIVE, retry_interval=timedelta(seconds=1),
                                    attempt_timeout=timedelta(seconds=ATTEMPT)) as client:
            async with client.get_queue_sender(QUEUE) as sender:
                await _timed_sends(sender, "a-before", 5)
                primary.kill()
                during = await _timed_sends(sender, "a-during", 30)
                assert [index for _, index in client.availability.marked_pairs()] == [0]
                await _restart(primary)
                restarted = time.monotonic()
                while client.availability.marked_pairs() and time.monotonic() - restarted < 20:
                    await asyncio.sleep(0.05)
                back = time.monotonic() - restarted
                after = await _timed_sends(sender, "a-after", 5)
                single = client.availability.single_copy_sends
            began = time.monotonic()
        return during, after, back, single, time.monotonic() - began

    during, after, back, single, close = asyncio.run(run())
    print(f"\naio active: first send after the kill {during[0]:.2f} s, longest {max(during):.2f} s, "
          f"fail back {back:.2f} s, close {close:.2f} s")
    assert max(during) < ATTEMPT + 3  # today: the SDK's retry chain, about 11 s
    assert single >= 29  # every send after the first failure went to one namespace
    assert back < 6
    assert max(after) < ATTEMPT + 3
    assert close < 3


def test_aio_passive_switches_without_the_sdk_retry_chain(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = pair

    async def run() -> tuple[list[float], int]:
        async with ReplicatedClient(primary.connection_string, secondary.connection_string,
                                    mode=ReplicationMode.PASSIVE, attempt_timeout=timedelta(seconds=ATTEMPT)) as client:
            async with client.get_queue_sender(QUEUE) as sender:
                await _timed_sends(sender, "p-before", 5)
                primary.kill()
                try:
                    during = await _timed_sends(sender, "p-during", 20)
                finally:
                    await _restart(primary)
                return during, sender.active_namespace

    during, active = asyncio.run(run())
    print(f"\naio passive: first send after the kill {during[0]:.2f} s, longest {max(during):.2f} s")
    assert max(during) < ATTEMPT + 3  # today: about 11.7 s with the SDK's default retries
    assert active == 1


def test_aio_paired_fails_over_within_the_interval_and_closes_quietly(
        pair: tuple[BrokerProcess, BrokerProcess], caplog: pytest.LogCaptureFixture) -> None:
    primary, secondary = pair
    caplog.set_level(logging.WARNING, logger="azure")
    interval = 2.0
    options = PairedNamespaceOptions(
        secondary_connection_string=secondary.connection_string, backlog_queue_count=2,
        failover_interval=timedelta(seconds=interval), ping_primary_interval=timedelta(seconds=1),
        enable_syphon=True, primary_namespace="aio-outage")

    async def run() -> tuple[list[float], float]:
        client = PairedNamespaceClient(primary.connection_string, options,
                                       secondary_client_kwargs={"connection_verify": secondary.admin_certificate})
        async with client:
            async with client.get_queue_sender(QUEUE) as sender:
                await _timed_sends(sender, "q-before", 5)
                primary.kill()
                try:
                    during = await _timed_sends(sender, "q-during", 20)
                finally:
                    await _restart(primary)
            began = time.monotonic()
        return during, time.monotonic() - began

    during, close = asyncio.run(run())
    print(f"\naio paired: first send after the kill {during[0]:.2f} s, longest {max(during):.2f} s, "
          f"close {close:.2f} s")
    assert max(during) < interval + 3  # today: the SDK's retry chain inside each retry of the primary
    assert max(during[1:]) < 1.5  # failed over: the backlog at once
    assert close < 3
    noisy = [r.getMessage() for r in caplog.records
             if r.name.startswith("azure") and (r.exc_info or "Unexpected error" in r.getMessage())]
    assert noisy == []
