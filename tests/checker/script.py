"""Deterministic regression scripts: a minimized history replayed as steps, one after the other (each step
a barrier: it ends before the next begins), with faults at named points, against a fresh broker; the
history they make is checked with the same promise checks as the sweep, strictly (no deliveries the
application cannot see, so a delivery count must rise by exactly one).

Steps (tuples):
  ("send", queue, n)                 n single sends (``session=`` and ``size=`` as a 4th item dict)
  ("batch", queue, n)                one batch of n
  ("receive", queue, mode, n, settle)  mode "peeklock" or "rad"; settle complete/abandon/deadletter/defer/leave
  ("hold", queue, n)                 n PeekLock messages received and held (their receiver kept open) ...
  ("settle", settle)                 ... until this step settles them all (complete/abandon/deadletter/defer)
  ("midstream", queue, prefetch)     a ReceiveAndDelete receiver with that prefetch, closed after one message
  ("session", queue, sid, n, state)  session sid accepted (None: the next available), n messages received (left
                                     locked), its state read, then set to ``state`` (None: not set), the
                                     receiver closed (the session released); ``prefetch=`` as a 6th item dict,
                                     and ``node="a"`` there: through the first of two nodes (``play(pg=True)``)
  ("move", queue, target)            the dead-letter queue moved (target None: resubmitted) via the JSON API
  ("purge", queue)                   the dead-letter queue purged via the JSON API
  ("kill9",)                         kill -9 and restart (a named fault point)
  ("kill9-b",)                       on two nodes: the second node killed with kill -9 and restarted
  ("via-a", step)                    the step through the first of two nodes (``play(pg=True)``)
  ("go", queue, n, settle, offline)  the official Go SDK receives n PeekLock messages and settles them all
                                     (complete/abandon/deadletter); with ``offline`` seconds, the store is
                                     taken offline once the receive returned, before the settlements (a
                                     named point: the Go client pauses there), and back online after that long
  ("unauthenticated", n)             n connections that send the AMQP header and nothing more (held)
  ("opened-unauthenticated", n)      n connections through SASL and AMQP open that never put a token (held)
  ("unwritten", queue, n)            a ReceiveAndDelete link given credit n by a raw AMQP client whose session window
                                     is closed (the broker takes n messages, deletes them, and cannot write their
                                     transfers), then detached: the broker puts them back (a named fault point)
  ("detach", queue, settle[, how])   one PeekLock message received, its link closed (how "detached": detached
                                     without closing), then settled
  ("update", queue, properties)      an entity update through the JSON API (Config.json property names)
  ("offline",) / ("online",)         the store taken offline / back online via the JSON API
  ("disk-full",) / ("disk-free",)    the data directory's filesystem filled / freed (``play(disk=True)``)
  ("wait", seconds)                  e.g. for locks to lapse
  ("recount", name)                  a quiescent point: runtime counts against the store
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import socket
import subprocess
import threading
import time
import uuid
from typing import Any

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import KEY, KEY_NAME
from raw_client import RawClient

from checker.history import History, Op
from checker.promises import Violation, check_all
from checker.runner import GO_CLIENT, PARTITIONED, Node, RunSpec, _Run, uid_of
from pg_server import shared_server
from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER
from sodalite.amqp.performatives import Source, Target
from sodalite.model.sas import generate_token

Step = tuple[Any, ...]


_NODES: dict[tuple[str | None, tuple[str, ...], bool], Node] = {}
_SCRIPTS = itertools.count(1)


def node_for(defect: str | None = None, broker_args: tuple[str, ...] = (), disk: bool = False,
             pg: bool = False) -> Node:
    """A broker kept for the scripts that want the same defect switch and options (each script has queues of
    its own); with ``pg``, two broker nodes on one PostgreSQL database; ``close_nodes`` stops them all."""
    key = (defect, broker_args, disk or pg)
    node = _NODES.get(key)
    if node is None:
        url = shared_server().create_database("script") if pg else None
        node = _NODES[key] = Node(defect, broker_args, disk=disk, pg=url)
    node.ensure()
    return node


def close_nodes() -> None:
    while _NODES:
        _NODES.popitem()[1].close()


def play(steps: list[Step], defect: str | None = None, strict: bool = True,
         broker_args: tuple[str, ...] = (), disk: bool = False, pg: bool = False) -> tuple[History, list[Violation]]:
    """Replay ``steps`` (queues named by role: plain, sess, part, target) on queues of their own; with
    ``disk`` on a broker whose data directory is on a small filesystem (root only); with ``pg`` on two
    broker nodes sharing a PostgreSQL database (steps go to the second, ``node-b``, unless they say)."""
    node = node_for(defect, broker_args, disk, pg)
    run_ = _Run(RunSpec(seed=next(_SCRIPTS) * 1000 + os.getpid() % 1000, defect=defect, faults=(),
                        broker_args=broker_args), node)
    held: list[Any] = []
    try:
        run_.setup()
        with ServiceBusClient.from_connection_string(run_.connection_string(via_proxy=False),
                                                     retry_total=1, retry_backoff_factor=0.1) as sb:
            for step in steps:
                sb = _step(run_, sb, step, held)
        time.sleep(0.5)
        run_.recount("the end of the script")
        run_.drain()
    finally:
        for s in held:
            with contextlib.suppress(Exception):
                s.close()
        run_.teardown()
    return run_.history, check_all(run_.history, partitioned=frozenset({run_.q[PARTITIONED]}), strict=strict)


def _step(run_: _Run, sb: ServiceBusClient, step: Step, held: list[Any]) -> ServiceBusClient:
    kind = step[0]
    if len(step) > 1 and step[1] in run_.q:  # a role: this run's queue of that role
        step = (kind, run_.q[step[1]], *step[2:])
    if kind == "move" and step[2] in run_.q:
        step = (kind, step[1], run_.q[step[2]])
    rng = random.Random(0)
    if kind in ("send", "batch"):
        queue, n = step[1], step[2]
        options = step[3] if len(step) > 3 else {}
        made = []
        for _ in range(n):
            message, uid, session, _key = run_._message(0, rng, queue, session=options.get("session"))
            if options.get("size"):
                message = ServiceBusMessage(uid + " " + "x" * options["size"], message_id=uid, session_id=session,
                                            application_properties={"uid": uid})
            made.append((message, uid))
        def send(messages: list[ServiceBusMessage]) -> None:  # the sender's open is part of the operation
            with sb.get_queue_sender(queue) as sender:
                sender.send_messages(messages, timeout=10)
        if kind == "batch":
            run_._call(Op(0, 0, "send", queue, uids=tuple(u for _m, u in made)), lambda: send([m for m, _u in made]))
        for message, uid in made if kind == "send" else []:
            run_._call(Op(0, 0, "send", queue, uids=(uid,)), lambda m=message: send([m]))
    elif kind == "receive":
        queue, mode, n, settle = step[1:5]
        receive_mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE if mode == "rad" else ServiceBusReceiveMode.PEEK_LOCK
        with sb.get_queue_receiver(queue, receive_mode=receive_mode, max_wait_time=3) as receiver:
            op = Op(0, 0, "receive", queue, value={"mode": mode, "credit": n})
            got: list[Any] = []

            def take() -> list[Any]:
                while len(got) < n:
                    batch = receiver.receive_messages(max_message_count=n - len(got), max_wait_time=3)
                    if not batch:
                        break
                    got.extend(batch)
                return got
            messages = run_._call(op, take) or []
            op.deliveries = run_._deliveries(messages, queue, mode)
            if mode == "peeklock" and settle != "leave":
                for m in messages:
                    settler = {"complete": receiver.complete_message, "abandon": receiver.abandon_message,
                               "deadletter": receiver.dead_letter_message, "defer": receiver.defer_message}[settle]
                    run_._call(Op(0, 0, settle, queue, uids=(uid_of(m),), value={"seq": m.sequence_number}),
                               lambda m=m, s=settler: s(m))
    elif kind == "session":
        queue, sid, n, state = step[1:5]
        options = step[5] if len(step) > 5 else {}
        prefetch = options.get("prefetch", 0)
        if options.get("node") == "a":
            port = run_.broker.port
            with ServiceBusClient.from_connection_string(
                    f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                    "UseDevelopmentEmulator=true;", retry_total=1, retry_backoff_factor=0.1) as other:
                _step(run_, other, (kind, *step[1:5], {**options, "node": None}), held)
            return sb
        with sb.get_queue_receiver(queue, session_id=sid or NEXT_AVAILABLE_SESSION, max_wait_time=3,
                                   prefetch_count=prefetch) as receiver:
            sid = receiver.session.session_id
            op = Op(0, 0, "receive", queue, session=sid, value={"mode": "peeklock", "credit": max(n, prefetch)})
            messages = run_._call(op, lambda: list(receiver.receive_messages(max_message_count=n, max_wait_time=3))
                                  if n else [])
            op.deliveries = run_._deliveries(messages or [], queue, "peeklock")
            get = Op(0, 0, "session_get", queue, session=sid)
            value = run_._call(get, receiver.session.get_state)
            get.value = value.decode() if isinstance(value, bytes) else value
            if state is not None:
                put = Op(0, 0, "session_set", queue, session=sid, value=state)
                run_._call(put, lambda: receiver.session.set_state(state.encode()))
    elif kind == "hold":
        queue, n = step[1], step[2]
        receiver = sb.get_queue_receiver(queue, max_wait_time=3)
        receiver.__enter__()
        held.append(receiver)
        op = Op(0, 0, "receive", queue, value={"mode": "peeklock", "credit": n})
        messages = run_._call(op, lambda: list(receiver.receive_messages(max_message_count=n, max_wait_time=3)))
        op.deliveries = run_._deliveries(messages or [], queue, "peeklock")
        run_.holding = (receiver, queue, messages or [])
    elif kind == "settle":
        receiver, queue, messages = run_.holding
        settler = {"complete": receiver.complete_message, "abandon": receiver.abandon_message,
                   "deadletter": receiver.dead_letter_message, "defer": receiver.defer_message}[step[1]]
        for m in messages:
            run_._call(Op(0, 0, step[1], queue, uids=(uid_of(m),), value={"seq": m.sequence_number}),
                       lambda m=m: settler(m))
    elif kind == "via-a":  # ("via-a", step): the step through the first of two nodes (play(pg=True))
        port = run_.broker.port
        with ServiceBusClient.from_connection_string(
                f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                "UseDevelopmentEmulator=true;", retry_total=1, retry_backoff_factor=0.1) as other:
            _step(run_, other, step[1], held)
    elif kind == "go":
        _go(run_, *step[1:5])
    elif kind == "midstream":
        queue, prefetch = step[1], step[2]
        receiver = sb.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                         prefetch_count=prefetch, max_wait_time=3)
        op = Op(0, 0, "receive", queue, value={"mode": "rad", "credit": prefetch, "closed_early": True})
        with receiver:
            messages = run_._call(op, lambda: list(receiver.receive_messages(max_message_count=1, max_wait_time=3)))
            op.deliveries = run_._deliveries(messages or [], queue, "rad")
        run_.fault("close-midstream", "receiver")
    elif kind == "move":
        queue, target = step[1], step[2]
        body: dict[str, Any] = {"subQueue": "deadletter", "all": True}
        if target:
            body["target"] = target
        run_._call(Op(0, 0, "move", queue, value=target or queue),
                   lambda: run_.api("POST", f"/api/v1/entities/{queue}/$move", body))
    elif kind == "purge":
        queue = step[1]
        run_._call(Op(0, 0, "purge", queue, value="deadletter"),
                   lambda: run_.api("POST", f"/api/v1/entities/{queue}/$purge", {"subQueue": "deadletter"}))
    elif kind == "kill9":
        sb.close()
        run_.broker.kill()
        run_.fault("kill9")
        run_._restart()
        return ServiceBusClient.from_connection_string(run_.connection_string(via_proxy=False),
                                                      retry_total=1, retry_backoff_factor=0.1)
    elif kind == "kill9-b":  # on two nodes (play(pg=True)): the second node, the scripts' own, killed and restarted
        assert run_.node.peer is not None
        sb.close()
        run_.node.peer.kill()
        run_.fault("pg-node-kill", "node-b")
        run_._retry(lambda: run_._start_again(run_.node.peer), attempts=5)
        return ServiceBusClient.from_connection_string(run_.connection_string(via_proxy=False),
                                                      retry_total=1, retry_backoff_factor=0.1)
    elif kind == "unauthenticated":
        run_.fault("unauthenticated", f"{step[1]} connections")
        for _ in range(step[1]):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", run_.broker.port), timeout=2)
                s.sendall(b"AMQP\x03\x01\x00\x00")
                held.append(s)
    elif kind == "opened-unauthenticated":
        run_.fault("unauthenticated", f"{step[1]} opened connections")
        for _ in range(step[1]):
            client = RawClient(run_.broker.port)  # SASL and AMQP open done, no token ever put on $cbs
            client.flush()
            held.append(client)
    elif kind == "unwritten":
        _unwritten(run_, step[1], step[2])
    elif kind == "detach":
        queue, settle = step[1], step[2]
        with sb.get_queue_receiver(queue, max_wait_time=3) as receiver:
            op = Op(0, 0, "receive", queue, value={"mode": "peeklock", "credit": 1})
            messages = run_._call(op, lambda: list(receiver.receive_messages(max_message_count=1, max_wait_time=3)))
            op.deliveries = run_._deliveries(messages or [], queue, "peeklock")
            run_._detach(receiver, random.Random(0 if step[3:4] == ("detached",) else 1))  # 0: detach, not close
            settler = {"complete": receiver.complete_message, "abandon": receiver.abandon_message,
                       "deadletter": receiver.dead_letter_message, "defer": receiver.defer_message}[settle]
            for m in messages or []:
                run_._call(Op(0, 0, settle, queue, uids=(uid_of(m),), value={"seq": m.sequence_number}),
                           lambda m=m, s=settler: s(m))
    elif kind == "update":
        queue, properties = step[1], {**run_.properties[step[1]], **step[2]}
        run_._call(Op(0, 0, "update", queue, value={"properties": properties}),
                   lambda: run_.api("PUT", f"/api/v1/entities/{queue}", {"properties": properties}))
        run_.properties[queue] = properties
    elif kind in ("offline", "online"):
        run_.fault("store-offline", kind)
        run_.api("POST", f"/api/v1/stores/default/{kind}")
    elif kind == "disk-full":
        assert run_.node.mount is not None, "play(disk=True) needs root to mount a small filesystem"
        with contextlib.suppress(OSError), (run_.node.mount / "filler").open("wb") as out:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        run_.fault("disk-full")
    elif kind == "disk-free":
        assert run_.node.mount is not None
        (run_.node.mount / "filler").unlink(missing_ok=True)
    elif kind == "wait":
        time.sleep(step[1])
    elif kind == "recount":
        run_.recount(step[1])
    else:
        raise ValueError(f"unknown step {step!r}")
    return sb


def _unwritten(run_: _Run, queue: str, n: int) -> None:
    """A ReceiveAndDelete link whose transfers the broker can never write: a raw AMQP client (the SDKs keep
    their session window open) begins its session with an incoming window of 0, attaches, gives credit n
    and reads nothing; once the broker has taken the messages (deleted, their transfers queued in its
    session), the link detaches. No delivery reaches the application, so the receive records none."""
    port = (run_.node.peer or run_.broker).port
    client = RawClient(port)
    op = Op(0, 0, "receive", queue, value={"mode": "rad", "credit": n})
    try:
        audience = f"sb://localhost:{port}/"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        client.conn.session_window = 0  # a second session for the link ($cbs answered on the first)
        closed = client.conn.begin()

        def stored() -> int:
            return sum(1 for row in run_.store_rows() if row[0].lower() == queue.lower())

        def take() -> list[Any]:
            address = f"amqps://localhost:{port}/{queue}"
            receiver = closed.attach(str(uuid.uuid4()), RECEIVER, Source(address), Target(address), snd_settle_mode=1)
            client.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is receiver)
            before = stored()
            receiver.issue_credit(n)
            client.flush()
            deadline = time.monotonic() + 15
            while stored() > before - min(n, before):  # the named point: taken (deleted), none written
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the broker did not take {n} messages of {queue} for the link")
                time.sleep(0.1)
            run_.fault("detach", "transfers unwritten")
            receiver.detach(None)
            client.flush()
            client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver, timeout=30)
            return []
        run_._call(op, take)
        assert op.result == "ok", f"the named point was not reached: {op.error}"
    finally:
        client.close()


def _go(run_: _Run, queue: str, n: int, settle: str, offline: float) -> None:
    """The Go client (tests/go/checker.go, built by sdk_builds) with one receive, the store taken offline at
    the named point between the receive and its settlements."""
    process = subprocess.Popen([str(GO_CLIENT), run_.connection_string(via_proxy=False), "checker"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdin is not None and process.stdout is not None
    offset = time.time() - time.monotonic()
    request = {"op": "receive", "queue": queue, "mode": "peeklock", "count": n, "settle": [settle] * n,
               "pause": 1.0 if offline else 0}
    try:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        back: threading.Thread | None = None
        while line := process.stdout.readline():
            entry = json.loads(line)
            if entry.get("done"):
                break
            run_._record_go(0, entry, offset)
            if entry["kind"] == "receive" and offline:
                run_.fault("store-offline", f"{offline:.1f}s")
                run_.api("POST", "/api/v1/stores/default/offline")
                back = threading.Timer(offline, run_.api, args=("POST", "/api/v1/stores/default/online"))
                back.start()
        if back is not None:
            back.join()
    finally:
        process.stdin.close()
        process.wait(20)
