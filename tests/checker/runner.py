"""One checker run: a real broker (scripts/serve, SQLite store), concurrent clients using the official
Python SDK (sync threads and one asyncio client) doing random operations from a seed, faults from the
same seed, quiescent recounts, a final drain of the store, and the promise checks.

``run(RunSpec(seed=...))`` returns the history and its violations. A broker (a ``Node``) serves many
seeds one after the other: each seed creates its own queues (``plain-<seed>``, ...) through the JSON
API and deletes them at its end, so no seed sees another's messages; a sweep runs several nodes in
processes side by side. Everything random comes from the seed (each client and the fault thread have
their own ``random.Random``; faults fire at points of the operation budget, not of the clock); the
interleaving of threads and the broker's timing are not, so a run is a search, and the deterministic
regression scripts (tests/drills/test_checker_regressions.py) pin what a run found.
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
import subprocess
import tempfile
import threading
import time
import urllib.error
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
from broker_process import KEY, KEY_NAME, SERVE, BrokerProcess, write_config
from pg_nodes import node
from sdk_builds import GO

from checker.history import FAIL, INFO, OK, Delivery, History, Op
from checker.promises import Violation, check_all
from checker.proxy import Proxy
from sodalite.model.sas import generate_token

# Faults the fault thread fires at points of the operation budget (each about once a seed) ...
SCHEDULED_FAULTS = ("kill9", "cut", "stall", "unauthenticated", "store-offline", "entity-update", "disk-full",
                    "pg-node-kill", "second-serve")
# ... and faults a client makes as part of an operation (a receiver closed mid-stream, a link detached, a
# lock left to lapse, a session released with its messages unsettled).
CLIENT_FAULTS = ("close-midstream", "detach", "lock-expiry", "session-release")
# Kinds that only some seeds can have (disk-full: the SQLite seeds, about three in four; pg-node-kill: the
# seeds on two PostgreSQL nodes, about one in four) fire this many times as often in those seeds, so a
# sweep injects each about as often as the others (100 of each in about 140 seeds). second-serve (SQLite
# seeds) fires less often: each starts a broker process (1 to 2 s of a loaded machine's CPU), and 0.6 a
# seed still makes some 135 in 300 seeds.
SUBSET_FAULTS = {"disk-full": 1.5, "pg-node-kill": 3.0, "second-serve": 0.6}
FAULT_KINDS = (*SCHEDULED_FAULTS, *CLIENT_FAULTS)
PLAIN, SESSIONS, PARTITIONED, TARGET = "plain", "sess", "part", "target"
LOCK = "PT5S"  # the shortest lock the broker allows (as Service Bus)
ROLES: dict[str, dict[str, Any]] = {
    PLAIN: {"LockDuration": LOCK, "MaxDeliveryCount": 1000},
    SESSIONS: {"LockDuration": LOCK, "MaxDeliveryCount": 1000, "RequiresSession": True},
    PARTITIONED: {"LockDuration": LOCK, "MaxDeliveryCount": 1000, "EnablePartitioning": True},
    TARGET: {"MaxDeliveryCount": 1000},
}
SENDABLE = (PLAIN, PLAIN, SESSIONS, PARTITIONED)
UID = re.compile(rb"u\d+x\d+x\d+")
DEFINITE_FAILURES = (MessageLockLostError, SessionLockLostError, MessageNotFoundError, MessagingEntityNotFoundError)
HAS_TRACE = importlib.util.find_spec("sodalite.server.delivery_trace") is not None
GO_CLIENT = GO.path(GO.outputs[0])  # built by tests/interop/sdk_builds.py (scripts/fault-sweep builds it)
WAIT = 0.5  # a receive's max_wait_time (seconds): how long an empty receive waits
DISK_MB = 64  # the small filesystem (tmpfs) the data directory lives on when the disk-full fault is on


@dataclass
class RunSpec:
    seed: int
    ops: int = 200  # client operations in all (faults not counted)
    clients: int = 4  # sync clients; one more asyncio client when async_client
    async_client: bool = True
    faults: tuple[str, ...] = FAULT_KINDS
    faults_per_kind: float = 1.0  # mean injections of each scheduled fault kind per seed
    phases: int = 2  # quiescent points (recounts) between phases
    defect: str | None = None  # SODALITE_TEST_DEFECT for the broker (test-only switches)
    strict: bool = False
    rad: bool = True  # ReceiveAndDelete receives (without the broker's trace they excuse losses up to their credit)
    admin: bool = True  # resubmit, move and purge through the JSON API
    restart: float = 0.3  # the chance that the seed ends with a graceful restart and a recount after it
    go: float = 0.0  # the chance that the seed has one more client, the official Go SDK (tests/go, built)
    pg: str | None = None  # a PostgreSQL database: the seed runs on two broker nodes sharing it (pg-node-kill)
    save_failing: Path | None = None  # a folder: the history of a run with violations is written there
    broker_args: tuple[str, ...] = ()  # more `serve` options, e.g. ("--max-connections", "20")


@dataclass
class RunResult:
    spec: RunSpec
    history: History
    violations: list[Violation]
    seconds: float
    faults: Counter[str] = field(default_factory=Counter)
    timings: Counter[str] = field(default_factory=Counter)  # seconds by part of the run (setup, phases, ...)

    @property
    def client_ops(self) -> int:
        return sum(op.kind not in ("fault", "recount") for op in self.history.ops)


class Node:
    """A broker process (and the checker's TCP proxy in front of it) that serves seeds one after another.

    With ``disk=True`` (root only) its data directory is on a small tmpfs the node mounts, so the
    disk-full fault can fill it and free it."""

    def __init__(self, defect: str | None = None, broker_args: tuple[str, ...] = (), disk: bool = False,
                 pg: str | None = None) -> None:
        self.defect, self.broker_args, self.pg = defect, broker_args, pg
        self.base = Path(tempfile.mkdtemp(prefix="checker-node-"))
        self.mount: Path | None = None
        self.peer: BrokerProcess | None = None  # on PostgreSQL: the second node, on the same database
        data = self.base / "data"
        if disk and pg is None:
            mount = self.base / "disk"
            mount.mkdir()
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
                                  check=False, capture_output=True)
            if done.returncode == 0:
                self.mount, data = mount, mount / "data"
        self.trace_path = self.base / "trace.jsonl"
        extra = [*broker_args, *(["--delivery-trace", str(self.trace_path)] if HAS_TRACE else [])]
        config = write_config(self.base / "Config.json", [])
        if pg is not None:
            self.broker, self.peer = (node(self.base, config, pg, name, extra) for name in ("node-a", "node-b"))
        else:
            self.broker = BrokerProcess(data, config, extra_args=extra)
        self.lock = threading.Lock()  # one broker-wide fault at a time (no kill -9 across a store offline)
        self.start()
        if self.peer is not None:
            self.start(self.peer)
        self.proxy = Proxy(self.broker.port)
        self.seeds = 0

    def start(self, broker: BrokerProcess | None = None) -> None:
        if self.defect:
            os.environ["SODALITE_TEST_DEFECT"] = self.defect
        try:
            (broker or self.broker).start()
        finally:
            os.environ.pop("SODALITE_TEST_DEFECT", None)

    @staticmethod
    def alive(broker: BrokerProcess) -> bool:
        return broker.proc is not None and broker.proc.poll() is None

    def ensure(self) -> None:
        """Started again if a seed left it down (a failed restart)."""
        for broker in (self.broker, self.peer):
            if broker is not None and not self.alive(broker):
                self.start(broker)

    def api(self, method: str, path: str, body: Any = None, timeout: float = 15) -> Any:
        token = generate_token(f"sb://localhost:{self.broker.port}/", KEY_NAME, KEY, int(time.time()) + 3600)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.broker.http_port}{path}", data=data, method=method,
                                         headers={"Authorization": "Bearer " + token,
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def trace_size(self) -> int:
        return self.trace_path.stat().st_size if self.trace_path.exists() else 0

    def close(self) -> None:
        self.proxy.close()
        self.broker.kill()
        if self.peer is not None:
            self.peer.kill()
        if self.mount is not None:
            subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


class _Run:
    def __init__(self, spec: RunSpec, node: Node) -> None:
        self.spec, self.node, self.broker, self.proxy = spec, node, node.broker, node.proxy
        self.history = History(seed=spec.seed)
        self.lock = threading.Lock()
        self.progress = threading.Condition(self.lock)
        self.remaining = 0
        self.stop_faults = threading.Event()
        self.faults: Counter[str] = Counter()
        self.timings: Counter[str] = Counter()
        self.q = {role: f"{role}-{spec.seed}" for role in ROLES}  # this seed's queues
        self.roles = {name: role for role, name in self.q.items()}
        self.properties = {name: dict(ROLES[role]) for role, name in self.q.items()}
        self.lock_seconds = {name: 5.0 for name in self.q.values()}  # the longest lock a queue had this seed
        self.trace_from = node.trace_size()
        self.counter = 0
        self.broker_lock = node.lock
        self.session_states: dict[tuple[str, str], int] = Counter()
        self.holding: Any = None  # a regression script's held receiver and messages (tests/checker/script.py)

    def setup(self) -> None:
        for name, properties in self.properties.items():
            with contextlib.suppress(urllib.error.HTTPError):  # 409: left by an earlier run of this seed
                self.node.api("DELETE", f"/api/v1/entities/{name}")
            self._retry(lambda n=name, p=properties: self.node.api(
                "POST", "/api/v1/entities", {"kind": "queue", "path": n, "properties": p}))

    def teardown(self) -> None:
        for name in self.q.values():
            with contextlib.suppress(Exception):
                self.node.api("DELETE", f"/api/v1/entities/{name}")

    def _retry(self, fn: Any, attempts: int = 20) -> Any:
        for attempt in range(attempts):
            try:
                return fn()
            except Exception:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5)
        return None

    # -- recording ---------------------------------------------------------------------------------------
    def record(self, op: Op) -> Op:
        with self.lock:
            return self.history.add(op)

    def take(self) -> bool:
        with self.lock:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            self.progress.notify_all()
            return True

    def uid(self, client: int) -> str:
        with self.lock:
            self.counter += 1
            return f"u{self.spec.seed}x{client}x{self.counter}"

    def connection_string(self, via_proxy: bool) -> str:
        """Through the proxy (to the first node), or straight to a node (on PostgreSQL the second)."""
        port = self.proxy.port if via_proxy else (self.node.peer or self.broker).port
        return (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                "UseDevelopmentEmulator=true;")

    def api(self, method: str, path: str, body: Any = None) -> Any:
        return self.node.api(method, path, body)

    # -- faults ------------------------------------------------------------------------------------------
    def fault(self, name: str, detail: str = "") -> None:
        now = time.monotonic()
        with self.lock:
            self.faults[name] += 1
            self.history.add(Op(0, -1, "fault", start=now, end=now, result=OK, value=name, error=detail))

    def client_fault(self, name: str, rng: random.Random, chance: float) -> bool:
        return name in self.spec.faults and rng.random() < chance

    def plan(self, rng: random.Random, budget: int) -> list[tuple[int, str]]:
        """The scheduled faults of a phase: (operations left when it fires, kind), about
        ``faults_per_kind / phases`` of each kind."""
        kinds = [k for k in self.spec.faults if k in SCHEDULED_FAULTS]
        if "disk-full" in kinds and self.node.mount is None:
            kinds.remove("disk-full")
        if "pg-node-kill" in kinds and self.node.peer is None:
            kinds.remove("pg-node-kill")
        if "second-serve" in kinds and self.node.peer is not None:  # a data directory of one's own: SQLite seeds
            kinds.remove("second-serve")
        events = []
        for kind in kinds:  # the kinds only some seeds can have, more often in those (SUBSET_FAULTS)
            mean = self.spec.faults_per_kind * SUBSET_FAULTS.get(kind, 1) / self.spec.phases
            count = int(mean) + (rng.random() < mean - int(mean))
            events += [(rng.randrange(1, max(2, budget)), kind) for _ in range(count)]
        return sorted(events, reverse=True)

    def fault_loop(self, rng: random.Random, events: list[tuple[int, str]]) -> None:
        for left, kind in events:
            with self.progress:
                while self.remaining > left and not self.stop_faults.is_set():
                    self.progress.wait(0.5)
            if self.stop_faults.is_set():
                return
            try:
                self.inject(kind, rng)
            except Exception as exc:  # a broker that would not start again: recorded, the seed goes on
                self.record(Op(0, -1, "fault-error", start=time.monotonic(), end=time.monotonic(), result=INFO,
                               error=f"{kind}: {exc!r}"[:300]))

    def inject(self, kind: str, rng: random.Random) -> None:
        if kind == "kill9":
            with self.broker_lock:
                self.broker.kill()
                self.fault("kill9")
                time.sleep(rng.uniform(0, 0.3))
                began = time.monotonic()
                self._restart()
                self.timings["start after kill9"] += time.monotonic() - began
        elif kind == "pg-node-kill":
            assert self.node.peer is not None
            victim = rng.choice((self.broker, self.node.peer))
            with self.broker_lock:
                victim.kill()
                self.fault("pg-node-kill", "node-a" if victim is self.broker else "node-b")
                time.sleep(rng.uniform(0, 0.5))
                began = time.monotonic()
                self._retry(lambda: self._start_again(victim), attempts=5)
                self.timings["start after kill9"] += time.monotonic() - began
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
                    return
                self.fault("store-offline", f"{seconds:.1f}s")
                time.sleep(seconds)
                self._retry(lambda: self.api("POST", "/api/v1/stores/default/online"), attempts=10)
        elif kind == "unauthenticated":
            count = rng.randint(1, 8)
            self.fault("unauthenticated", f"{count} connections")
            threading.Thread(target=self._unauthenticated, args=(count, rng.uniform(1, 5)), daemon=True).start()
        elif kind == "entity-update":
            self._update(rng)
        elif kind == "disk-full":
            self._disk_full(rng)
        elif kind == "second-serve":
            self._second_serve()

    def _update(self, rng: random.Random) -> None:
        """An entity update through the JSON API mid-run: the lock duration, the maximum delivery count or
        the default time to live of one of the seed's queues."""
        name = self.q[rng.choice((PLAIN, PARTITIONED, SESSIONS))]
        properties = dict(self.properties[name])
        what = rng.choice(("lock", "max-delivery", "ttl"))
        if what == "lock":
            seconds = rng.randint(5, 8)
            properties["LockDuration"] = f"PT{seconds}S"
            self.lock_seconds[name] = max(self.lock_seconds[name], float(seconds))
        elif what == "max-delivery":
            properties["MaxDeliveryCount"] = rng.choice((2, 3, 5, 10, 1000))
        else:
            properties["DefaultMessageTimeToLive"] = rng.choice(("PT20S", "PT40S", "PT2M", "P14D"))
        op = Op(0, -1, "update", name, value={"properties": properties,
                                             "ttl": _seconds(properties.get("DefaultMessageTimeToLive"))})
        self._call(op, lambda: self.api("PUT", f"/api/v1/entities/{name}", {"properties": properties}))
        if op.result != FAIL:
            self.properties[name] = properties
        self.fault("entity-update", f"{name} {what}")

    def _disk_full(self, rng: random.Random) -> None:
        """The data directory's filesystem filled to the last byte, held a moment, then freed."""
        assert self.node.mount is not None
        filler = self.node.mount / "filler"
        seconds = rng.uniform(0.3, 2)
        with self.broker_lock:  # not across a kill -9 (a restart on a full disk is another fault)
            written = 0
            with contextlib.suppress(OSError), filler.open("wb") as out:
                chunk = b"\0" * (1 << 20)
                while True:
                    out.write(chunk)
                    out.flush()
                    written += len(chunk)
            self.fault("disk-full", f"{written >> 20} MB filler, {seconds:.1f}s")
            time.sleep(seconds)
            filler.unlink(missing_ok=True)

    def _second_serve(self) -> None:
        """A second ``serve`` started on the running broker's data directory, as a user would by mistake. It
        must be refused at once, naming the directory and the process holding it, and leave the running
        broker's endpoints.json alone (promise "one broker per data directory": recorded, checked by
        promises.check_one_broker). One that starts serving is stopped (SIGTERM, as a user would)."""
        data_dir = self.broker.data_dir
        endpoints = data_dir / "endpoints.json"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.node.defect:
            env["SODALITE_TEST_DEFECT"] = self.node.defect
        with self.broker_lock:  # the first broker up throughout (not across a kill -9 and its restart)
            if self.broker.proc is None or not self.node.alive(self.broker):
                return
            holder = self.broker.proc.pid
            before = _text(endpoints)
            op = Op(0, -1, "second-serve", start=time.monotonic(), result=OK)
            process = subprocess.Popen(
                [str(SERVE), "--host", "127.0.0.1", "--port", "0", "--admin-port", "-1", "--amqps-port", "-1",
                 "--http-port", "-1", "--data-dir", str(data_dir), "--config", str(self.node.base / "Config.json")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            lines: list[str] = []
            serving = threading.Event()

            def read() -> None:
                assert process.stdout is not None
                for line in process.stdout:
                    lines.append(line)
                    if "Connection string:" in line:
                        serving.set()
            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            deadline = time.monotonic() + 60
            while process.poll() is None and not serving.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            started = process.poll() is None
            if started:  # serving (or hanging): stopped as a user would, with SIGTERM
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            reader.join(5)
            op.end = time.monotonic()
            op.value = {"data_dir": str(data_dir.resolve()), "holder": holder, "started": started,
                        "exit": None if started else process.returncode, "output": "".join(lines)[-1000:],
                        "endpoints_before": before, "endpoints_after": _text(endpoints)}
            self.record(op)
            self.fault("second-serve", "served" if started else f"exit {process.returncode}")
            self.timings["second serve"] += op.end - op.start

    def _restart(self) -> None:
        self._retry(lambda: self._start_again(self.broker), attempts=5)

    def _start_again(self, broker: BrokerProcess) -> None:
        broker.kill()  # an earlier attempt that timed out may still be starting (and hold the data directory)
        self.node.start(broker)

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
        senders: dict[str, Any] = {}  # one sender per queue, kept across operations (opened again after a fault)
        sb = ServiceBusClient.from_connection_string(self.connection_string(via_proxy=rng.random() < 0.7),
                                                     retry_total=1, retry_backoff_factor=0.1)
        try:
            while self.take():
                action = rng.choices(
                    ["send", "batch", "duplicate", "schedule", "peeklock", "rad", "session", "deferred", "peek",
                     "admin"], [12, 6, 3, 3, 12, 5 if self.spec.rad else 0, 6, 3, 3, 2 if self.spec.admin else 0])[0]
                try:
                    if action in ("send", "batch", "duplicate", "schedule"):
                        getattr(self, "_" + action)(sb, client, rng, senders)
                    else:
                        getattr(self, "_" + action)(sb, client, rng, deferred)
                except Exception as exc:  # a failure outside an op's own record: the client starts again
                    self.record(Op(0, client, "client-error", start=time.monotonic(), end=time.monotonic(),
                                   result=INFO, error=repr(exc)[:200]))
                    self._close_senders(senders)
                    sb.close()
                    sb = ServiceBusClient.from_connection_string(self.connection_string(via_proxy=True),
                                                                 retry_total=1, retry_backoff_factor=0.1)
        finally:
            self._close_senders(senders)
            with contextlib.suppress(Exception):
                sb.close()

    @staticmethod
    def _close_senders(senders: dict[str, Any]) -> None:
        for sender in senders.values():
            with contextlib.suppress(Exception):
                sender.close()
        senders.clear()

    def _sender(self, sb: ServiceBusClient, senders: dict[str, Any], queue: str) -> Any:
        if queue not in senders:
            senders[queue] = sb.get_queue_sender(queue)
        return senders[queue]

    def _send_op(self, senders: dict[str, Any], queue: str, op: Op, fn: Any) -> Any:
        value = self._call(op, fn)
        if op.result != OK:  # the sender may be broken (a cut, a kill): opened again next time
            sender = senders.pop(queue, None)
            if sender is not None:
                with contextlib.suppress(Exception):
                    sender.close()
        return value

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
        role = self.roles.get(queue, queue)
        if role == SESSIONS:
            session = session or f"s{rng.randint(0, 3)}"
        elif role == PARTITIONED and rng.random() < 0.7:
            key = f"k{rng.randint(0, 5)}"
        message = ServiceBusMessage(uid, message_id=message_id or uid, session_id=session, partition_key=key,
                                    application_properties={"uid": uid})
        return message, uid, session, key

    def _send(self, sb: ServiceBusClient, client: int, rng: random.Random, senders: dict[str, Any]) -> None:
        queue = self.q[rng.choice(SENDABLE)]
        message, uid, session, key = self._message(client, rng, queue)
        sender = self._sender(sb, senders, queue)
        op = Op(0, client, "send", queue, uids=(uid,), session=session, partition_key=key)
        self._send_op(senders, queue, op, lambda: sender.send_messages(message, timeout=10))
        if self.client_fault("close-midstream", rng, 0.05) and queue in senders:
            # a sender closed while its send is in flight
            senders.pop(queue)
            message2, uid2, s2, k2 = self._message(client, rng, queue, session=session)
            op2 = Op(0, client, "send", queue, uids=(uid2,), session=s2, partition_key=k2)
            self.fault("close-midstream", "sender")
            timer = threading.Timer(0.005, _quietly, args=(sender.close,))
            timer.start()
            self._call(op2, lambda: sender.send_messages(message2, timeout=10))
            timer.join()
            _quietly(sender.close)

    def _batch(self, sb: ServiceBusClient, client: int, rng: random.Random, senders: dict[str, Any]) -> None:
        role = rng.choice(SENDABLE)
        queue = self.q[role]
        session = f"s{rng.randint(0, 3)}" if role == SESSIONS else None
        key = f"k{rng.randint(0, 5)}" if role == PARTITIONED else None
        made = [self._message(client, rng, queue, session=session) for _ in range(rng.randint(2, 8))]
        if key is not None:
            for message, *_ in made:
                message.partition_key = key
        sender = self._sender(sb, senders, queue)
        op = Op(0, client, "send", queue, uids=tuple(m[1] for m in made), session=session, partition_key=key)
        self._send_op(senders, queue, op, lambda: sender.send_messages([m[0] for m in made], timeout=10))

    def _duplicate(self, sb: ServiceBusClient, client: int, rng: random.Random, senders: dict[str, Any]) -> None:
        """Two messages with one MessageId (no duplicate detection on these queues: two messages)."""
        message_id = f"dup{rng.randint(0, 20)}"
        queue = self.q[PLAIN]
        for _ in range(2):
            message, uid, _s, _k = self._message(client, rng, queue, message_id=message_id)
            sender = self._sender(sb, senders, queue)
            op = Op(0, client, "send", queue, uids=(uid,))
            self._send_op(senders, queue, op, lambda m=message, s=sender: s.send_messages(m, timeout=10))

    def _schedule(self, sb: ServiceBusClient, client: int, rng: random.Random, senders: dict[str, Any]) -> None:
        queue = self.q[rng.choice((PLAIN, PARTITIONED))]
        made = [self._message(client, rng, queue) for _ in range(rng.randint(1, 3))]
        when = datetime.now(UTC) + timedelta(seconds=rng.uniform(0.5, 3))
        sender = self._sender(sb, senders, queue)
        op = Op(0, client, "schedule", queue, uids=tuple(m[1] for m in made))
        numbers = self._send_op(senders, queue, op,
                                lambda: sender.schedule_messages([m[0] for m in made], when, timeout=10))
        if numbers is not None:
            op.value = list(numbers)
            if rng.random() < 0.4 and queue in senders:
                chosen = rng.sample(range(len(numbers)), rng.randint(1, len(numbers)))
                cancel = Op(0, client, "cancel_scheduled", queue, uids=tuple(made[i][1] for i in chosen))
                self._send_op(senders, queue, cancel,
                              lambda: sender.cancel_scheduled_messages([numbers[i] for i in chosen], timeout=10))

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
                                 [10, 4, 2, 2, 2, 0.4 if "lock-expiry" in self.spec.faults else 0, 1])[0]
            if choice == "renew":
                self._call(Op(0, client, "renew", queue, uids=(uid,)), lambda m=m: receiver.renew_message_lock(m))
                choice = "complete"
            if choice == "lapse":
                self.fault("lock-expiry")
                time.sleep(self.lock_seconds[queue] + 0.3)
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
        queue = self.q[rng.choice((PLAIN, PARTITIONED))]
        self._receive(sb, client, rng, deferred, queue, ServiceBusReceiveMode.PEEK_LOCK)

    def _rad(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any) -> None:
        queue = self.q[rng.choice((PLAIN, PARTITIONED))]
        self._receive(sb, client, rng, deferred, queue, ServiceBusReceiveMode.RECEIVE_AND_DELETE)

    def _receive(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any, queue: str,
                 mode: ServiceBusReceiveMode, session: bool = False) -> None:
        rad = mode == ServiceBusReceiveMode.RECEIVE_AND_DELETE
        midstream = self.client_fault("close-midstream", rng, 0.1)
        leave = midstream and rad and rng.random() < 0.5  # it leaves as the broker takes messages for it
        prefetch = rng.choice((0, 0, 5, 20)) if not midstream else 20
        count = rng.randint(1, 10)
        kwargs: dict[str, Any] = {"receive_mode": mode, "prefetch_count": prefetch, "max_wait_time": WAIT}
        if session:
            kwargs["session_id"] = rng.choice((None, "s0", "s1", "s2", "s3"))
        name = "rad" if rad else "peeklock"
        op = Op(0, client, "receive", queue, value={"mode": name, "credit": max(prefetch, count)})
        receiver = None

        def go() -> list[Any]:
            nonlocal receiver
            receiver = sb.get_queue_receiver(queue, **kwargs)
            receiver.__enter__()
            if leave:
                self._leave(receiver, max(prefetch, count))
                return []
            return list(receiver.receive_messages(max_message_count=1 if midstream else count,
                                                            max_wait_time=WAIT))
        try:
            messages = self._call(op, go)
            if messages is None or receiver is None:
                return
            op.deliveries = self._deliveries(messages, queue, name)
            state = getattr(receiver, "session", None)
            if state is not None:
                op.session = state.session_id
                self._session_state(receiver, client, queue, op.session, rng)
            if midstream:
                op.value["closed_early"] = True
                self.fault("close-midstream", "receiver left as it gave credit" if leave else "receiver")
            elif session and not rad and messages and self.client_fault("session-release", rng, 0.5):
                # the session released (its receiver closed) with its messages locked and unsettled
                self.fault("session-release", f"{op.session}: {len(messages)} unsettled")
            elif not rad and messages and self.client_fault("detach", rng, 0.12):
                self._detach(receiver, rng)
                self._settle_all(receiver, messages, client, queue, rng, deferred)
            elif rad and self.client_fault("detach", rng, 0.1):
                self._detach(receiver, rng)
                more = Op(0, client, "receive", queue, value={"mode": name, "credit": max(prefetch, count)})
                again = self._call(more, lambda: list(receiver.receive_messages(max_message_count=count,
                                                                                 max_wait_time=WAIT)))
                more.deliveries = self._deliveries(again or [], queue, name)
            elif not rad:
                self._settle_all(receiver, messages, client, queue, rng, deferred)
        finally:
            if receiver is not None:
                with contextlib.suppress(Exception):
                    receiver.__exit__(None, None, None)

    def _detach(self, receiver: Any, rng: random.Random) -> None:
        """The receiver's link detached under it (the connection and the AMQP session stay): the SDK's own
        link object sends the detach (test-only reach into the SDK); what follows (settlements, a receive)
        runs on a receiver whose link is gone, as after a detach the broker or the network made."""
        link = getattr(getattr(receiver, "_handler", None), "_link", None)
        if link is None:
            return
        close = rng.random() < 0.5
        _quietly(lambda: link.detach(close=close))
        self.fault("detach", "closed" if close else "detached")

    @staticmethod
    def _leave(receiver: Any, credit: int) -> None:
        """A ReceiveAndDelete receiver that leaves while the broker streams to it: credit given with its AMQP
        session's incoming window closed (so the broker takes, that is deletes, messages for it and holds
        their transfers), then its link detached 0.1 s later, by the SDK's own link object (test-only reach
        into the SDK, as ``_detach``). The messages were never written: they must be put back, not lost
        (the Go SDK's receiver closing while the broker streams lost them so)."""
        link = getattr(getattr(receiver, "_handler", None), "_link", None)
        if link is None:
            return
        link._session.incoming_window = 0
        link.flow(link_credit=credit)
        time.sleep(0.1)
        link.detach(close=True)

    def _session_state(self, receiver: Any, client: int, queue: str, session: str, rng: random.Random) -> None:
        """Read the session's state, and sometimes set it to a new value: a set that returned success is
        read back by every later get (sessions are locked: one holder sets at a time)."""
        if rng.random() < 0.5:
            return
        get = Op(0, client, "session_get", queue, session=session)
        state = self._call(get, receiver.session.get_state)
        get.value = state.decode() if isinstance(state, bytes) else state
        if rng.random() < 0.5:
            with self.lock:
                self.session_states[(queue, session)] += 1
                value = f"{session}:{self.spec.seed}:{client}:{self.session_states[(queue, session)]}"
            put = Op(0, client, "session_set", queue, session=session, value=value)
            self._call(put, lambda: receiver.session.set_state(value.encode()))

    def _session(self, sb: ServiceBusClient, client: int, rng: random.Random, deferred: Any) -> None:
        rad = self.spec.rad and rng.random() < 0.2
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE if rad else ServiceBusReceiveMode.PEEK_LOCK
        self._receive(sb, client, rng, deferred, self.q[SESSIONS], mode, session=True)

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
        queue = self.q[rng.choice((PLAIN, PARTITIONED, TARGET))]
        with sb.get_queue_receiver(queue) as receiver:
            op = Op(0, client, "peek", queue)
            messages = self._call(op, lambda: list(receiver.peek_messages(max_message_count=20, timeout=10)))
            if messages is not None:
                op.deliveries = self._deliveries(messages, queue, "peek")

    def _admin(self, sb: ServiceBusClient, client: int, rng: random.Random, _deferred: Any) -> None:
        """Through the JSON API: resubmit or move a dead-letter queue, or purge it."""
        queue = self.q[rng.choice((PLAIN, PARTITIONED))]
        what = rng.choices(["resubmit", "move", "purge"], [3, 3, 1])[0]
        if what == "purge":
            op = Op(0, client, "purge", queue, value="deadletter")
            self._call(op, lambda: self.api("POST", f"/api/v1/entities/{queue}/$purge", {"subQueue": "deadletter"}))
        else:
            body: dict[str, Any] = {"subQueue": "deadletter", "all": True}
            if what == "move":
                body["target"] = self.q[TARGET]
            op = Op(0, client, "move", queue, value=body.get("target", queue))
            self._call(op, lambda: self.api("POST", f"/api/v1/entities/{queue}/$move", body))

    # -- the Go client ------------------------------------------------------------------------------------
    def go_loop(self, client: int, rng: random.Random) -> None:
        """The official Go SDK as one more client (tests/go/checker.go): this thread picks its operations from
        the seed and hands them to the Go program one at a time; the program writes the history lines."""
        process = subprocess.Popen([str(GO_CLIENT), self.connection_string(via_proxy=rng.random() < 0.7), "checker"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert process.stdin is not None and process.stdout is not None
        offset = time.time() - time.monotonic()  # the Go program's wall-clock times, on this clock
        try:
            while self.take():
                queue = self.q[rng.choice((PLAIN, PLAIN, PARTITIONED))]
                if rng.random() < 0.5:
                    request: dict[str, Any] = {"op": "send", "queue": queue, "messages": [
                        {"uid": self.uid(client), "session": None,
                         "key": f"k{rng.randint(0, 5)}" if self.roles[queue] == PARTITIONED and rng.random() < 0.7
                         else None}
                        for _ in range(rng.choice((1, 1, 1, 3)))]}
                    if len({m["key"] for m in request["messages"]}) > 1:  # a batch goes to one partition
                        for m in request["messages"]:
                            m["key"] = request["messages"][0]["key"]
                else:
                    count = rng.randint(1, 6)
                    request = {"op": "receive", "queue": queue, "count": count,
                               "mode": "rad" if self.spec.rad and rng.random() < 0.2 else "peeklock",
                               "settle": rng.choices(["complete", "abandon", "deadletter", "leave"], [10, 4, 1, 1],
                                                     k=count)}
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
                while (line := process.stdout.readline()):
                    entry = json.loads(line)
                    if entry.get("done"):
                        break
                    self._record_go(client, entry, offset)
                else:
                    raise RuntimeError("the Go client exited")
        except Exception as exc:
            self.record(Op(0, client, "client-error", start=time.monotonic(), end=time.monotonic(), result=INFO,
                           error=f"go: {exc!r}"[:200]))
            while self.take():  # the Go client's share of the budget goes unused
                pass
        finally:
            with contextlib.suppress(Exception):
                process.stdin.close()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _record_go(self, client: int, entry: dict[str, Any], offset: float) -> None:
        queue = entry["queue"]
        value = entry.get("value")
        mode = value.get("mode", "peeklock") if isinstance(value, dict) else "peeklock"
        deliveries = tuple(Delivery(uid=d["uid"], queue=queue, seq=d["seq"], count=d["count"], mode=mode,
                                    session=d.get("session")) for d in entry.get("deliveries") or ())
        self.record(Op(0, client, entry["kind"], queue, start=entry["start"] - offset, end=entry["end"] - offset,
                       result=entry["result"], uids=tuple(entry.get("uids") or ()), deliveries=deliveries,
                       value=value, error=entry.get("error", "")))

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
        queue = self.q[rng.choice((PLAIN, PARTITIONED))]
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
        async with sb.get_queue_receiver(queue, max_wait_time=WAIT) as receiver:
            messages = await self._acall(op, asyncio.wait_for(receiver.receive_messages(max_message_count=5,
                                                                                       max_wait_time=WAIT), 15))
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
        if self.node.pg is not None:
            return self._pg_rows(self.node.pg)
        db = sqlite3.connect(f"file:{self.broker.data_dir / 'messages.db'}?mode=ro", uri=True, timeout=10)
        try:
            rows = db.execute("SELECT entity, sequence_number, state, length(annotations) + length(tail), tail "
                              "FROM messages").fetchall()
        finally:
            db.close()
        mine = set(self.q.values())
        return [row for row in rows if row[0].lower().partition("/")[0] in mine]

    def _pg_rows(self, url: str) -> list[tuple[str, int, int, int, bytes]]:
        import psycopg

        names = [name.lower() for name in self.q.values()]
        with psycopg.connect(url, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT convert_from(entity, 'UTF8'), sequence_number, state, "
                "length(annotations) + length(tail), tail FROM sodalite_messages "
                "WHERE split_part(lower(convert_from(entity, 'UTF8')), '/', 1) = ANY(%s)", (names,)).fetchall()
        return [(str(e), int(q), int(st), int(sz), bytes(t)) for e, q, st, sz, t in rows]

    def recount(self, where: str) -> None:
        started = time.monotonic()
        op = Op(0, -1, "recount", start=started, error=where)
        value: dict[str, Any] = {}
        for _attempt in range(10):
            try:
                value = self._recount_once()
            except Exception as exc:
                op.result, op.error = INFO, f"{where}: {exc!r}"[:200]
                time.sleep(1)
                continue
            op.result, op.error = OK, where
            if all(both["api"] == both["store"] for both in value.values()):
                break
            time.sleep(0.5)  # a timer (a scheduled message coming due, a lock lapsing) may move a count: re-read
        op.value, op.end = value, time.monotonic()
        self.timings["recounts"] += op.end - started
        self.record(op)

    def _recount_once(self) -> dict[str, Any]:
        store: dict[str, Counter[str]] = {name: Counter() for name in self.q.values()}
        for entity, _seq, state, size, _tail in self.store_rows():
            base, _, sub = entity.lower().partition("/")
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
        """The final drain: every message of the seed's queues still stored, read from the SQLite file."""
        for entity, seq, state, _size, tail in self.store_rows():
            found = UID.search(tail)
            if found:
                base, _, sub = entity.lower().partition("/")
                kind = "deadletter" if sub else {1: "deferred", 2: "scheduled"}.get(state, "")
                self.history.stored.append((found.group().decode(), base, kind, seq))
        if HAS_TRACE and self.node.trace_path.exists():
            with self.node.trace_path.open("rb") as trace:
                trace.seek(self.trace_from)
                lines = trace.read().decode(errors="replace").splitlines()
            mine = set(self.q.values())
            entries = []
            for line in lines:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if str(entry.get("entity", "")).lower().partition("/")[0] in mine:
                        entries.append(entry)
            self.history.trace = entries

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> None:
        master = random.Random(self.spec.seed)
        started = time.monotonic()
        self.node.ensure()
        self.setup()
        self.timings["setup"] += time.monotonic() - started
        go = master.random() < self.spec.go and GO_CLIENT.is_file()
        if go:
            self.faults["go-client"] += 1  # not a fault: the seeds with a Go client, counted with the faults
        per_phase = [self.spec.ops // self.spec.phases] * self.spec.phases
        per_phase[-1] += self.spec.ops - sum(per_phase)
        for phase, budget in enumerate(per_phase):
            began = time.monotonic()
            self.remaining = budget
            self.stop_faults.clear()
            threads = [threading.Thread(target=self.client_loop, args=(c, random.Random(master.random())))
                       for c in range(self.spec.clients)]
            if self.spec.async_client:
                threads.append(threading.Thread(target=self.async_loop,
                                                args=(self.spec.clients, random.Random(master.random()))))
            if go:
                threads.append(threading.Thread(target=self.go_loop,
                                                args=(self.spec.clients + 1, random.Random(master.random()))))
            fault_rng = random.Random(master.random())
            fault_thread = threading.Thread(target=self.fault_loop, args=(fault_rng, self.plan(fault_rng, budget)))
            for t in [*threads, fault_thread]:
                t.daemon = True
                t.start()
            deadline = time.monotonic() + 120 + self.spec.ops
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():  # a client stuck in a call: left behind, recorded, the run goes on
                    self.record(Op(0, -1, "client-error", start=time.monotonic(), end=time.monotonic(), result=INFO,
                                   error=f"a client thread still in a call after {120 + self.spec.ops} s"))
                    with self.lock:
                        self.remaining = 0
            self.stop_faults.set()
            with self.progress:
                self.progress.notify_all()
            fault_thread.join(120)
            self.timings["phases"] += time.monotonic() - began
            self.recount(f"the quiescent point after phase {phase + 1}")
        if master.random() < self.spec.restart:
            began = time.monotonic()
            with self.broker_lock:
                self.broker.stop()
                self.timings["stop"] += time.monotonic() - began
                self._restart()
            self.timings["restart"] += time.monotonic() - began
            self.recount("the quiescent point after a restart")
        self.recount("the final quiescent point")
        self.drain()
        began = time.monotonic()
        self.teardown()
        self.timings["teardown"] += time.monotonic() - began


def uid_of(message: Any) -> str:
    """The checker's id of a received message: its body up to the first space (the body is the id, or the id
    and padding)."""
    return str(message).split(" ", 1)[0]


def _seconds(duration: Any) -> float | None:
    """An ISO 8601 duration of the forms the checker writes (PT20S, PT2M, P14D) in seconds."""
    if not isinstance(duration, str):
        return None
    found = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", duration)
    if not found:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _quietly(fn: Any) -> None:
    with contextlib.suppress(Exception):
        fn()


def run(spec: RunSpec, node: Node | None = None) -> RunResult:
    """One seed, on ``node`` (left running for the next seed) or on a node of its own."""
    started = time.monotonic()
    own = node is None
    if node is None:
        node = Node(spec.defect, spec.broker_args, disk="disk-full" in spec.faults and os.geteuid() == 0, pg=spec.pg)
    run_ = _Run(spec, node)
    try:
        run_.run()
    finally:
        if own:
            node.close()
    node.seeds += 1
    partitioned = frozenset({run_.q[PARTITIONED]})
    violations = check_all(run_.history, partitioned=partitioned, strict=spec.strict)
    if violations and spec.save_failing is not None:
        spec.save_failing.mkdir(parents=True, exist_ok=True)
        (spec.save_failing / f"seed-{spec.seed}-history.json").write_text(run_.history.dumps())
    return RunResult(spec, run_.history, violations, time.monotonic() - started, run_.faults, run_.timings)
