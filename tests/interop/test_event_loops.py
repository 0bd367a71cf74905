"""The broker serves the official SDK alike on asyncio's own loop and on uvloop (cli/event_loop.py):
send, receive in PeekLock, complete, and nothing left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_broker(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("SODALITE_EVENT_LOOP", request.param)
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [{"Name": "loops"}]),
                            extra_args=["--log-level", "INFO"])
    try:
        process.start()
        assert f"event loop: {request.param}" in "".join(process.output)
        yield process.connection_string
    finally:
        process.stop()


def test_send_receive_complete_on_either_loop(loop_broker: str) -> None:
    with ServiceBusClient.from_connection_string(loop_broker) as client:
        with client.get_queue_sender("loops") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(50)])
        got: list[str] = []
        with client.get_queue_receiver("loops", max_wait_time=5, prefetch_count=20) as receiver:
            while len(got) < 50:
                batch = receiver.receive_messages(max_message_count=20, max_wait_time=5)
                assert batch, f"only {len(got)} of 50 received"
                for message in batch:
                    got.append(str(message))
                    receiver.complete_message(message)
        assert sorted(got) == sorted(f"m{i}" for i in range(50))
        with client.get_queue_receiver("loops", max_wait_time=1) as receiver:
            assert receiver.receive_messages(max_message_count=10, max_wait_time=1) == []
