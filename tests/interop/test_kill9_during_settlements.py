"""kill -9 in the middle of a stream of completes: no acknowledged send lost, no acknowledged complete redelivered.

Two queues (one plain, one partitioned) each get N messages with distinct MessageIds through the official SDK;
every acknowledged send is recorded. Receivers in PeekLock (async SDK, in threads) then complete each received
batch concurrently, and the test SIGKILLs the broker once enough completes were acknowledged on both queues (the
kill is triggered by those counts, not by a sleep), at a moment when batches of completes are in flight. After
a restart on the same data directory everything left is drained and counted:

1. every acknowledged send is either acknowledged-completed before the kill, received after the restart, or
   its complete was in flight (raised) at the kill (the broker may or may not have applied that one);
2. no message whose complete was acknowledged before the kill is delivered again;
3. nothing is received after the restart that was never sent, and nothing is received twice.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from broker_process import BrokerProcess, write_config

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

PLAIN = "k9s-plain"
PARTITIONED = "k9s-partitioned"
COUNT = 3000  # messages per queue
KILL_AT = 500  # acknowledged completes per queue before the kill is triggered
RECEIVERS_PER_QUEUE = 2
LOCK_SECONDS = 5.0
PHASE_SECONDS = 180.0  # bound of each phase


@dataclass
class Settled:
    """What the completer threads of one queue saw, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: list[str] = field(default_factory=list)  # complete_message returned
    raised: list[str] = field(default_factory=list)  # complete_message raised (in flight at the kill)
    received: set[str] = field(default_factory=set)  # delivered before the kill (complete attempted or not)
    errors: list[str] = field(default_factory=list)
    in_flight: int = 0  # completes sent and not yet answered

    def busy(self) -> bool:
        with self.lock:
            return self.in_flight > 0

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)


def _client(process: BrokerProcess) -> ServiceBusClient:
    # No SDK retries: after the kill a settle must fail promptly rather than retry into the void.
    return ServiceBusClient.from_connection_string(process.connection_string, retry_total=0)


def _send_all(process: BrokerProcess, queue: str) -> set[str]:
    acknowledged: set[str] = set()
    with _client(process) as client, client.get_queue_sender(queue) as sender:
        for start in range(0, COUNT, 100):
            ids = [f"{queue}-{i:05d}" for i in range(start, start + 100)]
            sender.send_messages([ServiceBusMessage(f"body {mid}", message_id=mid) for mid in ids])
            acknowledged.update(ids)  # send_messages returned: the whole batch is acknowledged
    return acknowledged


def _complete_until_failure(process: BrokerProcess, queue: str, settled: Settled, stop: threading.Event) -> None:
    asyncio.run(_complete_batches(process, queue, settled, stop))


async def _complete_batches(process: BrokerProcess, queue: str, settled: Settled, stop: threading.Event) -> None:
    """Receive up to 20 messages, complete them all at once (a batch of settlements in flight), repeat."""
    deadline = time.monotonic() + PHASE_SECONDS
    try:
        async with AsyncServiceBusClient.from_connection_string(process.connection_string, retry_total=0) as client, \
                client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                                          prefetch_count=0) as receiver:
            while not stop.is_set() and time.monotonic() < deadline:
                batch = await receiver.receive_messages(max_message_count=20, max_wait_time=2)
                with settled.lock:
                    settled.received.update(str(m.message_id) for m in batch)
                    settled.in_flight += len(batch)
                results = await asyncio.gather(*(receiver.complete_message(m) for m in batch),
                                               return_exceptions=True)
                failed = False
                with settled.lock:
                    settled.in_flight -= len(batch)
                    for message, result in zip(batch, results, strict=True):
                        if isinstance(result, BaseException):  # the broker died under this complete
                            settled.raised.append(str(message.message_id))
                            settled.errors.append(type(result).__name__)
                            failed = True
                        else:
                            settled.acknowledged.append(str(message.message_id))
                if failed:
                    return
    except Exception as error:  # a receive or the close failed after the kill
        with settled.lock:
            settled.errors.append(type(error).__name__)


