"""AMQP over WebSockets: ``TransportType.AmqpOverWebsocket`` against the management API's ports.

The SDK dials ``wss://<custom endpoint>/$servicebus/websocket`` (port 443 without one) with the
subprotocol ``AMQPWSB10``. The broker serves that path on its HTTPS management port (``wss://``)
and its plain-HTTP one (``ws://``, which the SDK uses with ``UseDevelopmentEmulator=true``). Nothing
but the management API listens on those ports, so a message that gets through went over the
WebSocket.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import ServiceBusConnectionError
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES: list[dict[str, Any]] = [{"Name": name, "Properties": {}} for name in ("ws-sync", "ws-aio", "ws-plain")]
AMQP_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@pytest.fixture(scope="module")
def ws_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("websocket")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _connection_string(key: str = KEY) -> str:
    """The ordinary (non-emulator) connection string: the SDK then speaks TLS, so wss://."""
    return f"Endpoint=sb://localhost/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={key}"


def _wss(broker: BrokerProcess) -> dict[str, Any]:
    return {"transport_type": TransportType.AmqpOverWebsocket,
            "custom_endpoint_address": f"sb://localhost:{broker.admin_port}",
            "connection_verify": broker.admin_certificate}


def test_sync_client_sends_receives_and_completes_over_wss(ws_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(_connection_string(), **_wss(ws_broker)) as client:
        with client.get_queue_sender("ws-sync") as sender:
            sender.send_messages([ServiceBusMessage(f"ws-{i}", application_properties={"i": i}) for i in range(3)])
            sender.send_messages(ServiceBusMessage(b"x" * 200_000))  # near the 256 KiB a message may have
        with client.get_queue_receiver("ws-sync") as receiver:
            got = []
            for _ in range(5):
                got += receiver.receive_messages(max_message_count=4 - len(got), max_wait_time=5)
                if len(got) == 4:
                    break
            assert [str(m) for m in got[:3]] == ["ws-0", "ws-1", "ws-2"]
            assert [m.application_properties[b"i"] for m in got[:3]] == [0, 1, 2]  # type: ignore[index]
            assert b"".join(got[3].body) == b"x" * 200_000
            for message in got:
                receiver.complete_message(message)
            assert receiver.peek_messages(max_message_count=10) == []


def test_async_client_sends_receives_and_completes_over_wss(ws_broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncServiceBusClient.from_connection_string(_connection_string(), **_wss(ws_broker)) as client:
            async with client.get_queue_sender("ws-aio") as sender:
                await sender.send_messages(ServiceBusMessage("over aiohttp"))
            async with client.get_queue_receiver("ws-aio") as receiver:
                [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert str(message) == "over aiohttp" and message.delivery_count == 0
                await receiver.complete_message(message)
                assert await receiver.peek_messages(max_message_count=10) == []

    asyncio.run(scenario())


def test_plain_ws_on_the_http_port_with_the_emulator_string(ws_broker: BrokerProcess) -> None:
    emulator = (f"Endpoint=sb://localhost:{ws_broker.http_port};SharedAccessKeyName={KEY_NAME};"
                f"SharedAccessKey={KEY};UseDevelopmentEmulator=true")
    with ServiceBusClient.from_connection_string(
            emulator, transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"sb://localhost:{ws_broker.http_port}") as client:
        with client.get_queue_sender("ws-plain") as sender:
            sender.send_messages(ServiceBusMessage("over ws://"))
        with client.get_queue_receiver("ws-plain") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(message) == "over ws://"
            receiver.complete_message(message)


def test_a_wrong_key_is_refused_inside_the_amqp_connection(ws_broker: BrokerProcess) -> None:
    # With a custom endpoint the SDK reports any authentication failure as a connection error
    # (parity with its older transport); the cause is the broker's 401 to the put-token.
    with ServiceBusClient.from_connection_string(_connection_string("not-the-key"), retry_total=0,
                                                 **_wss(ws_broker)) as client:
        with pytest.raises(ServiceBusConnectionError) as refused, client.get_queue_sender("ws-sync") as sender:
            sender.send_messages(ServiceBusMessage("refused"))
    cause = str(refused.value.inner_exception)
    assert "401" in cause and "signature does not match" in cause


def _client_ssl(broker: BrokerProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=broker.admin_certificate)


@pytest.mark.parametrize("subprotocol", ["AMQPWSB10", "amqp"])
def test_message_boundaries_do_not_matter(ws_broker: BrokerProcess, subprotocol: str) -> None:
    """The protocol header split over three WebSocket messages is one header to the broker; the
    subprotocol may be the binding's ``AMQPWSB10`` or the plain ``amqp`` the Go SDK asks for."""
    async def scenario() -> bytes:
        url = f"wss://localhost:{ws_broker.admin_port}/$servicebus/websocket"
        async with aiohttp.ClientSession() as session, session.ws_connect(
                url, protocols=(subprotocol,), ssl=_client_ssl(ws_broker)) as ws:
            assert ws.protocol == subprotocol
            for part in (AMQP_SASL_HEADER[:3], AMQP_SASL_HEADER[3:5], AMQP_SASL_HEADER[5:]):
                await ws.send_bytes(part)
            received = b""
            while len(received) < len(AMQP_SASL_HEADER) + 8:  # the header, then the sasl-mechanisms frame
                message = await asyncio.wait_for(ws.receive(), 10)
                assert message.type == aiohttp.WSMsgType.BINARY, message
                received += message.data
            return received

    received = asyncio.run(scenario())
    assert received.startswith(AMQP_SASL_HEADER)
    assert received[len(AMQP_SASL_HEADER) + 5] == 1  # the frame after the header is a SASL frame (type 1)


def test_the_endpoint_refuses_what_is_not_amqp_over_websockets(ws_broker: BrokerProcess) -> None:
    async def scenario() -> None:
        base = f"https://localhost:{ws_broker.admin_port}/$servicebus/websocket"
        async with aiohttp.ClientSession() as session:
            # No upgrade: a plain GET is refused, with the Service Bus error body.
            async with session.get(base, ssl=_client_ssl(ws_broker)) as response:
                assert response.status == 400
                assert "AMQPWSB10" in await response.text()
            # An upgrade without the AMQP subprotocol is refused before it happens.
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(base.replace("https", "wss"), protocols=("chat",), ssl=_client_ssl(ws_broker))
            assert refused.value.status == 400
            # Text instead of binary closes the WebSocket as unsupported data.
            async with session.ws_connect(base.replace("https", "wss"), protocols=("AMQPWSB10",),
                                          ssl=_client_ssl(ws_broker)) as ws:
                await ws.send_str("AMQP")
                message = await asyncio.wait_for(ws.receive(), 10)
                assert message.type == aiohttp.WSMsgType.CLOSE
                assert message.data == aiohttp.WSCloseCode.UNSUPPORTED_DATA

    asyncio.run(scenario())
