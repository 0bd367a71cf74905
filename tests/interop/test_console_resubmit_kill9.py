"""Resubmit is atomic under kill -9: every message ends up exactly once in the DLQ or in the target.

10,000 messages are dead-lettered (delivered once to a receiver that settles none of them, on a
queue with MaxDeliveryCount 1), then resubmitted to another queue through the JSON API. The broker
is killed with SIGKILL while the resubmit runs; after a restart every MessageId is counted in the
dead-letter queue and in the target, and each is found exactly once. A second resubmit then
finishes the job, again without a loss or a double.

Why the messages are dead-lettered by delivery, not by expiry: a message dead-lettered for its
time-to-live keeps that time-to-live, and a resubmitted copy carries it into the target, where it
would expire again while the test counts it. Every message is delivered exactly once (a lock runs
from the transfer, so none lapses unseen while its claim commits), and the claims of a receive are
stored together, so the receive of 10,000 is a matter of seconds.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from sodalite.model import sas

TOTAL = 10_000
SOURCE, TARGET = "kill-source", "kill-target"
QUEUES = [{"Name": SOURCE, "Properties": {"MaxDeliveryCount": 1, "LockDuration": "PT5S"}},
          {"Name": TARGET, "Properties": {}}]
BOUND = 240.0  # seconds: a generous bound for each phase, not a timing claim (the receive of 10,000
# takes about 5 s alone; it took over 120 s under load while the broker stored each claim in an
# op of its own, and a claim commit that outlasted the 5 s lock used to dead-letter messages unsent)


def call(broker: BrokerProcess, method: str, path: str, body: dict[str, Any] | None = None,
         timeout: float = 60.0) -> Any:
    token = sas.generate_token("sb://localhost/", KEY_NAME, KEY, int(time.time()) + 3600)
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}/api/v1{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def counts(broker: BrokerProcess) -> dict[str, dict[str, int]]:
    return {e["path"]: e["counts"] for e in call(broker, "GET", "/entities")}


def message_ids(broker: BrokerProcess, path: str, sub_queue: str) -> list[str]:
    found: list[str] = []
    start = 0
    while True:
        page = call(broker, "GET", f"/entities/{path}/$messages?subQueue={sub_queue}&count=100"
                                   f"&fromSequenceNumber={start}")
        found += [m["messageId"] for m in page["messages"]]
        if page["nextSequenceNumber"] is None:
            return found
        start = page["nextSequenceNumber"]


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def dead_letter_everything(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(SOURCE) as sender:
            for start in range(0, TOTAL, 500):
                batch = sender.create_message_batch()
                for i in range(start, start + 500):
                    batch.add_message(ServiceBusMessage(f"body {i}", message_id=f"k{i}",
                                                        application_properties={"i": i}))
                sender.send_messages(batch)
        # Delivered once and never settled: each goes to the dead-letter queue (MaxDeliveryCount 1)
        # when its lock ends. Each is delivered exactly once: a lock runs from the transfer, so none
        # lapses (and is dead-lettered unseen) while its claim commits.
        with client.get_queue_receiver(SOURCE, prefetch_count=1000) as receiver:
            got = 0
            deadline = time.monotonic() + BOUND
            while got < TOTAL and time.monotonic() < deadline:
                got += len(receiver.receive_messages(max_message_count=1000, max_wait_time=5))
            assert got == TOTAL
    wait_until(lambda: counts(broker)[SOURCE]["deadLetter"] == TOTAL, "every message in the dead-letter queue")


def assert_each_exactly_once(broker: BrokerProcess) -> tuple[int, int]:
    dead = message_ids(broker, SOURCE, "deadletter")
    moved = message_ids(broker, TARGET, "active")
    assert len(dead) + len(moved) == TOTAL, (len(dead), len(moved))
    assert sorted(dead + moved, key=lambda m: int(m[1:])) == [f"k{i}" for i in range(TOTAL)]
    return len(dead), len(moved)


@pytest.mark.timeout(900)  # several phases, each bounded by BOUND
def test_a_resubmit_killed_midway_loses_and_doubles_nothing(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES)).start()
    try:
        dead_letter_everything(broker)
        outcome: list[Any] = []

        def resubmit() -> None:
            try:
                outcome.append(call(broker, "POST", f"/entities/{SOURCE}/$move",
                                    {"all": True, "subQueue": "deadletter", "target": TARGET}, timeout=BOUND))
            except (urllib.error.URLError, ConnectionError, OSError) as exc:  # the kill cuts it off
                outcome.append(exc)

        mover = threading.Thread(target=resubmit)
        mover.start()
        wait_until(lambda: bool(outcome) or counts(broker)[TARGET]["active"] > 0, "the resubmit to start")
        broker.kill()
        mover.join(BOUND)

        broker.start()
        dead, moved = assert_each_exactly_once(broker)
        assert moved > 0  # the kill came after the resubmit had begun
        print(f"killed with {dead} in the dead-letter queue and {moved} in the target")

        # Finish the job: nothing lost, nothing doubled.
        result = call(broker, "POST", f"/entities/{SOURCE}/$move",
                      {"all": True, "subQueue": "deadletter", "target": TARGET}, timeout=BOUND)
        assert result["moved"] == dead
        assert assert_each_exactly_once(broker) == (0, TOTAL)
    finally:
        broker.stop()
