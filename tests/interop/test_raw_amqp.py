"""What the SDK never does but other AMQP clients may: pre-settled sends, multi-frame messages, credit."""

from __future__ import annotations

import time

import pytest
from broker_process import KEY, KEY_NAME, BrokerProcess
from raw_client import RawClient, message

from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.message import split_sections
from sodalite.amqp.performatives import Accepted, Source, Target
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop


def _client(broker: BrokerProcess, max_frame_size: int = 262144) -> RawClient:
    client = RawClient(broker.port, max_frame_size=max_frame_size)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    return client


def test_presettled_and_multi_frame_sends_are_stored(broker: BrokerProcess) -> None:
    client = _client(broker, max_frame_size=4096)  # the broker must split its deliveries into 4 KB frames
    try:
        sender = client.attach(f"amqps://localhost:{broker.port}/queue.1", SENDER)
        big = b"B" * 200_000  # below the 256 KB entity limit
        sender.send_transfer(message(b"fire-and-forget", "p1"), b"\x01", settled=True)
        sender.send_transfer(message(big, "p2"), b"\x02", settled=False)
        outcome = client.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is sender)
        assert isinstance(outcome, ev.DeliveryUpdated) and outcome.settled
        assert type(outcome.state).__name__ == "Accepted"

        receiver = client.attach(f"amqps://localhost:{broker.port}/queue.1", RECEIVER, snd_settle_mode=1)
        receiver.issue_credit(2)
        bodies = []
        for _ in range(2):
            got = client.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is receiver)
            assert isinstance(got, ev.TransferReceived) and got.delivery.settled  # ReceiveAndDelete
            payload = got.delivery.payload
            data = [s for s in split_sections(payload) if s.code == 0x75]
            bodies.append(payload[data[0].value_start:data[0].end])
        assert bodies[0].endswith(b"fire-and-forget")
        assert bodies[1].endswith(big) and len(bodies[1]) == len(big) + 5  # vbin32 constructor + length
        assert receiver.link_credit == 0  # credit is honoured: nothing more arrives without more credit
    finally:
        client.close()


def test_drain_returns_credit_when_the_queue_is_empty(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        receiver = client.attach(f"amqps://localhost:{broker.port}/rnd", RECEIVER, snd_settle_mode=1)
        before = receiver.delivery_count
        receiver.issue_credit(5, drain=True)
        client.flush()
        deadline = time.monotonic() + 10
        while receiver.link_credit and time.monotonic() < deadline:
            client.sock.settimeout(1)
            data = client.sock.recv(65536)
            client.events.extend(client.conn.receive_data(data))
        assert receiver.link_credit == 0
        assert (receiver.delivery_count - before) % 2**32 == 5  # the broker advanced delivery-count by the credit
    finally:
        client.close()


def test_abandon_with_properties_to_modify_changes_the_redelivered_message(broker: BrokerProcess) -> None:
    from sodalite.amqp.codec import decode
    from sodalite.amqp.performatives import Modified
    from sodalite.amqp.types import Symbol

    client = _client(broker)
    try:
        sender = client.attach(f"amqps://localhost:{broker.port}/props", SENDER)
        sender.send_transfer(message(b"annotate me", "m-annotate"), b"\x09", settled=True)
        receiver = client.attach(f"amqps://localhost:{broker.port}/props", RECEIVER, rcv_settle_mode=1)
        receiver.issue_credit(1)
        first = client.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is receiver)
        assert isinstance(first, ev.TransferReceived)
        receiver.settle(first.delivery.delivery_id, Modified(True, False, {Symbol("x-custom"): "changed"}),
                        settled=False)
        echo = client.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is receiver)
        assert isinstance(echo, ev.DeliveryUpdated) and isinstance(echo.state, Modified)
        receiver.issue_credit(1)
        again = client.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is receiver)
        assert isinstance(again, ev.TransferReceived)
        payload = again.delivery.payload
        sections = {s.code: decode(payload[s.value_start:s.end]) for s in split_sections(payload)}
        # Service Bus applies properties to modify to the application properties the next receiver reads
        assert sections[0x74]["x-custom"] == "changed"
        assert sections[0x70][4] == 1  # the abandon counted: delivery-count 1
        receiver.settle(again.delivery.delivery_id, Accepted(), settled=False)
        client.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is receiver)
    finally:
        client.close()


def _cbs_attach(client: RawClient, role: bool) -> tuple[Link, str | None]:
    """Attach a $cbs link in ``role`` (the client's); the link and its refusal's condition (None: accepted)."""
    link = client.session.attach(f"cbs-{time.monotonic()}", role, Source("$cbs"), Target("$cbs"))
    client.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is link)
    if link.state == "attached":
        return link, None
    detached = client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is link)
    assert isinstance(detached, ev.LinkDetached) and detached.error is not None
    return link, detached.error.condition


def test_one_cbs_sender_and_one_cbs_receiver_at_a_time(broker: BrokerProcess) -> None:
    """As Service Bus: a second $cbs link in the same role on a connection is refused with not-allowed (the
    Go SDK then opens a new connection); the other role is not affected, and a link whose detach was
    processed no longer counts (the Go SDK opens a fresh pair for each token)."""
    client = _client(broker)  # holds one $cbs pair, attached
    try:
        assert _cbs_attach(client, SENDER)[1] == "amqp:not-allowed"
        assert _cbs_attach(client, RECEIVER)[1] == "amqp:not-allowed"
        assert client._cbs is not None
        request, response = client._cbs
        request.detach()  # the request link goes; its detach is echoed before the next attach is sent
        client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is request)
        assert _cbs_attach(client, RECEIVER)[1] == "amqp:not-allowed"  # the response link is still there
        fresh, refused = _cbs_attach(client, SENDER)
        assert refused is None
        client._cbs = (fresh, response)  # the new request link works: a put-token through it is answered
        audience = f"sb://localhost:{broker.port}/"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    finally:
        client.close()
