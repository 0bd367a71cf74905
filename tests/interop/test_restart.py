"""Every message state survives kill -9: deferred, scheduled, dead-lettered, abandoned; locks do not."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
    ServiceBusSubQueue,
)
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUE = "restart"
SCHEDULE_AHEAD = 25.0  # seconds; the restart and the checks before the due time must fit in this


def _utc_in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def test_message_states_survive_kill_9_and_locks_do_not(tmp_path: Path) -> None:
    # A two-minute lock: if a lock taken before the kill survived it, the message could not come back in this test.
    config = write_config(tmp_path / "Config.json",
                          [{"Name": QUEUE, "Properties": {"LockDuration": "PT2M", "MaxDeliveryCount": 10}}])
    process = BrokerProcess(tmp_path / "data", config)
    try:
        _run(process)
    finally:
        process.stop()


def _run(process: BrokerProcess) -> None:
    process.start()
    bodies = ["locked", "deferred", "dead", "abandoned"]
    with ServiceBusClient.from_connection_string(process.connection_string) as client:
        with client.get_queue_sender(QUEUE) as sender:
            for body in bodies:
                sender.send_messages(ServiceBusMessage(body))
        seq: dict[str, int] = {}
        holder = client.get_queue_receiver(QUEUE)  # stays open, holding its lock, until the kill
        [locked] = holder.receive_messages(max_message_count=1, max_wait_time=10)
        assert str(locked) == "locked" and locked.sequence_number is not None
        seq["locked"] = locked.sequence_number
        with client.get_queue_receiver(QUEUE) as receiver:
            for expected in bodies[1:]:
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert str(m) == expected and m.sequence_number is not None
                seq[expected] = m.sequence_number
                if expected == "deferred":
                    receiver.defer_message(m)
                elif expected == "dead":
                    receiver.dead_letter_message(m, reason="bad-format", error_description="field x missing")
                else:
                    receiver.abandon_message(m)
            # Before the kill: the abandoned message is active again with its delivery count raised once.
            [abandoned] = receiver.peek_messages(max_message_count=1, sequence_number=seq["abandoned"])
            assert str(abandoned) == "abandoned" and abandoned.delivery_count == 1
        with client.get_queue_sender(QUEUE) as sender:
            due = _utc_in(SCHEDULE_AHEAD)
            [seq["scheduled"]] = sender.schedule_messages([ServiceBusMessage("scheduled")], due)
        assert len(set(seq.values())) == 5
        process.kill()  # "locked" is still locked by `holder`, whose connection dies with the broker
        try:
            holder.close()
        except Exception:
            pass  # its connection is gone; closing it may or may not complain

    process.start()
    with ServiceBusClient.from_connection_string(process.connection_string) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages(ServiceBusMessage("after"))
        with client.get_queue_receiver(QUEUE) as receiver:
            peeked = {m.sequence_number: m for m in receiver.peek_messages(max_message_count=20, sequence_number=1)}
            assert {str(m) for m in peeked.values()} == {"locked", "deferred", "abandoned", "scheduled", "after"}
            assert peeked[seq["deferred"]].state == ServiceBusMessageState.DEFERRED
            assert peeked[seq["scheduled"]].state == ServiceBusMessageState.SCHEDULED
            assert peeked[seq["abandoned"]].state == ServiceBusMessageState.ACTIVE
            assert peeked[seq["abandoned"]].delivery_count == 1
            assert peeked[seq["locked"]].state == ServiceBusMessageState.ACTIVE

            # The lock held at kill time is gone: "locked" comes back at once, not after its two minutes.
            started = time.monotonic()
            got: dict[str, ServiceBusReceivedMessage] = {}
            while len(got) < 3 and time.monotonic() - started < 10:
                for m in receiver.receive_messages(max_message_count=3, max_wait_time=5):
                    got[str(m)] = m
            assert sorted(got) == ["abandoned", "after", "locked"], f"received {sorted(got)}"
            # Sequence numbers keep increasing past every number handed out before the kill.
            after = got["after"].sequence_number
            assert after is not None and after > max(seq.values())
            assert got["abandoned"].sequence_number == seq["abandoned"]
            assert got["abandoned"].delivery_count == 1  # the abandon's count was persisted
            assert got["locked"].sequence_number == seq["locked"]
            for m in got.values():
                receiver.complete_message(m)

            # The scheduled message is not receivable before its time (and nothing else is active).
            assert (due - datetime.datetime.now(datetime.UTC)).total_seconds() > 2, "restart took too long to check"
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []

            [deferred] = receiver.receive_deferred_messages([seq["deferred"]])
            assert str(deferred) == "deferred" and deferred.sequence_number == seq["deferred"]
            receiver.complete_message(deferred)

        with client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [dead] = dlq.receive_messages(max_message_count=5, max_wait_time=10)
            assert str(dead) == "dead" and dead.sequence_number == seq["dead"]
            assert dead.dead_letter_reason == "bad-format"
            assert dead.dead_letter_error_description == "field x missing"
            dlq.complete_message(dead)
            assert dlq.receive_messages(max_message_count=5, max_wait_time=1) == []

        with client.get_queue_receiver(QUEUE) as receiver:
            remaining = (due - datetime.datetime.now(datetime.UTC)).total_seconds()
            assert remaining > 0, "the scheduled time passed before its early receive could be checked"
            time.sleep(max(0.0, remaining - 1))
            [scheduled] = receiver.receive_messages(max_message_count=5, max_wait_time=10)
            assert str(scheduled) == "scheduled" and scheduled.sequence_number == seq["scheduled"]
            assert datetime.datetime.now(datetime.UTC) >= due - datetime.timedelta(milliseconds=500)
            receiver.complete_message(scheduled)
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []
