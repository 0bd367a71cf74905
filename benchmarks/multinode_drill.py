"""Multi-node drill (issue 18, item 5): 3 broker nodes on one PostgreSQL database, one killed at a time.

Starts its own PostgreSQL (``tests/pg_server.py``: ``initdb`` and ``postgres`` as the ``postgres``
user, a free port, a temporary directory) and three nodes as users start them
(``scripts/serve --store postgresql://... --core v2 --node-id nK``), each client on its own node (no
load balancer). On every node an official-SDK sender sends numbered messages in batches and an
official-SDK PeekLock receiver receives and completes them. Every ``--every`` seconds one node is
killed with ``kill -9`` (round robin) and started again ``--down`` seconds later on the same
database; ``--cycles`` times. Then the senders stop and the survivors drain the queue.

It prints: acknowledged sends, completed messages, lost (acknowledged, never completed: must be 0),
completed-then-redelivered (a message delivered again after its complete was confirmed: must be 0),
completes whose echo died with their node (gone from the store, the client saw an error: not lost),
messages still stored when the drain ended,
messages completed that no send acknowledged (the kill took the acknowledgement, not the message),
and per kill the time until the next message was delivered through another node (the issue: within
10 s; messages locked by the dead node come back when their 5 s lock lapses). Not part of the test run:

    .venv/bin/python benchmarks/multinode_drill.py [--cycles 10] [--every 6] [--down 3] [--haproxy]

``--haproxy`` (issue 18, item 5, behind a load balancer): Debian's ``haproxy`` (installed with
``apt-get install -y haproxy`` when missing) listens on a free 127.0.0.1 port in TCP mode and
spreads connections round robin over the three nodes' AMQP ports (fixed for the run, so a node
comes back where it was; health checks every second take a dead node out of the rotation). Every
client connects through it and keeps one SDK client, sender or receiver for the whole run (the
SDK's own retries, 10 of them): when its node dies the SDK reconnects by itself, through HAProxy,
to a live node. The drill then also prints, per kill, the time from the kill until every client
whose connection died with the node had a delivery (receivers) or an acknowledged send (senders)
again. With retries the SDK may send a batch again whose acknowledgement died with its node, so a
body may be stored twice under two sequence numbers: "completed then redelivered" then counts a
sequence number delivered again after its complete was confirmed, and the copies of retried sends
are counted on their own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from azure.servicebus import ServiceBusClient, ServiceBusMessage

import harness
from harness import Broker, Cleanup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pg_server import PgServer, find_bin_dir

QUEUE = "drill"
NODES = 3


def ensure_haproxy() -> str:
    found = shutil.which("haproxy")
    if found:
        return found
    print("haproxy is not installed: running apt-get install -y haproxy", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "haproxy"], stdout=subprocess.DEVNULL, env=env).returncode:
        subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "haproxy"], check=True, stdout=subprocess.DEVNULL, env=env)
    found = shutil.which("haproxy")
    if found is None:
        sys.exit("haproxy could not be installed")
    return found


def start_haproxy(cleanup: Cleanup, tmp: Path, backends: list[int]) -> int:
    """HAProxy in TCP mode on a free 127.0.0.1 port, round robin over ``backends`` (AMQP ports)."""
    port = harness.free_port()
    servers = "\n".join(f"    server n{k} 127.0.0.1:{p} check inter 1s fall 1 rise 1"
                        for k, p in enumerate(backends))
    config = tmp / "haproxy.cfg"
    config.write_text(f"""global
    maxconn 1000

defaults
    mode tcp
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    retries 3
    option redispatch

