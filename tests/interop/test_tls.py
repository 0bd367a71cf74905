"""AMQP over TLS (amqps): the official SDK dials TLS-on-connect with the broker's certificate trusted.

The SDK drops any port from a TLS endpoint and dials 5671 (sdk-wire-contract.md 1.1), so a test broker
on a free port is reached with ``custom_endpoint_address`` and ``transport_type=TransportType.Amqp``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import ServiceBusConnectionError
from broker_process import BrokerProcess, write_config

from sodalite.admin.tls import ensure_certificate

pytestmark = pytest.mark.interop

QUEUES: list[dict[str, Any]] = [{"Name": name, "Properties": {}}
                                for name in ("tls-sync", "tls-aio", "tls-isolation", "tls-own")]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("tls")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _tls_options(broker: BrokerProcess, **extra: Any) -> dict[str, Any]:
    return {"custom_endpoint_address": f"sb://localhost:{broker.amqps_port}",
            "transport_type": TransportType.Amqp, **extra}


def _round_trip(broker: BrokerProcess, queue: str, body: str) -> str:
    with ServiceBusClient.from_connection_string(broker.amqps_connection_string,
                                                 **_tls_options(broker, connection_verify=broker.tls_certificate)
                                                 ) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver(queue) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(message)
            return str(message)


def _plain_amqp_answer(port: int) -> bytes:
    """What a plain AMQP client hears from the TLS port before it is closed (at most a TLS alert)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
        plain.sendall(b"AMQP\x03\x01\x00\x00")
        try:
            while chunk := plain.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


def test_printed_amqps_connection_string_is_the_ordinary_one(tls_broker: BrokerProcess) -> None:
    # No emulator flag and no port: the SDK dials TLS; the certificate is the generated one.
    assert tls_broker.amqps_connection_string.startswith("Endpoint=sb://localhost/;")
    assert "UseDevelopmentEmulator" not in tls_broker.amqps_connection_string
    assert tls_broker.tls_certificate == str(tls_broker.data_dir / "admin-cert.pem")
    assert tls_broker.amqps_port not in (0, tls_broker.port)


def test_sync_sdk_sends_and_receives_over_amqps(tls_broker: BrokerProcess) -> None:
    assert _round_trip(tls_broker, "tls-sync", "over tls") == "over tls"


def test_aio_sdk_sends_and_receives_over_amqps(tls_broker: BrokerProcess) -> None:
    async def scenario() -> str:
        options = _tls_options(tls_broker, connection_verify=tls_broker.tls_certificate)
        client = AsyncServiceBusClient.from_connection_string(tls_broker.amqps_connection_string, **options)
        async with client:
            async with client.get_queue_sender("tls-aio") as sender:
                await sender.send_messages(ServiceBusMessage("aio over tls"))
            async with client.get_queue_receiver("tls-aio") as receiver:
                [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
                await receiver.complete_message(message)
                return str(message)

    assert asyncio.run(scenario()) == "aio over tls"


def test_failed_handshakes_close_only_their_own_connection(tls_broker: BrokerProcess) -> None:
    # A client that does not trust the certificate fails its own handshake...
    with ServiceBusClient.from_connection_string(tls_broker.amqps_connection_string,
                                                 **_tls_options(tls_broker, retry_total=0)) as client:
        with pytest.raises(ServiceBusConnectionError, match="CERTIFICATE_VERIFY_FAILED"), \
                client.get_queue_sender("tls-isolation") as sender:
            sender.send_messages(ServiceBusMessage("never"))
    # ...and so does one speaking plain AMQP to the TLS port: the broker just closes that socket.
    assert not _plain_amqp_answer(tls_broker.amqps_port).startswith(b"AMQP")
    # A trusting client still works, over TLS and over plain AMQP, and the broker is still up.
    assert _round_trip(tls_broker, "tls-isolation", "still serving") == "still serving"
    with ServiceBusClient.from_connection_string(tls_broker.connection_string) as client:
        with client.get_queue_sender("tls-isolation") as sender:
            sender.send_messages(ServiceBusMessage("plain too"))
    assert tls_broker.proc is not None and tls_broker.proc.poll() is None


def test_operator_certificate_is_served(tmp_path: Path) -> None:
    # Any PEM pair will do; one generated into another directory stands in for the operator's own.
    cert, key = ensure_certificate(tmp_path)
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES),
                            extra_args=["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        process.start()
        assert process.tls_certificate == str(cert)
        served = ssl.get_server_certificate(("127.0.0.1", process.amqps_port))
        assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(cert.read_text())
        assert _round_trip(process, "tls-own", "own certificate") == "own certificate"
    finally:
        process.stop()
