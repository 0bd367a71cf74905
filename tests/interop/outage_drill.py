"""The outage drill shared by the tests and benchmarks/outage.py: two real brokers, a steady send load
through the client library, the primary killed (SIGKILL) and restarted, everything measured.

One sender thread sends single messages (MessageIds ``d0``, ``d1``, ...) as fast as the library
lets it; a send that raises is retried with the same message, as an application would. A monitor
thread notes when the library fails back to the primary. Afterwards the stored copies are counted
in both brokers and drained through the library's receiver (replication) or a plain SDK receiver
behind a ``DuplicateFilter`` (paired namespaces: the syphon moves the backlog back first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from replication_ports import with_stable_ports

from sodalite.client import (
    DuplicateFilter,
    PairedNamespaceClient,
    PairedNamespaceOptions,
    ReplicatedClient,
    ReplicationMode,
)
from sodalite.client import backlog as bl

QUEUE = "drill"
PRIMARY_NAMESPACE = "drillns"
# The application's SDK retry options: the SDK's defaults, as a new user leaves them.
APP_KWARGS: dict[str, Any] = {}


@dataclass
class Phases:
    before: float = 5.0  # seconds of healthy load
    during: float = 10.0  # seconds the primary is down
    after: float = 8.0  # seconds of load after the restart
    failover_interval: float = 3.0  # paired namespaces
    ping_interval: float = 1.0  # paired namespaces' ping; replication's probe (retry_interval)
    attempt_timeout: float = 2.0  # replication: a namespace in doubt


@dataclass
class Report:
    mode: str
    sent: int = 0
    failed_calls: int = 0
    durations: list[tuple[float, float, bool]] = field(default_factory=list)  # (start, seconds, ok)
    killed_at: float = 0.0
    restarted_at: float = 0.0
    ended_at: float = 0.0
    started_at: float = 0.0
    failover_at: float | None = None  # first send accepted after the kill
    failback_at: float | None = None  # the library sends to the primary again
    close_seconds: float = 0.0
    stored: dict[str, int] = field(default_factory=dict)
    delivered: int = 0
    distinct: int = 0
    lost: int = 0
    let_through: int = 0
    single_copy_sends: int = 0

    def rate(self, start: float, end: float) -> float:
        ok = sum(1 for began, took, good in self.durations if good and start <= began + took <= end)
        return ok / (end - start) if end > start else 0.0

    @property
    def before_rate(self) -> float:
        return self.rate(self.started_at, self.killed_at)

    @property
    def during_rate(self) -> float:
        return self.rate(self.failover_at or self.killed_at, self.restarted_at)

    @property
    def after_rate(self) -> float:
        return self.rate(self.failback_at or self.restarted_at, self.ended_at)

    @property
    def longest_send(self) -> float:
        return max((took for _, took, _ in self.durations), default=0.0)

    @property
    def time_to_failover(self) -> float | None:
        return None if self.failover_at is None else self.failover_at - self.killed_at

    @property
    def time_to_failback(self) -> float | None:
        return None if self.failback_at is None else self.failback_at - self.restarted_at

    @property
    def duplicates_stored(self) -> int:
        return sum(self.stored.values()) - self.distinct

    def lines(self) -> list[str]:
        def opt(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.2f} s"
        return [
            f"{self.mode}: {self.sent} messages acknowledged, {self.failed_calls} send calls raised",
            f"  sends/s before {self.before_rate:.0f}, during {self.during_rate:.0f}, after {self.after_rate:.0f}",
            f"  longest single send {self.longest_send:.2f} s; failover after {opt(self.time_to_failover)}, "
            f"fail back after {opt(self.time_to_failback)}",
            f"  stored copies {self.stored}; distinct {self.distinct}; duplicates stored {self.duplicates_stored}; "
            f"let through by the receiver {self.let_through}; lost {self.lost}; single-copy sends "
            f"{self.single_copy_sends}",
            f"  close {self.close_seconds:.2f} s",
        ]


def start_pair(base: Path, paired: bool) -> tuple[BrokerProcess, BrokerProcess]:
    queues = [{"Name": QUEUE, "Properties": {"LockDuration": "PT30S", "MaxDeliveryCount": 50}}]
    brokers = []
    for name in ("primary", "secondary"):
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        config = write_config(folder / "Config.json", [] if paired and name == "secondary" else queues)
        brokers.append(with_stable_ports(BrokerProcess(folder / "data", config)))
    for broker in brokers:
        broker.start()
    return brokers[0], brokers[1]


def _peek_count(connection_string: str, queue: str) -> int:
    count = 0
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            while batch := receiver.peek_messages(max_message_count=250):
                count += len(batch)
    return count


class _Load:
    """The sender thread: single messages, each retried until it is acknowledged."""

    def __init__(self, send: Callable[[ServiceBusMessage], None], report: Report) -> None:
        self._send = send
        self.report = report
        self.stop = threading.Event()
        self.acknowledged: list[str] = []
        self.thread = threading.Thread(target=self._run, name="drill-load", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            message_id = f"d{i}"
            while not self.stop.is_set():
                began = time.monotonic()
                try:
                    self._send(ServiceBusMessage(f"body {i}", message_id=message_id))
                except Exception:
                    self.report.durations.append((began, time.monotonic() - began, False))
                    self.report.failed_calls += 1
                    time.sleep(0.05)
                    continue
                done = time.monotonic()
                self.report.durations.append((began, done - began, True))
                if self.report.killed_at and self.report.failover_at is None and began >= self.report.killed_at:
                    self.report.failover_at = done
                self.acknowledged.append(message_id)
                break
            i += 1


def run(mode: str, primary: BrokerProcess, secondary: BrokerProcess, phases: Phases,
        on_close: Callable[[], None] | None = None) -> Report:
    """One drill: ``mode`` is "active", "passive" or "paired"."""
    report = Report(mode)
    client: Any
    if mode == "paired":
        options = PairedNamespaceOptions(
            secondary_connection_string=secondary.connection_string, backlog_queue_count=2,
            failover_interval=timedelta(seconds=phases.failover_interval),
            ping_primary_interval=timedelta(seconds=phases.ping_interval), enable_syphon=True,
            primary_namespace=PRIMARY_NAMESPACE, syphon_receive_wait=timedelta(minutes=15))
        client = PairedNamespaceClient(primary.connection_string, options,
                                       secondary_client_kwargs={"connection_verify": secondary.admin_certificate},
                                       **APP_KWARGS)
        sender = client.get_queue_sender(QUEUE)

        def back() -> bool:
            return not client.book.failed_over_entities()
    else:
        client = ReplicatedClient(primary.connection_string, secondary.connection_string,
                                  mode=ReplicationMode(mode), retry_interval=timedelta(seconds=phases.ping_interval),
                                  attempt_timeout=timedelta(seconds=phases.attempt_timeout), **APP_KWARGS)
        sender = client.get_queue_sender(QUEUE)

        def back() -> bool:
            return not client.availability.marked_pairs()

    load = _Load(sender.send_messages, report)
    try:
        report.started_at = time.monotonic()
        load.thread.start()
        time.sleep(phases.before)
        primary.kill()
        report.killed_at = time.monotonic()
        time.sleep(phases.during)
        primary.start()
        report.restarted_at = time.monotonic()
        while time.monotonic() - report.restarted_at < phases.after:
            if report.failback_at is None and mode != "passive" and back():
                report.failback_at = time.monotonic()
            time.sleep(0.02)
        report.ended_at = time.monotonic()
        load.stop.set()
        load.thread.join(60)
        report.sent = len(load.acknowledged)
        if mode == "paired":  # the syphon moves the backlog into the primary before the client closes
            deadline = time.monotonic() + 60
            names = bl.backlog_queue_names(PRIMARY_NAMESPACE, 2)
            while time.monotonic() < deadline and sum(_peek_count(secondary.connection_string, n) for n in names):
                time.sleep(0.5)
        if isinstance(client, ReplicatedClient):
            report.single_copy_sends = client.availability.single_copy_sends
    finally:
        load.stop.set()
        sender.close()
        began = time.monotonic()
        client.close()
        report.close_seconds = time.monotonic() - began
        if on_close is not None:
            on_close()
    _count_and_drain(mode, primary, secondary, load.acknowledged, report)
    return report


def _count_and_drain(mode: str, primary: BrokerProcess, secondary: BrokerProcess, acknowledged: list[str],
                     report: Report) -> None:
    report.stored = {"primary": _peek_count(primary.connection_string, QUEUE)}
    if mode == "paired":
        names = bl.backlog_queue_names(PRIMARY_NAMESPACE, 2)
        report.stored["backlog"] = sum(_peek_count(secondary.connection_string, n) for n in names)
    else:
        report.stored["secondary"] = _peek_count(secondary.connection_string, QUEUE)
    seen: list[str] = []
    if mode == "paired":
        duplicates = DuplicateFilter()
        with ServiceBusClient.from_connection_string(primary.connection_string) as plain:
            with plain.get_queue_receiver(QUEUE) as receiver:
                while batch := receiver.receive_messages(max_message_count=200, max_wait_time=3):
                    for m in batch:
                        receiver.complete_message(m)
                        if not duplicates.seen(str(m.message_id)):  # the application's filter
                            duplicates.record(str(m.message_id))
                            seen.append(str(m.message_id))
        duplicates.close()
        report.distinct = len(set(seen))
    else:
        # A receive that meets only second copies (completed quietly) returns nothing new: drain until
        # everything acknowledged came, or nothing new came for a while.
        wanted = set(acknowledged)
        with ReplicatedClient(primary.connection_string, secondary.connection_string) as client:
            with client.get_queue_receiver(QUEUE) as receiver:
                last_new = time.monotonic()
                while time.monotonic() - last_new < 15:
                    batch = receiver.receive_messages(max_message_count=200, max_wait_time=3)
                    for m in batch:
                        seen.append(str(m.message_id))
                        receiver.complete_message(m)
                    if batch:
                        last_new = time.monotonic()
                    elif wanted <= set(seen):
                        break
        report.distinct = len(set(seen))
    report.delivered = len(seen)
    report.let_through = len(seen) - len(set(seen))
    report.lost = len(set(acknowledged) - set(seen))
