"""Idle connections (issue 13, item 4; clarifications.md, 13).

The official SDK advertises no idle-timeout, and its sync sender stalls on a connection the broker
leaves silent: each send after a pause waited about 60 s. The broker sends an empty frame after a
few seconds of its own silence when the client asks for none, so a send after a 10 s pause is
prompt. A raw client on Sodalite's own AMQP layer checks the rest: the idle-timeout the broker
advertises, heartbeats at half of a client's idle-timeout, and the close of a silent connection.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import BrokerProcess, write_config

from sodalite.amqp import events as ev
from sodalite.amqp import framing
from sodalite.amqp.connection import Connection
from sodalite.amqp.sasl import SaslClientConfig

pytestmark = pytest.mark.interop

# Without broker frames each send stalled about 60 s (the SDK's socket_timeout). 30 s still tells that
# stall apart, and tolerates a machine loaded by the rest of the suite (a send once took 23 s there).
SEND_BOUND_S = 30.0
PAUSE_S = 10.0
SENDS = 3


@pytest.fixture(scope="module")
def idle_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("conformance-idle")
    config = write_config(base / "Config.json", [{"Name": "idle", "Properties": {}}])
    process = BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def test_sync_sender_sleeping_between_sends_never_stalls(idle_broker: BrokerProcess) -> None:
    """As the SDK's own send_large_messages_w_sleep: 100 KB messages, socket_timeout=60, logging on."""
    body = json.dumps({f"key_{i}": "A" * 1024 for i in range(100)})
    with ServiceBusClient.from_connection_string(idle_broker.connection_string, logging_enable=True) as client:
        with client.get_queue_sender("idle", socket_timeout=60) as sender:
            for i in range(SENDS):
                time.sleep(PAUSE_S)
                started = time.monotonic()
                sender.send_messages(ServiceBusMessage(body, message_id=f"idle-{i}"))
                assert time.monotonic() - started < SEND_BOUND_S, f"send {i} stalled"
        with client.get_queue_receiver("idle", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got: list[str] = []
            while len(got) < SENDS:
                batch = r.receive_messages(max_message_count=SENDS, max_wait_time=10)
                assert batch
                got.extend(str(m.message_id) for m in batch)
            assert got == [f"idle-{i}" for i in range(SENDS)]


class _Raw:
    """An AMQP connection on Sodalite's own layer that reports every frame it receives, heartbeats too."""

    def __init__(self, port: int, idle_timeout_ms: int | None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.conn = Connection(server=False, container_id="idle-probe", sasl_client=SaslClientConfig(),
                               hostname="localhost", idle_timeout_ms=idle_timeout_ms)
        self.conn.start()
        self.sock.sendall(self.conn.data_to_send())

    def read_until_open(self) -> ev.ConnectionOpened:
        while True:
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection before open"
            for event in self.conn.receive_data(data):
                if isinstance(event, ev.ConnectionOpened):
                    out = self.conn.data_to_send()
                    if out:
                        self.sock.sendall(out)
                    return event
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)

    def next_chunk(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        return self.sock.recv(65536)

    def close(self) -> None:
        self.sock.close()


def test_broker_advertises_an_idle_timeout_and_heartbeats_a_silent_client(idle_broker: BrokerProcess) -> None:
    raw = _Raw(idle_broker.port, idle_timeout_ms=None)
    try:
        opened = raw.read_until_open()
        assert opened.remote.idle_time_out and opened.remote.idle_time_out >= 120_000
        # the client asked for nothing: the broker still breaks its own silence within seconds
        assert raw.next_chunk(timeout=SEND_BOUND_S) == framing.HEARTBEAT
        assert raw.next_chunk(timeout=SEND_BOUND_S) == framing.HEARTBEAT
    finally:
        raw.close()


def test_broker_heartbeats_at_half_of_the_clients_idle_timeout(idle_broker: BrokerProcess) -> None:
    raw = _Raw(idle_broker.port, idle_timeout_ms=2_000)
    try:
        raw.read_until_open()
        beats = 0
        deadline = time.monotonic() + 30
        while beats < 3 and time.monotonic() < deadline:
            assert raw.next_chunk(timeout=SEND_BOUND_S) == framing.HEARTBEAT
            beats += 1
        assert beats == 3
    finally:
        raw.close()
