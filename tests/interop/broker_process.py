"""A broker started the way the README starts it: `scripts/serve`, as a subprocess, on loopback."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "scripts" / "serve"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def write_config(path: Path, queues: list[dict[str, Any]], **namespace: Any) -> Path:
    config = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": queues, **namespace}]}}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def free_port_below_ephemeral_range() -> int:
    """A free loopback port under the kernel's ephemeral range.

    A broker restarted on a port from the ephemeral range can find it taken (EADDRINUSE): while it
    was down, a client's outgoing connection (or another test's broker asking for port 0) may have
    been given that very port. Ports below the range are never handed out that way."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class _PortTaken(RuntimeError):
    """The broker could not bind a port it was given (taken between the probe and its bind)."""


class BrokerProcess:
    def __init__(self, data_dir: Path, config: Path | None, port: int = 0, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.config = config
        self.port = port
        self.extra_args = extra_args or []  # more `sodalite serve` options, e.g. ["--log-format", "json"]
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.connection_string = ""
        self.admin_port = 0
        self.admin_connection_string = ""
        self.admin_certificate = ""
        # amqps: every test broker picks a free port (0), so parallel brokers never collide on 5671.
        self.amqps_port = 0
        self.amqps_connection_string = ""
        self.tls_certificate = ""
        self.metrics_url = ""
        self.http_port = 0  # the plain-HTTP management API, on a free port
        self.command_prefix: list[str] = []  # run serve under this, e.g. ["ip", "netns", "exec", name]

    def start(self, timeout: float = 120.0) -> BrokerProcess:
        # Ports fixed at the first start, below the ephemeral range, so a restart finds them free.
        chosen = [listener for listener in ("port", "admin_port", "amqps_port", "http_port")
                  if getattr(self, listener) == 0]
        for attempt in range(5):
            for listener in chosen:
                setattr(self, listener, free_port_below_ephemeral_range())
            try:
                return self._start_once(timeout)
            except _PortTaken:
                # Another process bound a port we probed free before the broker could (brokers of other
                # workers pick from the same range): pick again. Ports a test fixed are not changed.
                if not chosen or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> BrokerProcess:
        args = [str(SERVE), "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir),
                "--admin-port", str(self.admin_port), "--amqps-port", str(self.amqps_port),
                "--http-port", str(self.http_port), *self.extra_args]
        if self.config is not None:
            args += ["--config", str(self.config)]
        self.output = []
        args = [*self.command_prefix, *args]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                output = "".join(self.output)
                self.proc.wait(10)
                if "address already in use" in output.lower():
                    raise _PortTaken("broker exited during startup:\n" + output)
                raise RuntimeError("broker exited during startup:\n" + output)
            self.output.append(line)
            admin = re.search(r"Management \(HTTPS, trust (\S+)\): (\S+)", line)
            if admin:
                self.admin_certificate, self.admin_connection_string = admin.group(1), admin.group(2)
                self.admin_port = int(re.search(r"sb://[^:]+:(\d+)", self.admin_connection_string).group(1))  # type: ignore[union-attr]
            amqps = re.search(r"Connection string \(amqps, trust (\S+)\): (\S+)(?: \(port (\d+))?", line)
            if amqps:
                self.tls_certificate, self.amqps_connection_string = amqps.group(1), amqps.group(2)
                self.amqps_port = int(amqps.group(3) or 5671)
            http = re.search(r"Management \(HTTP\): http://[^:]+:(\d+)", line)
            if http:
                self.http_port = int(http.group(1))
            metrics = re.search(r"Metrics \(HTTP\): (\S+)", line)
            if metrics:
                self.metrics_url = metrics.group(1)
            match = re.search(r"Connection string: (\S+)", line)
            if match:
                self.connection_string = match.group(1)
                self.port = int(re.search(r"sb://[^:]+:(\d+)", self.connection_string).group(1))  # type: ignore[union-attr]
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.proc.kill()  # a broker that never became ready is not left running (nor its port taken)
        self.proc.wait(10)
        raise RuntimeError("broker did not print its connection string in time:\n" + "".join(self.output))

    def _drain(self) -> None:
        proc = self.proc
        if proc is not None and proc.stdout is not None:
            for line in proc.stdout:
                self.output.append(line)

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def connection_string_with(self, key: str = KEY, key_name: str = KEY_NAME) -> str:
        return (f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName={key_name};SharedAccessKey={key};"
                "UseDevelopmentEmulator=true;")
