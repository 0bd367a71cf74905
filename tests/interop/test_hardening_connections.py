"""Connections before and without authentication (issue 13.13), with small configured limits.

A broker of this module's own runs with a 2 s handshake deadline, at most 4 connections, 4 sessions and
8 links per connection. Raw sockets and the raw AMQP client play the misbehaving peers (the SDK cannot
stall a handshake or open a hundred links); the official SDK checks the broker still serves afterwards.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusConnectionError
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER, SENDER
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

LIMIT_ARGS = ["--handshake-timeout", "2", "--auth-timeout", "30", "--max-connections", "4",
              "--max-sessions-per-connection", "4", "--max-links-per-connection", "8"]


@pytest.fixture(scope="module")
def limited_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("hardening-connections")
    config = write_config(base / "Config.json", [{"Name": "limits", "Properties": {}}])
    process = BrokerProcess(base / "data", config, extra_args=LIMIT_ARGS).start()
    yield process
    process.stop()


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True once the broker closes ``sock`` (EOF or reset), reading and discarding what it sends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def _send_one(broker: BrokerProcess, body: str) -> None:
    """The broker serves again: a send succeeds within 30 s (the peers a test let go may still be
    closing, and count against the connection limit until they are gone)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client, \
                    client.get_queue_sender("limits") as sender:
                sender.send_messages(ServiceBusMessage(body))
            return
        except ServiceBusConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_a_connection_that_never_finishes_its_handshake_is_closed(limited_broker: BrokerProcess) -> None:
    silent = socket.create_connection(("127.0.0.1", limited_broker.port))
    stalled = socket.create_connection(("127.0.0.1", limited_broker.port))
    try:
        stalled.sendall(b"AMQP\x03\x01\x00\x00")  # the SASL header, then nothing
        assert _closed_within(silent, 30)
        assert _closed_within(stalled, 30)
    finally:
        silent.close()
        stalled.close()
    _send_one(limited_broker, "after stalled handshakes")


def test_connections_past_the_limit_are_refused_with_a_clear_error(limited_broker: BrokerProcess) -> None:
    """Four authenticated connections fill the limit (unauthenticated ones have a smaller allowance of
    their own and give way: tests/interop/test_hardening_authentication.py)."""
    held = [RawClient(limited_broker.port) for _ in range(4)]
    try:
        for client in held:
            client.wait(lambda e: isinstance(e, ev.SessionBegun))
            expires = int(time.time()) + 3600
            assert client.put_token("sb://localhost/", generate_token("sb://localhost/", KEY_NAME, KEY, expires),
                                    expires * 1000) == 202
        extra = RawClient(limited_broker.port)
        try:
            closed = extra.wait(lambda e: isinstance(e, ev.ConnectionClosed), timeout=30)
            assert isinstance(closed, ev.ConnectionClosed) and closed.error is not None
            assert closed.error.condition == "amqp:resource-limit-exceeded"
            assert "limit of 4 connections" in (closed.error.description or "")
        finally:
            extra.sock.close()
    finally:
        for client in held:
            client.close()
    _send_one(limited_broker, "after the connection storm")  # the slots came back


def test_sessions_per_connection_are_limited(limited_broker: BrokerProcess) -> None:
    client = RawClient(limited_broker.port)  # its first session
    try:
        client.wait(lambda e: isinstance(e, ev.SessionBegun))
        for _ in range(3):
            client.conn.begin()
        client.flush()
        begun = 0
        while begun < 3:
            client.wait(lambda e: isinstance(e, ev.SessionBegun))
            begun += 1
        client.conn.begin()  # a fifth
        closed = client.wait(lambda e: isinstance(e, ev.ConnectionClosed), timeout=30)
        assert isinstance(closed, ev.ConnectionClosed) and closed.error is not None
        assert closed.error.condition == "amqp:resource-limit-exceeded"
    finally:
        client.sock.close()


def test_links_per_connection_are_limited_even_before_authentication(limited_broker: BrokerProcess) -> None:
    client = RawClient(limited_broker.port)  # no put-token: $cbs and transaction coordinators need none
    try:
        # One $cbs pair (a second link in the same role would be refused as not allowed, as Service Bus
        # refuses it), then transaction coordinators up to the limit.
        assert client.attach("$cbs", RECEIVER).state == "attached"
        assert client.attach("$cbs", SENDER).state == "attached"
        for _ in range(6):
            assert client.coordinator().state == "attached"
        refused = client.coordinator()
        detached = client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is refused)
        assert isinstance(detached, ev.LinkDetached) and detached.error is not None
        assert detached.error.condition == "amqp:resource-limit-exceeded"
        assert "at most 8 links" in (detached.error.description or "")
    finally:
        client.close()
    _send_one(limited_broker, "after the link flood")


def test_running_out_of_file_descriptors_is_reported_once_per_interval(limited_broker: BrokerProcess) -> None:
    assert limited_broker.proc is not None
    pid = limited_broker.proc.pid
    open_fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    try:
        soft = subprocess.run(["prlimit", f"--pid={pid}", "--nofile", "--output=SOFT", "--noheadings"],
                              check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={open_fds + 3}:"], check=True)  # the soft limit
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot lower the broker's file-descriptor limit: {exc}")
    before = len(limited_broker.output)
    flood = []

    def reported() -> list[str]:
        return [line for line in limited_broker.output[before:] if "accept" in line and (
            "resource" in line or "descriptor" in line or "Too many open files" in line)]

    try:
        for _ in range(40):
            flood.append(socket.create_connection(("127.0.0.1", limited_broker.port)))
        deadline = time.monotonic() + 30  # the first failed accept is reported at once
        while not reported() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # then about three more failed rounds (asyncio retries every second), not reported
    finally:
        for sock in flood:
            sock.close()
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={soft}:"], check=True)
    lines = limited_broker.output[before:]
    reports = reported()
    assert 1 <= len(reports) <= 2, "".join(lines[-40:])
    assert not any("Traceback" in line for line in lines)
    _send_one(limited_broker, "after running out of descriptors")
