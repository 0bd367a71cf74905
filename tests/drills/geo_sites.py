"""Two geo sites for the geo drill: each a PostgreSQL server and a broker node started as users
start them (``scripts/serve --store ... --geo-site NAME --geo-peer OTHER=URL``), and HAProxy in
front of both nodes with an HTTP health check on each node's ``/health``: the one address.

The databases come from tests/pg_cluster.py (one primary and one streaming standby: the primary
is site ``a``'s database, the standby site ``b``'s). A node on a standby does not print its
connection string until its site is promoted: :class:`GeoNode` returns from ``start`` once the
node has printed its management port and ``Geo: site``, and :meth:`GeoNode.wait_serving` waits for
the rest. :class:`Load` is the official SDK's load through one address.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from broker_process import ROOT, BrokerProcess, free_port_below_ephemeral_range

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
QUEUE = "geo"
SENDERS = 2
SODALITE = [sys.executable, "-m", "sodalite.cli.entry"]


class GeoNode(BrokerProcess):
    """A broker node of one site (see the module docstring)."""

    def __init__(self, base: Path, config: Path, site: str, url: str, peer: str, peer_url: str) -> None:
        super().__init__(base / f"node-{site}", config,
                         extra_args=["--store", url, "--node-id", f"node-{site}", "--geo-site", site,
                                     "--geo-peer", f"{peer}={peer_url}", "--log-level", "WARNING"])
        self.site = site

    def _start_once(self, timeout: float) -> BrokerProcess:
        # The ports are fixed before the start (BrokerProcess.start), so the connection string a
        # promoted node prints later names the port already known.
        args = [*self._args()]
        self.output = []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**__import__("os").environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(10)
                raise RuntimeError("geo node exited during startup:\n" + "".join(self.output))
            self.output.append(line)
            http = re.search(r"Management \(HTTP\): http://[^:]+:(\d+)", line)
            if http:
                self.http_port = int(http.group(1))
            if line.startswith("Geo: site"):
                threading.Thread(target=self._drain, daemon=True).start()
                self.connection_string = self.connection_string_with()
                return self
        raise RuntimeError("geo node did not start in time:\n" + "".join(self.output))

    def _args(self) -> list[str]:
        from broker_process import SERVE

        args = [str(SERVE), "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir),
                "--admin-port", str(self.admin_port), "--amqps-port", "-1", "--http-port", str(self.http_port),
                *self.extra_args]
        if self.config is not None:
            args += ["--config", str(self.config)]
        return args

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/health", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except OSError as exc:
            return 0, {"error": str(exc)}

    def wait_role(self, role: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            _status, body = self.health()
            if body.get("role") == role:
                return body
            time.sleep(0.1)
        raise AssertionError(f"node of site {self.site}: not {role} within {timeout} s: {body}\n"
                             + "".join(self.output[-30:]))


class HaProxy:
    """HAProxy on a free loopback port, forwarding AMQP to the node whose ``/health`` answers 200."""

    def __init__(self, nodes: list[GeoNode], interval_ms: int = 500) -> None:
        self.port = free_port_below_ephemeral_range()
        self.base = Path(tempfile.mkdtemp(prefix="sodalite-haproxy-"))
        servers = "\n".join(
            f"    server {n.site} 127.0.0.1:{n.port} check port {n.http_port} inter {interval_ms} fall 1 rise 1"
            for n in nodes)
        self.config = self.base / "haproxy.cfg"
        self.config.write_text(CONFIG.format(port=self.port, servers=servers))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HaProxy:
        log = open(self.base / "haproxy.log", "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        import socket

        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("haproxy did not listen: " + (self.base / "haproxy.log").read_text())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)

    def connection_string(self) -> str:
        return (f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName=RootManageSharedAccessKey;"
                "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;")


# The one address (docs/geo-replication.md shows the same configuration): TCP mode, each node checked
# with GET /health on its management port, only the one answering 200 (the primary site's) in service;
# a connection to a node that stops being primary is cut, so its clients reconnect to the new one.
CONFIG = """\
global
    maxconn 512
defaults
    mode tcp
    timeout connect 2s
    timeout client 5m
    timeout server 5m
frontend servicebus
    bind 127.0.0.1:{port}
    default_backend sodalite
backend sodalite
    option httpchk GET /health
    http-check expect status 200
    default-server on-marked-down shutdown-sessions
{servers}
"""


@dataclass
class Load:
    """What the SDK clients saw: acknowledged sends (id -> time), completions, every delivery."""

    connection_string: str
    acked: dict[str, float] = field(default_factory=dict)
    completed: dict[int, float] = field(default_factory=dict)  # sequence number -> when completed
    received: list[tuple[str, int, float]] = field(default_factory=list)  # (id, sequence number, time)
    completed_then_delivered: list[int] = field(default_factory=list)  # sequence numbers
    send_errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    sending: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.sending.set()
        self.threads = [threading.Thread(target=self._send, args=(i,), daemon=True) for i in range(SENDERS)]
        self.threads.append(threading.Thread(target=self._receive, daemon=True))
        for thread in self.threads:
            thread.start()

    def _client(self) -> ServiceBusClient:
        return ServiceBusClient.from_connection_string(self.connection_string, retry_total=2,
                                                       retry_backoff_factor=0.2, retry_backoff_max=1)

    def _send(self, index: int) -> None:
        number = 0
        while not self.stop.is_set():
            if not self.sending.is_set():
                time.sleep(0.05)
                continue
            body = f"s{index}-{number}"
            try:
                with self._client() as client, client.get_queue_sender(QUEUE) as sender:
                    while not self.stop.is_set() and self.sending.is_set():
                        sender.send_messages(ServiceBusMessage(body, message_id=body))
                        with self.lock:
                            self.acked[body] = time.time()
                        number += 1
                        body = f"s{index}-{number}"
                        time.sleep(0.01)
            except (ServiceBusError, OSError, RuntimeError):
                with self.lock:
                    self.send_errors += 1
                time.sleep(0.1)  # the same body again: at-least-once

    def _receive(self) -> None:
        while not self.stop.is_set():
            try:
                with self._client() as client, client.get_queue_receiver(QUEUE, prefetch_count=0) as receiver:
                    while not self.stop.is_set():
                        for message in receiver.receive_messages(max_message_count=20, max_wait_time=1):
                            body, number = str(message), message.sequence_number or 0
                            with self.lock:
                                if number in self.completed:
                                    self.completed_then_delivered.append(number)
                                self.received.append((body, number, time.time()))
                            receiver.complete_message(message)
                            with self.lock:
                                self.completed[number] = time.time()
            except (ServiceBusError, OSError, RuntimeError):
                time.sleep(0.1)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def longest_send_pause(self, after: float, before: float) -> float:
        """The longest gap between two acknowledged sends in [after, before]."""
        with self.lock:
            times = sorted(t for t in self.acked.values() if after <= t <= before)
        return max((b - a for a, b in itertools.pairwise(times)), default=before - after)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)


def geo(*args: str, timeout: float = 120) -> dict[str, Any]:
    done = subprocess.run([*SODALITE, "geo", *args, "--json"], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
