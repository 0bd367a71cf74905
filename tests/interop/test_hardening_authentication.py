"""Connections that never authenticate: a deadline after their open, and an allowance of their own.

A connection must have a token accepted on ``$cbs`` within the authentication deadline after its
open (``--auth-timeout``, the handshake timeout unless set), or the broker closes it with
``amqp:unauthorized-access``; over TCP and over WebSockets alike. Connections not yet authenticated
have an allowance of their own (``--max-unauthenticated-connections``, always below
``--max-connections``): past it, the one that waited longest gives way to a newcomer, so a flood of
idle connections never locks out a client with a key. (Before, an unauthenticated connection was held
240 s, forever with empty frames, and counted against the connection cap: fifty of them locked out a
client holding the Root key.)

Raw connections (tests/interop/raw_client.py, and a WebSocket driven by the same sans-IO client) play
the peers that never authenticate; the official SDK is the client with the key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.amqp import events as ev
from sodalite.amqp.connection import Connection
from sodalite.amqp.sasl import SaslClientConfig
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

QUEUE = "auth-q"
CAP, ALLOWANCE = 10, 4
DEADLINE = 2.0


def _broker(base: Path, *args: str) -> BrokerProcess:
    config = write_config(base / "Config.json", [{"Name": QUEUE, "Properties": {}}])
    return BrokerProcess(base / "data", config, extra_args=list(args)).start()


@pytest.fixture(scope="module")
def flooded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A small connection cap and allowance; a deadline long enough that it plays no part."""
    process = _broker(tmp_path_factory.mktemp("auth-allowance"), "--max-connections", str(CAP),
                      "--max-unauthenticated-connections", str(ALLOWANCE), "--auth-timeout", "300")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The authentication deadline shortened to 2 s."""
    process = _broker(tmp_path_factory.mktemp("auth-deadline"), "--auth-timeout", str(DEADLINE))
    yield process
    process.stop()


def _token(audience: str = "sb://localhost/") -> tuple[str, str, int]:
    expires = int(time.time()) + 3600
    return audience, generate_token(audience, KEY_NAME, KEY, expires), expires * 1000


def _first(client: RawClient) -> ev.Event:
    """Pump until the connection is open with its session begun, or closed by the broker: that event."""
    return client.wait(lambda e: isinstance(e, ev.SessionBegun | ev.ConnectionClosed), timeout=30)


def _opened(client: RawClient) -> bool:
    return isinstance(_first(client), ev.SessionBegun)


def _closed_by_broker(client: RawClient, within: float) -> ev.ConnectionClosed | None:
    """The broker's close, if it comes within ``within`` seconds (None: still open)."""
    try:
        got = client.wait(lambda e: isinstance(e, ev.ConnectionClosed), timeout=within)
    except TimeoutError:
        return None
    except (ConnectionError, OSError):
        return ev.ConnectionClosed(None, by_peer=True)
    assert isinstance(got, ev.ConnectionClosed)
    return got


def _send_with_the_root_key(broker: BrokerProcess, body: str) -> None:
    """One connection, no retries: it gets in, authenticates and sends at the first attempt."""
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver(QUEUE, max_wait_time=10) as receiver:
            [got] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(got) == body
            receiver.complete_message(got)


def test_a_flood_of_unauthenticated_connections_does_not_lock_out_a_client_with_a_key(
        flooded: BrokerProcess) -> None:
    authenticated = [RawClient(flooded.port) for _ in range(3)]
    idle: list[RawClient] = []
    try:
        for client in authenticated:
            assert _opened(client)
            assert client.put_token(*_token()) == 202
        for _ in range(3 * CAP):  # well past the allowance and the cap
            client = RawClient(flooded.port)
            idle.append(client)
            _opened(client)  # admitted, or refused after its open with a readable error
        time.sleep(1.5)  # those still held have waited long enough to give way to a newcomer
        _send_with_the_root_key(flooded, "in despite the flood")
        still_open = [c for c in idle if _closed_by_broker(c, 0.3) is None]
        assert len(still_open) <= ALLOWANCE, f"{len(still_open)} unauthenticated connections held"
        for client in authenticated:  # the authenticated connections were never the ones to go
            assert _closed_by_broker(client, 0.3) is None
            assert client.put_token(*_token()) == 202
    finally:
        for client in authenticated + idle:
            try:
                client.sock.close()
            except OSError:
                pass
    _send_with_the_root_key(flooded, "after the flood")