def _drain(process: BrokerProcess, queue: str, restarted_at: float) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + PHASE_SECONDS
    with _client(process) as client, client.get_queue_receiver(
            queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=0) as receiver:
        while time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=2)
            if not batch:
                if time.monotonic() - restarted_at > LOCK_SECONDS + 2:  # any lock from before had time to lapse
                    break
                continue
            for message in batch:
                got.append(str(message.message_id))
                receiver.complete_message(message)
        else:
            pytest.fail(f"{queue}: drain did not finish within {PHASE_SECONDS}s ({len(got)} received)")
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = dlq.peek_messages(max_message_count=10)
            assert dead == [], f"{queue}: dead-lettered after restart: {[m.message_id for m in dead]}"
    return got


def test_kill_9_during_completes_loses_no_send_and_redelivers_no_complete(tmp_path: Path) -> None:
    properties = {"LockDuration": "PT5S", "MaxDeliveryCount": 100}
    config = write_config(tmp_path / "Config.json", [
        {"Name": PLAIN, "Properties": properties},
        {"Name": PARTITIONED, "Properties": {**properties, "EnablePartitioning": True}},
    ])
    process = BrokerProcess(tmp_path / "data", config)
    try:
        _run(process)
    finally:
        process.stop()


def _run(process: BrokerProcess) -> None:
    process.start()
    queues = [PLAIN, PARTITIONED]
    sent = {queue: _send_all(process, queue) for queue in queues}
    assert all(len(ids) == COUNT for ids in sent.values())

    settled = {queue: Settled() for queue in queues}
    stop = threading.Event()
    threads = [threading.Thread(target=_complete_until_failure, args=(process, queue, settled[queue], stop),
                                daemon=True)
               for queue in queues for _ in range(RECEIVERS_PER_QUEUE)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PHASE_SECONDS
    while any(settled[q].count() < KILL_AT for q in queues) and time.monotonic() < deadline:
        if not any(thread.is_alive() for thread in threads):
            break
        time.sleep(0.005)
    assert all(settled[q].count() >= KILL_AT for q in queues), \
        f"completes did not reach {KILL_AT} per queue: {[(q, settled[q].count(), settled[q].errors) for q in queues]}"
    # Kill while completes are in flight on both queues if that happens within a few seconds (it is not asserted).
    busy_deadline = time.monotonic() + 10
    while not all(settled[q].busy() for q in queues) and time.monotonic() < busy_deadline:
        time.sleep(0.001)
    in_flight_at_kill = {q: settled[q].in_flight for q in queues}
    process.kill()
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a completer thread did not stop after the kill"

    process.start()
    restarted_at = time.monotonic()
    for queue in queues:
        s = settled[queue]
        acknowledged = set(s.acknowledged)
        raised = set(s.raised)
        after = _drain(process, queue, restarted_at)
        after_set = set(after)
        print(f"{queue}: sent {len(sent[queue])}, completes acknowledged before the kill {len(s.acknowledged)}, "
              f"in flight at the kill {in_flight_at_kill[queue]}, raised {len(raised)}, "
              f"received after restart {len(after)}, "
              f"of those redelivered (delivered before the kill) {len(after_set & s.received)}, "
              f"in-flight completes that came back {len(after_set & raised)}")
        assert len(s.acknowledged) == len(acknowledged), f"{queue}: a complete was acknowledged twice"
        assert acknowledged <= sent[queue]
        # The kill landed mid-run: some completes acknowledged before it, some messages left after it.
        assert 0 < len(acknowledged) < COUNT and after, f"{queue}: the kill did not land mid-run"
        # (3) nothing unknown, nothing twice.
        assert after_set <= sent[queue], f"{queue}: never sent: {sorted(after_set - sent[queue])[:20]}"
        duplicates = sorted(mid for mid, n in Counter(after).items() if n > 1)
        assert not duplicates, f"{queue}: received twice after restart: {duplicates[:20]}"
        # (2) no acknowledged complete comes back.
        redelivered = sorted(acknowledged & after_set)
        assert not redelivered, f"{queue}: {len(redelivered)} acknowledged completes redelivered: {redelivered[:20]}"
        # (1) no acknowledged send is lost; only a complete in flight at the kill may have taken effect unseen.
        lost = sorted(sent[queue] - acknowledged - after_set - raised)
        assert not lost, f"{queue}: {len(lost)} acknowledged sends lost: {lost[:20]}"
