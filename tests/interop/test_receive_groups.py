"""Unsettled transfers sent back to back on one link: stored as one send per partition, each answered
with its own outcome after the commit, the accepted ones in one disposition per range of delivery-ids.

A client (the raw AMQP client here, the Spark sink, a JMS producer) that writes many unsettled
transfers without waiting gets the cost of a batched send; what each transfer is told does not change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message_with

from sodalite.amqp import events as ev
from sodalite.amqp.link import SENDER, Link
from sodalite.amqp.performatives import Accepted, Disposition, Rejected
from sodalite.amqp.session import Session
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

COUNT = 200
QUEUES = [{"Name": "plain", "Properties": {}},
          {"Name": "parted", "Properties": {"EnablePartitioning": True}},
          {"Name": "sessions", "Properties": {"RequiresSession": True}},
          {"Name": "parted-sessions", "Properties": {"EnablePartitioning": True, "RequiresSession": True}}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("groups")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


@pytest.fixture
def dispositions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every disposition frame the raw client receives, as (first, last)."""
    seen: list[tuple[int, int]] = []
    original = Session._on_disposition

    def counted(self: Session, d: Disposition) -> None:
        seen.append((d.first, d.first if d.last is None else d.last))
        original(self, d)

    monkeypatch.setattr(Session, "_on_disposition", counted)
    return seen


def client_for(broker: BrokerProcess) -> RawClient:
    client = RawClient(broker.port)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    return client


def send_back_to_back(client: RawClient, link: Link, payloads: list[bytes]) -> dict[int, Any]:
    """Write every transfer in one go (one flush), then collect each one's outcome by its index."""
    ids = {link.send_transfer(p, i.to_bytes(4, "big"), settled=False): i for i, p in enumerate(payloads)}
    client.flush()
    outcomes: dict[int, Any] = {}
    while len(outcomes) < len(ids):
        event = client.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is link, timeout=30)
        assert isinstance(event, ev.DeliveryUpdated) and event.settled
        outcomes[ids[event.delivery_id]] = event.state
    return outcomes


def peeked_ids(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue) as receiver:
            got: list[str] = []
            after = 0
            while page := receiver.peek_messages(max_message_count=250, sequence_number=after):
                got += [str(m.message_id) for m in page]
                after = int(page[-1].sequence_number or 0) + 1
            return got


def test_back_to_back_transfers_are_each_accepted_in_ranges_and_stored_in_order(
        broker: BrokerProcess, dispositions: list[tuple[int, int]]) -> None:
    client = client_for(broker)
    try:
        link = client.attach("plain", SENDER)
        dispositions.clear()  # (the put-token's)
        outcomes = send_back_to_back(client, link, [message_with(b"x" * 100, message_id=f"m{i}")
                                                    for i in range(COUNT)])
    finally:
        client.close()
    assert all(isinstance(outcomes[i], Accepted) for i in range(COUNT))
    # One disposition frame per transfer before; now one per range of consecutive delivery-ids answered together.
    assert len(dispositions) <= COUNT // 10, dispositions
    assert sum(last - first + 1 for first, last in dispositions) == COUNT
    assert peeked_ids(broker, "plain") == [f"m{i}" for i in range(COUNT)]  # each once, in the link's order


def test_back_to_back_transfers_to_many_partitions_are_each_stored_once(
        broker: BrokerProcess, dispositions: list[tuple[int, int]]) -> None:
    client = client_for(broker)
    try:
        link = client.attach("parted", SENDER)
        dispositions.clear()  # (the put-token's)
        outcomes = send_back_to_back(client, link, [message_with(b"y", message_id=f"p{i}", partition_key=f"k{i % 16}")
                                                    for i in range(COUNT)])
    finally:
        client.close()
    assert all(isinstance(outcomes[i], Accepted) for i in range(COUNT))
    assert len(dispositions) <= COUNT // 10, dispositions
    stored = peeked_ids(broker, "parted")
    assert sorted(stored) == sorted(f"p{i}" for i in range(COUNT))
    for key in range(16):  # per partition key, the link's order
        mine = [s for s in stored if int(s[1:]) % 16 == key]
        assert mine == sorted(mine, key=lambda s: int(s[1:]))


@pytest.mark.parametrize("queue", ["sessions", "parted-sessions"])
def test_a_refused_transfer_among_back_to_back_ones_is_refused_alone(broker: BrokerProcess, queue: str) -> None:
    """Every third message has no SessionId (refused by an entity that requires sessions), one has a
    PartitionKey that differs from its SessionId (refused), one is not AMQP at all: each is rejected
    with its own error, and every other one is accepted and stored."""
    payloads = []
    for i in range(60):
        if i % 3 == 0:
            payloads.append(message_with(b"z", message_id=f"{queue}-{i}"))
        elif i == 10:
            payloads.append(message_with(b"z", message_id=f"{queue}-{i}", session_id="s1", partition_key="other"))
        elif i == 20:
            payloads.append(b"\x00\x53\x75\xa0\xff")  # a data section that claims 255 bytes and has none
        else:
            payloads.append(message_with(b"z", message_id=f"{queue}-{i}", session_id=f"s{i % 4}"))
    client = client_for(broker)
    try:
        link = client.attach(queue, SENDER)
        outcomes = send_back_to_back(client, link, payloads)
    finally:
        client.close()
    refused = {i for i in range(60) if i % 3 == 0} | {20} | ({10} if queue == "parted-sessions" else set())
    for i in range(60):
        state = outcomes[i]
        if i in refused:
            assert isinstance(state, Rejected), (i, state)
            assert state.error is not None and str(state.error.condition) in (
                "com.microsoft:argument-error", "amqp:invalid-field", "amqp:decode-error",
                "com.microsoft:invalid-operation", "amqp:not-allowed"), (i, state.error)
        else:
            assert isinstance(state, Accepted), (i, state)
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        stored: list[str] = []
        for session in range(4):
            with sb.get_queue_receiver(queue, session_id=f"s{session}") as receiver:
                stored += [str(m.message_id) for m in receiver.peek_messages(max_message_count=100)]
    assert sorted(stored) == sorted(f"{queue}-{i}" for i in range(60) if i not in refused)