def test_an_unauthenticated_connection_refused_at_accept_reads_why(flooded: BrokerProcess) -> None:
    """Newcomers that find the allowance full of connections younger than a second are refused with
    amqp:resource-limit-exceeded after their open, naming the allowance."""
    held = [RawClient(flooded.port) for _ in range(ALLOWANCE + 3)]
    try:
        firsts = [_first(client) for client in held]
        # (the refusal comes right after the open: the session the client began in the same breath may come first)
        closes = [e if isinstance(e, ev.ConnectionClosed) else _closed_by_broker(c, 1.0)
                  for c, e in zip(held, firsts, strict=True)]
        refused = [e.error for e in closes if e is not None and e.error is not None]
        assert refused, "every connection was admitted past the allowance"
        assert all(error.condition == "amqp:resource-limit-exceeded" for error in refused)
        assert any("waiting to authenticate" in (error.description or "") for error in refused)
    finally:
        for client in held:
            client.sock.close()


def test_a_connection_with_no_accepted_token_is_closed_at_the_deadline(strict: BrokerProcess) -> None:
    lone = RawClient(strict.port)
    late = RawClient(strict.port)
    wrong = RawClient(strict.port)
    try:
        started = time.monotonic()
        assert _opened(lone) and _opened(late) and _opened(wrong)
        audience, _, expires = _token()
        assert wrong.put_token(audience, generate_token(audience, KEY_NAME, "not the key", expires // 1000),
                               expires) == 401  # a refused token proves nothing
        time.sleep(DEADLINE / 2)
        assert late.put_token(*_token()) == 202  # a client that authenticates a bit late is not affected
        for client in (lone, wrong):
            closed = _closed_by_broker(client, 30)
            assert closed is not None and closed.error is not None, "still open past the deadline"
            assert closed.error.condition == "amqp:unauthorized-access"
            assert "no token was accepted on $cbs" in (closed.error.description or "")
        assert time.monotonic() - started >= DEADLINE * 0.9
        assert _closed_by_broker(late, DEADLINE + 1) is None
        assert late.put_token(*_token()) == 202
    finally:
        for client in (lone, late, wrong):
            client.sock.close()


def test_the_sdk_is_not_affected_by_the_deadline(strict: BrokerProcess) -> None:
    """The SDK puts its token right after the open: its connection outlives the deadline."""
    with ServiceBusClient.from_connection_string(strict.connection_string, retry_total=0) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages(ServiceBusMessage("before"))
            time.sleep(DEADLINE * 2)
            sender.send_messages(ServiceBusMessage("after"))
        with client.get_queue_receiver(QUEUE, max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=2, max_wait_time=10)
            got += receiver.receive_messages(max_message_count=2 - len(got), max_wait_time=5) if len(got) < 2 else []
            assert sorted(str(m) for m in got) == ["after", "before"]
            for m in got:
                receiver.complete_message(m)
    assert not any("no token accepted" in line for line in strict.output)


async def _websocket_close(port: int) -> ev.ConnectionClosed:
    """Open an AMQP connection over a WebSocket on the plain-HTTP management port, never put a
    token, and return the broker's close."""
    conn = Connection(server=False, container_id="ws-idle", sasl_client=SaslClientConfig(), hostname="localhost")
    conn.start()
    conn.begin()
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"ws://127.0.0.1:{port}/$servicebus/websocket", protocols=("AMQPWSB10",)) as ws:
        await ws.send_bytes(conn.data_to_send())
        while True:
            message = await asyncio.wait_for(ws.receive(), 30)
            if message.type is not aiohttp.WSMsgType.BINARY:
                events = conn.connection_lost()
            else:
                events = conn.receive_data(message.data)
            out = conn.data_to_send()
            if out and not ws.closed:
                await ws.send_bytes(out)
            for event in events:
                if isinstance(event, ev.ConnectionClosed):
                    return event


def test_the_deadline_holds_over_websockets_too(strict: BrokerProcess) -> None:
    started = time.monotonic()
    closed = asyncio.run(_websocket_close(strict.http_port))
    assert closed.error is not None and closed.error.condition == "amqp:unauthorized-access"
    assert time.monotonic() - started >= DEADLINE * 0.9
