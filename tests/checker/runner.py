"""One checker run: a real broker (scripts/serve, SQLite store), concurrent clients using the official
Python SDK (sync threads and one asyncio client) doing random operations from a seed, faults from the
same seed, quiescent recounts, a final drain of the store, and the promise checks.

``run(RunSpec(seed=...))`` returns the history and its violations. Everything random comes from the
seed (each client and the fault thread have their own ``random.Random``); the interleaving of
threads and the broker's timing are not, so a run is a search, and the deterministic regression
scripts (tests/interop/test_checker_regressions.py) pin what a run found.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageNotFoundError,
    MessagingEntityNotFoundError,
    SessionLockLostError,
)
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from checker.history import FAIL, INFO, OK, Delivery, History, Op
from checker.promises import Violation, check_all
from checker.proxy import Proxy
from sodalite.model.sas import generate_token

FAULT_KINDS = ("kill9", "cut", "stall", "unauthenticated", "close-midstream", "lock-expiry", "store-offline")
PLAIN, SESSIONS, PARTITIONED, TARGET = "plain", "sess", "part", "target"
QUEUES = [
    {"Name": PLAIN, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 1000}},
    {"Name": SESSIONS, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 1000, "RequiresSession": True}},
    {"Name": PARTITIONED, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 1000, "EnablePartitioning": True}},
    {"Name": TARGET, "Properties": {"MaxDeliveryCount": 1000}},
]
SENDABLE = (PLAIN, PLAIN, SESSIONS, PARTITIONED)
UID = re.compile(rb"u\d+x\d+x\d+")
DEFINITE_FAILURES = (MessageLockLostError, SessionLockLostError, MessageNotFoundError, MessagingEntityNotFoundError)
HAS_TRACE = importlib.util.find_spec("sodalite.server.delivery_trace") is not None


@dataclass
class RunSpec:
    seed: int
    ops: int = 200  # client operations in all (faults not counted)
    clients: int = 4  # sync clients; one more asyncio client when async_client
    async_client: bool = True
    faults: tuple[str, ...] = FAULT_KINDS
    fault_every: float = 1.5  # mean seconds between faults
    phases: int = 2  # quiescent points (recounts) between phases
    defect: str | None = None  # SODALITE_TEST_DEFECT for the broker (test-only switches)
    strict: bool = False
    rad: bool = True  # ReceiveAndDelete receives (without the broker's trace they excuse losses up to their credit)
    admin: bool = True  # resubmit, move and purge through the JSON API
    save_failing: Path | None = None  # a folder: the history of a run with violations is written there
    broker_args: tuple[str, ...] = ()  # more `serve` options, e.g. ("--max-connections", "20")
    keep: Path | None = None  # where to leave the data directory and the history (None: a temporary one)


@dataclass
class RunResult:
    spec: RunSpec
    history: History
    violations: list[Violation]
    seconds: float
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def client_ops(self) -> int:
        return sum(op.kind not in ("fault", "recount") for op in self.history.ops)


class _Run:
    def __init__(self, spec: RunSpec, base: Path) -> None:
        self.spec, self.base = spec, base
        self.history = History(seed=spec.seed)
        self.lock = threading.Lock()
        self.remaining = 0
        self.stop_faults = threading.Event()
        self.faults: Counter[str] = Counter()
        self.trace_path = base / "trace.jsonl"
        extra = [*spec.broker_args, *(["--delivery-trace", str(self.trace_path)] if HAS_TRACE else [])]
        self.broker = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES), extra_args=extra)
        if spec.defect:
            os.environ["SODALITE_TEST_DEFECT"] = spec.defect
        try:
            self.broker.start()
        finally:
            os.environ.pop("SODALITE_TEST_DEFECT", None)
        self.proxy = Proxy(self.broker.port)
        self.counter = 0
        self.broker_lock = threading.Lock()

    # -- recording ---------------------------------------------------------------------------------------
    def record(self, op: Op) -> Op:
        with self.lock:
            return self.history.add(op)

    def take(self) -> bool:
        with self.lock:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            return True

    def uid(self, client: int) -> str:
        with self.lock:
            self.counter += 1
            return f"u{self.spec.seed}x{client}x{self.counter}"

    def connection_string(self, via_proxy: bool) -> str:
        port = self.proxy.port if via_proxy else self.broker.port
        return (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                "UseDevelopmentEmulator=true;")

    # -- faults ------------------------------------------------------------------------------------------
    def fault(self, name: str, detail: str = "") -> None:
        now = time.monotonic()
        self.faults[name] += 1
        self.record(Op(0, -1, "fault", start=now, end=now, result=OK, value=name, error=detail))

    def fault_loop(self, rng: random.Random) -> None:
        kinds = [k for k in self.spec.faults if k in ("kill9", "cut", "stall", "unauthenticated", "store-offline")]
        while kinds and not self.stop_faults.wait(rng.expovariate(1 / self.spec.fault_every)):
            kind = rng.choice(kinds)
            if kind == "kill9":
                with self.broker_lock:
                    self.broker.kill()
                    self.fault("kill9")
                    time.sleep(rng.uniform(0, 0.5))
                    self._restart()
            elif kind == "cut":
                self.fault("cut", f"{self.proxy.cut()} connections")
            elif kind == "stall":
                seconds = rng.uniform(0.5, 3)
                self.proxy.stall(seconds)
                self.fault("stall", f"{seconds:.1f}s")
            elif kind == "store-offline":
                seconds = rng.uniform(0.3, 2)
                with self.broker_lock:  # not across a kill -9
                    try:
                        self.api("POST", "/api/v1/stores/default/offline")
                    except Exception as exc:
                        self.fault("store-offline", f"refused: {exc!r}"[:200])
                        continue
                    self.fault("store-offline", f"{seconds:.1f}s")
                    time.sleep(seconds)
                    for _ in range(10):
                        try:
                            self.api("POST", "/api/v1/stores/default/online")
                            break
                        except Exception:
                            time.sleep(0.5)
            elif kind == "unauthenticated":
                count = rng.randint(1, 8)
                self.fault("unauthenticated", f"{count} connections")
                threading.Thread(target=self._unauthenticated, args=(count, rng.uniform(1, 5)), daemon=True).start()

    def _restart(self) -> None:
        if self.spec.defect:
            os.environ["SODALITE_TEST_DEFECT"] = self.spec.defect
        try:
            self.broker.start()
        finally:
            os.environ.pop("SODALITE_TEST_DEFECT", None)

    def _unauthenticated(self, count: int, hold: float) -> None:
        """Connections that send the AMQP header (SASL), then nothing: never authenticate."""
        sockets = []
        for _ in range(count):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", self.broker.port), timeout=2)
                s.sendall(b"AMQP\x03\x01\x00\x00")
                sockets.append(s)
        time.sleep(hold)
        for s in sockets:
            s.close()

    # -- clients -----------------------------------------------------------------------------------------
    def client_loop(self, client: int, rng: random.Random) -> None:
        deferred: list[tuple[str, int, str]] = []  # (queue, seq, uid) this client deferred
        sb = ServiceBusClient.from_connection_string(self.connection_string(via_proxy=rng.random() < 0.7),
                                                     retry_total=1, retry_backoff_factor=0.1)
        try:
            while self.take():
                action = rng.choices(
                    ["send", "batch", "duplicate", "schedule", "peeklock", "rad", "session", "deferred", "peek",
                     "admin"], [12, 6, 3, 3, 12, 5 if self.spec.rad else 0, 6, 3, 3, 2 if self.spec.admin else 0])[0]
                try:
                    getattr(self, "_" + action)(sb, client, rng, deferred)
                except Exception as exc:  # a failure outside an op's own record: the client starts again
                    self.record(Op(0, client, "client-error", start=time.monotonic(), end=time.monotonic(),
                                   result=INFO, error=repr(exc)[:200]))
                    sb.close()
                    sb = ServiceBusClient.from_connection_string(self.connection_string(via_proxy=True),
                                                                 retry_total=1, retry_backoff_factor=0.1)
        finally:
            with contextlib.suppress(Exception):
                sb.close()

    def _call(self, op: Op, fn: Any) -> Any:
        op.start = time.monotonic()
        try:
            value = fn()
            op.result = OK
            return value
        except DEFINITE_FAILURES as exc:
            op.result, op.error = FAIL, repr(exc)[:200]
        except Exception as exc:
            op.result, op.error = INFO, repr(exc)[:200]
        finally:
            op.end = time.monotonic()
            self.record(op)
        return None

    def _message(self, client: int, rng: random.Random, queue: str, message_id: str | None = None,
                 session: str | None = None) -> tuple[ServiceBusMessage, str, str | None, str | None]:
        uid = self.uid(client)
        key = None
        if queue == SESSIONS:
            session = session or f"s{rng.randint(0, 3)}"
        elif queue == PARTITIONED and rng.random() < 0.7:
            key = f"k{rng.randint(0, 5)}"
        message = ServiceBusMessage(uid, message_id=message_id or uid, session_id=session, partition_key=key,
                                    application_properties={"uid": uid})
        return message, uid, session, key

    def _send(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        queue = rng.choice(SENDABLE)
        message, uid, session, key = self._message(client, rng, queue)
        with sb.get_queue_sender(queue) as sender:
            op = Op(0, client, "send", queue, uids=(uid,), session=session, partition_key=key)
            self._call(op, lambda: sender.send_messages(message, timeout=10))
            if "close-midstream" in self.spec.faults and rng.random() < 0.1:
                # a sender closed while its send is in flight
                message2, uid2, s2, k2 = self._message(client, rng, queue, session=session)
                op2 = Op(0, client, "send", queue, uids=(uid2,), session=s2, partition_key=k2)
                self.fault("close-midstream", "sender")
                timer = threading.Timer(0.005, _quietly, args=(sender.close,))
                timer.start()
                self._call(op2, lambda: sender.send_messages(message2, timeout=10))
                timer.join()

    def _batch(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        queue = rng.choice(SENDABLE)
        session = f"s{rng.randint(0, 3)}" if queue == SESSIONS else None
        key = f"k{rng.randint(0, 5)}" if queue == PARTITIONED else None
        made = [self._message(client, rng, queue, session=session) for _ in range(rng.randint(2, 8))]
        if key is not None:
            for message, *_ in made:
                message.partition_key = key
        with sb.get_queue_sender(queue) as sender:
            op = Op(0, client, "send", queue, uids=tuple(m[1] for m in made), session=session, partition_key=key)
            self._call(op, lambda: sender.send_messages([m[0] for m in made], timeout=10))

    def _duplicate(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        """Two messages with one MessageId (no duplicate detection on these queues: two messages)."""
        message_id = f"dup{rng.randint(0, 20)}"
        with sb.get_queue_sender(PLAIN) as sender:
            for _ in range(2):
                message, uid, _s, _k = self._message(client, rng, PLAIN, message_id=message_id)
                op = Op(0, client, "send", PLAIN, uids=(uid,))
                self._call(op, lambda m=message: sender.send_messages(m, timeout=10))

    def _schedule(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        queue = rng.choice((PLAIN, PARTITIONED))
        made = [self._message(client, rng, queue) for _ in range(rng.randint(1, 3))]
        when = datetime.now(UTC) + timedelta(seconds=rng.uniform(0.5, 4))
        with sb.get_queue_sender(queue) as sender:
            op = Op(0, client, "schedule", queue, uids=tuple(m[1] for m in made))
            numbers = self._call(op, lambda: sender.schedule_messages([m[0] for m in made], when, timeout=10))
            if numbers is not None:
                op.value = list(numbers)
                if rng.random() < 0.4:
                    chosen = rng.sample(range(len(numbers)), rng.randint(1, len(numbers)))
                    cancel = Op(0, client, "cancel_scheduled", queue, uids=tuple(made[i][1] for i in chosen))
                    self._call(cancel, lambda: sender.cancel_scheduled_messages([numbers[i] for i in chosen],
                                                                                timeout=10))

    def _deliveries(self, messages: list[Any], queue: str, mode: str, sub: str = "") -> tuple[Delivery, ...]:
        found = []
        for m in messages:
            found.append(Delivery(uid=uid_of(m), queue=queue, seq=m.sequence_number, count=m.delivery_count or 0,
                                  mode=mode, session=m.session_id, sub=sub))
        return tuple(found)

    def _settle_all(self, receiver: Any, messages: list[Any], client: int, queue: str, rng: random.Random,
                    deferred: list[tuple[str, int, str]]) -> None:
        for m in messages:
            uid = uid_of(m)
            choice = rng.choices(["complete", "abandon", "deadletter", "defer", "renew", "lapse", "leave"],
                                 [10, 4, 2, 2, 2, 1 if "lock-expiry" in self.spec.faults else 0, 1])[0]
            if choice == "renew":
                self._call(Op(0, client, "renew", queue, uids=(uid,)), lambda m=m: receiver.renew_message_lock(m))
                choice = "complete"
            if choice == "lapse":
                self.fault("lock-expiry")
                time.sleep(5.3)
                choice = "complete"  # after the lock lapsed: the complete should fail (lock lost)
            if choice == "leave":
                continue
            op = Op(0, client, choice, queue, uids=(uid,), value={"seq": m.sequence_number})
            settle = {"complete": receiver.complete_message, "abandon": receiver.abandon_message,
                      "deadletter": receiver.dead_letter_message, "defer": receiver.defer_message}[choice]
            self._call(op, lambda m=m, settle=settle: settle(m))
            if choice == "defer" and op.result == OK:
                deferred.append((queue, m.sequence_number, uid))

    def _peeklock(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any) -> None:
        queue = rng.choice((PLAIN, PARTITIONED))
        self._receive(sb, client, rng, deferred, queue, ServiceBusReceiveMode.PEEK_LOCK)

    def _rad(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any) -> None:
        queue = rng.choice((PLAIN, PARTITIONED))
        self._receive(sb, client, rng, deferred, queue, ServiceBusReceiveMode.RECEIVE_AND_DELETE)

    def _receive(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any, queue: str,
                 mode: ServiceBusReceiveMode, session: bool = False) -> None:
        rad = mode == ServiceBusReceiveMode.RECEIVE_AND_DELETE
        midstream = "close-midstream" in self.spec.faults and rng.random() < 0.2
        prefetch = rng.choice((0, 0, 5, 20)) if not midstream else 20
        count = rng.randint(1, 10)
        kwargs: dict[str, Any] = {"receive_mode": mode, "prefetch_count": prefetch, "max_wait_time": 1}
        if session:
            kwargs["session_id"] = rng.choice((None, "s0", "s1", "s2", "s3"))
        name = "rad" if rad else "peeklock"
        op = Op(0, client, "receive", queue, value={"mode": name, "credit": max(prefetch, count)})
        receiver = None

        def go() -> list[Any]:
            nonlocal receiver
            receiver = sb.get_queue_receiver(queue, **kwargs)
            receiver.__enter__()
            return list(receiver.receive_messages(max_message_count=1 if midstream else count, max_wait_time=1))
        try:
            messages = self._call(op, go)
            if messages is not None:
                op.deliveries = self._deliveries(messages, queue, name)
                if receiver is not None and getattr(receiver, "session", None) is not None:
                    op.session = receiver.session.session_id
                if midstream:
                    op.value["closed_early"] = True
                    self.fault("close-midstream", "receiver")
                elif not rad and receiver is not None:
                    self._settle_all(receiver, messages, client, queue, rng, deferred)
        finally:
            if receiver is not None:
                with contextlib.suppress(Exception):
                    receiver.__exit__(None, None, None)

    def _session(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any) -> None:
        rad = self.spec.rad and rng.random() < 0.2
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE if rad else ServiceBusReceiveMode.PEEK_LOCK
        self._receive(sb, client, rng, deferred, SESSIONS, mode, session=True)

    def _deferred(self, sb: ServiceBusClient, client: int, rng: random.Random,
                  deferred: list[tuple[str, int, str]]) -> None:
        if not deferred:
            return self._peeklock(sb, client, rng, deferred)
        queue, seq, _uid = deferred.pop(rng.randrange(len(deferred)))
        with sb.get_queue_receiver(queue, max_wait_time=1) as receiver:
            op = Op(0, client, "receive_deferred", queue, value={"mode": "peeklock", "credit": 0})
            messages = self._call(op, lambda: list(receiver.receive_deferred_messages([seq], timeout=10)))
            if messages is not None:
                op.deliveries = self._deliveries(messages, queue, "peeklock")
                self._settle_all(receiver, messages, client, queue, rng, [])
        return None

    def _peek(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        queue = rng.choice((PLAIN, PARTITIONED, TARGET))
        with sb.get_queue_receiver(queue) as receiver:
            op = Op(0, client, "peek", queue)
            messages = self._call(op, lambda: list(receiver.peek_messages(max_message_count=20, timeout=10)))
            if messages is not None:
                op.deliveries = self._deliveries(messages, queue, "peek")

    def _admin(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        """Through the JSON API: resubmit or move a dead-letter queue, or purge it."""
        queue = rng.choice((PLAIN, PARTITIONED))
        what = rng.choices(["resubmit", "move", "purge"], [3, 3, 1])[0]
        if what == "purge":
            op = Op(0, client, "purge", queue, value="deadletter")
            self._call(op, lambda: self.api("POST", f"/api/v1/entities/{queue}/$purge", {"subQueue": "deadletter"}))
        else:
            body: dict[str, Any] = {"subQueue": "deadletter", "all": True}
            if what == "move":
                body["target"] = TARGET
            op = Op(0, client, "move", queue, value=body.get("target", queue))
            self._call(op, lambda: self.api("POST", f"/api/v1/entities/{queue}/$move", body))

    def api(self, method: str, path: str, body: Any = None) -> Any:
        token = generate_token(f"sb://localhost:{self.broker.port}/", KEY_NAME, KEY, int(time.time()) + 3600)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.broker.http_port}{path}", data=data, method=method,
                                         headers={"Authorization": "Bearer " + token,
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=15) as response:
            return json.loads(response.read() or b"null")

    # -- the asyncio client ------------------------------------------------------------------------------
    def async_loop(self, client: int, rng: random.Random) -> None:
        asyncio.run(self._async_main(client, rng))

    async def _async_main(self, client: int, rng: random.Random) -> None:
        async with AsyncServiceBusClient.from_connection_string(self.connection_string(via_proxy=True),
                                                                retry_total=1, retry_backoff_factor=0.1) as sb:
            while self.take():
                try:
                    await self._async_op(sb, client, rng)
                except Exception as exc:  # opening a sender or receiver failed (a fault): the op never started
                    self.record(Op(0, client, "client-error", start=time.monotonic(), end=time.monotonic(),
                                   result=INFO, error=repr(exc)[:200]))

    async def _async_op(self, sb: Any, client: int, rng: random.Random) -> None:
        queue = rng.choice((PLAIN, PARTITIONED))
        if rng.random() < 0.5:
            message, uid, _session, key = self._message(client, rng, queue)
            op = Op(0, client, "send", queue, uids=(uid,), partition_key=key)
            await self._acall(op, self._asend(sb, queue, message))
            return
        op = Op(0, client, "receive", queue, value={"mode": "peeklock", "credit": 5})
        await self._areceive(sb, client, queue, op, rng)

    async def _asend(self, sb: Any, queue: str, message: ServiceBusMessage) -> None:
        async with sb.get_queue_sender(queue) as sender:
            await asyncio.wait_for(sender.send_messages(message), 15)

    async def _areceive(self, sb: Any, client: int, queue: str, op: Op, rng: random.Random) -> None:
        async with sb.get_queue_receiver(queue, max_wait_time=1) as receiver:
            messages = await self._acall(op, asyncio.wait_for(receiver.receive_messages(max_message_count=5,
                                                                                       max_wait_time=1), 15))
            if messages is None:
                return
            op.deliveries = self._deliveries(list(messages), queue, "peeklock")
            for m in messages:
                kind = "complete" if rng.random() < 0.7 else "abandon"
                settle = receiver.complete_message if kind == "complete" else receiver.abandon_message
                await self._acall(Op(0, client, kind, queue, uids=(uid_of(m),), value={"seq": m.sequence_number}),
                              asyncio.wait_for(settle(m), 15))

    async def _acall(self, op: Op, awaitable: Any) -> Any:
        op.start = time.monotonic()
        try:
            value = await awaitable
            op.result = OK
            return value
        except DEFINITE_FAILURES as exc:
            op.result, op.error = FAIL, repr(exc)[:200]
        except Exception as exc:
            op.result, op.error = INFO, repr(exc)[:200]
        finally:
            op.end = time.monotonic()
            self.record(op)
        return None

    # -- quiescent points --------------------------------------------------------------------------------
    def store_rows(self) -> list[tuple[str, int, int, int, bytes]]:
        db = sqlite3.connect(f"file:{self.broker.data_dir / 'messages.db'}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute("SELECT entity, sequence_number, state, length(annotations) + length(tail), tail "
                              "FROM messages").fetchall()
        finally:
            db.close()

    def recount(self, where: str) -> None:
        op = Op(0, -1, "recount", start=time.monotonic(), error=where)
        value: dict[str, Any] = {}
        for _attempt in range(8):
            try:
                value = self._recount_once()
            except Exception as exc:
                op.result, op.error = INFO, f"{where}: {exc!r}"[:200]
                time.sleep(1)
                continue
            op.result = OK
            if all(both["api"] == both["store"] for both in value.values()):
                break
            time.sleep(1)  # a timer (a scheduled message coming due, a lock lapsing) may move a count: re-read
        op.value, op.end = value, time.monotonic()
        self.record(op)

    def _recount_once(self) -> dict[str, Any]:
        store: dict[str, Counter[str]] = {q["Name"]: Counter() for q in QUEUES}
        for entity, _seq, state, size, _tail in self.store_rows():
            base, _, sub = entity.lower().partition("/")
            if base not in store:
                continue
            counts = store[base]
            counts["sizeInBytes"] += size
            if sub == "$deadletterqueue":
                counts["deadLetter"] += 1
            elif sub:
                counts["transferDeadLetter"] += 1
            elif state == 2:
                counts["scheduled"] += 1
            else:
                counts["active"] += 1
                counts["deferred"] += state == 1
        keys = ("active", "deadLetter", "scheduled", "deferred", "transfer", "transferDeadLetter", "sizeInBytes")
        result = {}
        for queue, counts in store.items():
            api = self.api("GET", f"/api/v1/entities/{queue}")["counts"]
            result[queue] = {"api": {k: api.get(k) for k in keys}, "store": {k: counts.get(k, 0) for k in keys}}
        return result

    def drain(self) -> None:
        """The final drain: every message still stored, read from the SQLite file."""
        for entity, seq, state, _size, tail in self.store_rows():
            found = UID.search(tail)
            if found:
                base, _, sub = entity.lower().partition("/")
                kind = "deadletter" if sub else {1: "deferred", 2: "scheduled"}.get(state, "")
                self.history.stored.append((found.group().decode(), base, kind, seq))
        if HAS_TRACE and self.trace_path.exists():
            self.history.trace = [json.loads(line) for line in self.trace_path.read_text().splitlines() if line.strip()]

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> None:
        master = random.Random(self.spec.seed)
        per_phase = [self.spec.ops // self.spec.phases] * self.spec.phases
        per_phase[-1] += self.spec.ops - sum(per_phase)
        for phase, budget in enumerate(per_phase):
            self.remaining = budget
            self.stop_faults.clear()
            threads = [threading.Thread(target=self.client_loop, args=(c, random.Random(master.random())))
                       for c in range(self.spec.clients)]
            if self.spec.async_client:
                threads.append(threading.Thread(target=self.async_loop,
                                                args=(self.spec.clients, random.Random(master.random()))))
            fault_thread = threading.Thread(target=self.fault_loop, args=(random.Random(master.random()),))
            for t in [*threads, fault_thread]:
                t.start()
            for t in threads:
                t.join(600)
            self.stop_faults.set()
            fault_thread.join(120)
            time.sleep(5.5)  # locks left by clients lapse (5 s), so the quiescent point has none held
            self.recount(f"the quiescent point after phase {phase + 1}")
        self.broker.stop()
        self._restart()
        self.recount("the quiescent point after a restart")
        time.sleep(4.5)  # every scheduled message comes due
        self.recount("the final quiescent point")
        self.broker.stop()
        self.drain()

    def close(self) -> None:
        self.proxy.close()
        self.broker.kill()


def uid_of(message: Any) -> str:
    """The checker's id of a received message: its body up to the first space (the body is the id, or the id
    and padding)."""
    return str(message).split(" ", 1)[0]


def _quietly(fn: Any) -> None:
    with contextlib.suppress(Exception):
        fn()


def run(spec: RunSpec) -> RunResult:
    started = time.monotonic()
    base = spec.keep or Path(tempfile.mkdtemp(prefix=f"checker-{spec.seed}-"))
    base.mkdir(parents=True, exist_ok=True)
    run_ = _Run(spec, base)
    try:
        run_.run()
    finally:
        run_.close()
    violations = check_all(run_.history, partitioned=frozenset({PARTITIONED}), strict=spec.strict)
    if spec.keep is not None:
        (base / "history.json").write_text(run_.history.dumps())
    if violations and spec.save_failing is not None:
        spec.save_failing.mkdir(parents=True, exist_ok=True)
        (spec.save_failing / f"seed-{spec.seed}-history.json").write_text(run_.history.dumps())
    else:
        shutil.rmtree(base, ignore_errors=True)
    return RunResult(spec, run_.history, violations, time.monotonic() - started, run_.faults)