listen amqp
    bind 127.0.0.1:{port}
    balance roundrobin
{servers}
""")
    proc = subprocess.Popen([ensure_haproxy(), "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    cleanup.push(lambda: harness.stop_process(proc))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"haproxy exited with status {proc.returncode} (config {config})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return port
        except OSError:
            time.sleep(0.1)
    sys.exit("haproxy did not listen within 30 s")


class Drill:
    def __init__(self, cleanup: Cleanup, tmp: Path, url: str) -> None:
        self.cleanup, self.tmp, self.url = cleanup, tmp, url
        self.brokers: list[Broker | None] = [None] * NODES
        self.ports = [harness.free_port() for _ in range(NODES)]  # fixed: HAProxy's backends
        self.proxy: str | None = None  # the connection string through HAProxy (--haproxy)
        self.errors: list[tuple[float, str]] = []  # (monotonic time, client) of every failed call
        self.successes: list[tuple[float, str]] = []  # (monotonic time, client) of deliveries and acked sends
        self.completed_numbers: set[int] = set()  # sequence numbers of confirmed completes (--haproxy)
        self.stored_twice: set[str] = set()  # bodies completed under two numbers: a retried send (--haproxy)
        self.lock = threading.Lock()
        self.stop_sending = threading.Event()
        self.stop_receiving = threading.Event()
        self.acknowledged: set[str] = set()
        self.completed: dict[str, int] = {}
        self.redelivered_after_complete: list[str] = []
        self.complete_failed: set[str] = set()  # a complete that raised (lock lost, or its node died)
        self.deliveries: list[tuple[float, int]] = []  # (monotonic time, node) of every delivery
        self.kills: list[tuple[float, int]] = []

    def start(self, k: int) -> None:
        data = self.tmp / f"n{k}"
        data.mkdir(parents=True, exist_ok=True)
        config = data / "Config.json"
        config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "drill", "Queues": [
            {"Name": QUEUE, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 100}}]}]}}))
        self.brokers[k] = harness.start_sodalite(
            self.cleanup, data, "FULL", [QUEUE], f"node n{k}",
            extra_args=["--store", self.url, "--core", "v2", "--node-id", f"n{k}", "--port", str(self.ports[k])])

    def connection_string(self, k: int) -> str | None:
        broker = self.brokers[k]
        return broker.connection_string if broker is not None else None

    def send(self, k: int) -> None:
        n = 0
        while not self.stop_sending.is_set():
            conn = self.connection_string(k)
            if conn is None:
                time.sleep(0.2)
                continue
            try:
                with ServiceBusClient.from_connection_string(conn, retry_total=0) as client, \
                        client.get_queue_sender(QUEUE) as sender:
                    while not self.stop_sending.is_set() and self.connection_string(k) == conn:
                        bodies = [f"n{k}-{n + i}" for i in range(10)]
                        n += 10
                        sender.send_messages([ServiceBusMessage(b, message_id=b) for b in bodies])
                        with self.lock:
                            self.acknowledged.update(bodies)
                        time.sleep(0.05)
            except Exception:  # the node died under the send: its acknowledgement never came
                time.sleep(0.2)

    def receive(self, k: int) -> None:
        while not self.stop_receiving.is_set():
            conn = self.connection_string(k)
            if conn is None:
                time.sleep(0.2)
                continue
            try:
                with ServiceBusClient.from_connection_string(conn, retry_total=0) as client, \
                        client.get_queue_receiver(QUEUE, prefetch_count=20) as receiver:
                    while not self.stop_receiving.is_set() and self.connection_string(k) == conn:
                        for m in receiver.receive_messages(max_message_count=20, max_wait_time=1):
                            body = str(m)
                            with self.lock:
                                self.deliveries.append((time.monotonic(), k))
                                if body in self.completed:
                                    self.redelivered_after_complete.append(body)
                            try:
                                receiver.complete_message(m)
                            except Exception:
                                with self.lock:
                                    self.complete_failed.add(body)
                                raise
                            with self.lock:
                                self.completed[body] = self.completed.get(body, 0) + 1
            except Exception:  # the node died, or a lock was lost with it: the store keeps the message
                time.sleep(0.2)

    def send_through_proxy(self, k: int) -> None:
        """One SDK client and sender for the whole run: the SDK reconnects through HAProxy by itself."""
        assert self.proxy is not None
        name, n = f"sender {k}", 0
        with ServiceBusClient.from_connection_string(self.proxy, retry_total=10, retry_backoff_factor=0.5,
                                                     retry_backoff_max=2) as client, \
                client.get_queue_sender(QUEUE) as sender:
            while not self.stop_sending.is_set():
                bodies = [f"p{k}-{n + i}" for i in range(10)]
                n += 10
                try:
                    sender.send_messages([ServiceBusMessage(b, message_id=b) for b in bodies])
                except Exception:  # retries used up while its node was dead: the same sender goes on
                    with self.lock:
                        self.errors.append((time.monotonic(), name))
                    time.sleep(0.2)
                    continue
                with self.lock:
                    self.acknowledged.update(bodies)
                    self.successes.append((time.monotonic(), name))
                time.sleep(0.05)

    def receive_through_proxy(self, k: int) -> None:
        assert self.proxy is not None
        name = f"receiver {k}"
        with ServiceBusClient.from_connection_string(self.proxy, retry_total=10, retry_backoff_factor=0.5,
                                                     retry_backoff_max=2) as client, \
                client.get_queue_receiver(QUEUE, prefetch_count=20) as receiver:
            while not self.stop_receiving.is_set():
                try:
                    messages = receiver.receive_messages(max_message_count=20, max_wait_time=1)
                except Exception:
                    with self.lock:
                        self.errors.append((time.monotonic(), name))
                    time.sleep(0.2)
                    continue
                for m in messages:
                    body, seq = str(m), int(m.sequence_number or 0)
                    with self.lock:
                        self.deliveries.append((time.monotonic(), -1))
                        self.successes.append((time.monotonic(), name))
                        # The SDK retries a send whose acknowledgement died with its node: a second
                        # copy of the body (another sequence number) is not a redelivery.
                        if seq in self.completed_numbers:
                            self.redelivered_after_complete.append(body)
                        elif body in self.completed:
                            self.stored_twice.add(body)
                    try:
                        receiver.complete_message(m)
                    except Exception:  # lock lost with its node: the message comes back
                        with self.lock:
                            self.complete_failed.add(body)
                            self.errors.append((time.monotonic(), name))
                        continue
                    with self.lock:
                        self.completed[body] = self.completed.get(body, 0) + 1
                        self.completed_numbers.add(seq)

    def reconnected_after(self, at: float, until: float) -> float | str:
        """The time from a kill at ``at`` until every client that failed in [at, until) succeeded
        again; "never" if one did not, "no client" if none failed (none was on the killed node)."""
        failed = {client for t, client in self.errors if at <= t < until}
        back = []
        for client in failed:
            later = [t for t, c in self.successes if c == client and t > at
                     and t > min(e for e, c2 in self.errors if c2 == client and e >= at)]
            if not later:
                return "never"
            back.append(min(later) - at)
        return max(back) if back else "no client"

    def kill(self, k: int) -> None:
        broker = self.brokers[k]
        assert broker is not None
        self.brokers[k] = None
        harness.kill9(broker)
        with self.lock:
            self.kills.append((time.monotonic(), k))

    def resumed_after(self, at: float, killed: int) -> float | None:
        later = [t for t, node in self.deliveries if t > at and node != killed]
        return min(later) - at if later else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10, help="kill/restart cycles (default 10)")
    parser.add_argument("--every", type=float, default=6.0, help="seconds between kills (default 6)")
    parser.add_argument("--down", type=float, default=3.0, help="seconds a killed node stays down (default 3)")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds allowed to drain at the end (default 60)")
    parser.add_argument("--max-seconds", type=float, default=900, help="run-time bound (default 900)")
    parser.add_argument("--haproxy", action="store_true",
                        help="clients connect through HAProxy (round robin over the nodes) and reconnect by themselves")
    args = parser.parse_args()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
    print(f"# Multi-node drill: {NODES} nodes on one PostgreSQL database, --core v2, {args.cycles} kill cycles "
          f"every {args.every:g} s, down {args.down:g} s"
          f"{', clients through HAProxy' if args.haproxy else ', each client on its own node'}; "
          f"{harness.version_line()}", flush=True)
    with harness.bounded_run(args.max_seconds) as cleanup:
        server = PgServer(bin_dir).start()
        cleanup.push(server.stop)
        url = server.create_database("drill")
        drill = Drill(cleanup, harness.temp_dir(cleanup, "sodalite-drill-"), url)
        for k in range(NODES):
            drill.start(k)
        if args.haproxy:
            tmp = harness.temp_dir(cleanup, "sodalite-drill-haproxy-")
            proxy_port = start_haproxy(cleanup, tmp, drill.ports)
            first = drill.connection_string(0)
            assert first is not None
            drill.proxy = re.sub(r"(Endpoint=sb://[^:;/]+):\d+", rf"\g<1>:{proxy_port}", first)
            print(f"haproxy on 127.0.0.1:{proxy_port} -> nodes on {drill.ports}", flush=True)
        send, receive = (drill.send_through_proxy, drill.receive_through_proxy) if args.haproxy else (
            drill.send, drill.receive)
        threads = [threading.Thread(target=f, args=(k,), daemon=True)
                   for k in range(NODES) for f in (send, receive)]
        for t in threads:
            t.start()
        time.sleep(args.every)
        for cycle in range(args.cycles):
            k = cycle % NODES
            drill.kill(k)
            print(f"cycle {cycle + 1}: killed n{k}", flush=True)
            time.sleep(args.down)
            drill.start(k)
            time.sleep(max(args.every - args.down, 0.5))
        drill.stop_sending.set()
        deadline = time.monotonic() + args.drain
        while time.monotonic() < deadline:
            with drill.lock:
                missing = drill.acknowledged - drill.completed.keys()
            if not missing:
                break
            time.sleep(1)
        drill.stop_receiving.set()
        time.sleep(2)
        with drill.lock:
            acknowledged, completed = set(drill.acknowledged), dict(drill.completed)
            redelivered = list(drill.redelivered_after_complete)
            kills = list(drill.kills)
        missing = acknowledged - completed.keys()
        with psycopg.connect(url) as conn:  # what the store still holds of the queue, by MessageId
            stored = {bytes(r[0]).decode() for r in conn.execute(
                "SELECT message_id FROM sodalite_messages WHERE entity = %s", (QUEUE,))}
        # Not confirmed but gone from the store: its complete committed and the node died before the
        # echo (the client saw an error). Still in the store: not lost, but not drained in time.
        echo_lost = {b for b in missing if b not in stored and b in drill.complete_failed}
        still_stored = missing & stored
        lost = missing - echo_lost - still_stored
        unacknowledged = completed.keys() - acknowledged
        resumes = [drill.resumed_after(at, k) for at, k in kills]
        if args.haproxy:  # deliveries do not say which node they came through: the next one after the kill
            resumes = [next((t - at for t, _ in sorted(drill.deliveries) if t > at), None) for at, _ in kills]
        measured = [r for r in resumes if r is not None]
        print("\n## Result\n")
        print("| acknowledged sends | completed (confirmed) | completed, echo lost with its node | still stored "
              "| lost | completed then redelivered | completed, never acknowledged "
              "| kill to next delivery through another node (median / max) |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {len(acknowledged):,} | {len(completed):,} | {len(echo_lost)} | {len(still_stored)} | {len(lost)} "
              f"| {len(redelivered)} | {len(unacknowledged)} "
              f"| {statistics.median(measured) if measured else float('nan'):.2f} s / "
              f"{max(measured) if measured else float('nan'):.2f} s |")
        if args.haproxy:
            with drill.lock:
                back = [drill.reconnected_after(at, at + args.every) for at, _ in kills]
            done = [b for b in back if isinstance(b, float)]
            print(f"\nclients whose node died: back (a delivery or an acknowledged send) after the kill, "
                  f"per kill: {', '.join(b if isinstance(b, str) else f'{b:.2f} s' for b in back)}; "
                  f"median {statistics.median(done) if done else float('nan'):.2f} s, "
                  f"max {max(done) if done else float('nan'):.2f} s; failed calls in all: {len(drill.errors)}; "
                  f"messages stored twice by a send the SDK retried (another sequence number, not a "
                  f"redelivery): {len(drill.stored_twice)}")
            with drill.lock:
                per_client: dict[str, list[float]] = {}
                for when, client in drill.successes:
                    per_client.setdefault(client, []).append(when)
            print("per client: " + "; ".join(
                f"{client} {len(times):,} calls, last {times[-1] - kills[-1][0]:+.1f} s from the last kill"
                for client, times in sorted(per_client.items())))
        if still_stored:
            print(f"still stored (not drained in time): {sorted(still_stored)[:20]}")
        if lost:
            print(f"lost: {sorted(lost)[:20]}")
        if redelivered:
            print(f"redelivered after a confirmed complete: {redelivered[:20]}")
        return 0 if not lost and not redelivered and not still_stored else 1


if __name__ == "__main__":
    sys.exit(main())
