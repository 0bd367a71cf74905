"""Celery on kombu's ``azureservicebus`` transport, against ``sodalite serve``: a worker runs tasks end to end.

kombu turns ``azureservicebus://<key name>:<key>@<namespace>`` into ``<namespace>.servicebus.windows.net``
on the standard ports: AMQP over TLS on 5671 and the management API (which kombu uses to create its
queues) over HTTPS on 443. So the broker and the Celery processes run in a network namespace of this
module's own: the host name resolves to 127.0.0.1 there (``ip netns exec`` mounts
``/etc/netns/<name>/hosts`` over ``/etc/hosts``), the broker binds 443 and 5671 there without touching
the machine's ports, with a certificate made for that host name, which the clients trust through
``SSL_CERT_FILE`` and ``REQUESTS_CA_BUNDLE`` (see integration_apps/celery_shop.py for why truststore).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_process import KEY, KEY_NAME, BrokerProcess
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from integration_apps.workers import WorkerProcess

pytestmark = pytest.mark.interop

NAMESPACE = "sodalite-shop"
HOST = f"{NAMESPACE}.servicebus.windows.net"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class CeleryBroker:
    netns: str
    certificate: Path
    broker: BrokerProcess

    def env(self, **shop: str) -> dict[str, str]:
        return {**os.environ, "SSL_CERT_FILE": str(self.certificate), "REQUESTS_CA_BUNDLE": str(self.certificate),
                "SHOP_BROKER_URL": f"azureservicebus://{KEY_NAME}:{KEY}@{NAMESPACE}",
                **{f"SHOP_{name.upper()}": value for name, value in shop.items()}}

    def in_netns(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *command]

    def caller(self, env: dict[str, str], *args: str) -> Any:
        """Run celery_shop_caller.py in the namespace; its printed JSON."""
        done = subprocess.run(self.in_netns(str(BIN / "python"), "celery_shop_caller.py", *args),
                              cwd=Path(__file__).parent / "integration_apps", env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def _certificate_for(host: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate whose subject alternative name is ``host``, as an operator would make one."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "servicebus-cert.pem", directory / "servicebus-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    """A network namespace with loopback up, where HOST resolves to 127.0.0.1; removed at the end."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    name = f"sodalite-celery-{os.getpid()}"
    added = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if added.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {added.stderr.strip()}")
    hosts = Path("/etc/netns") / name
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n127.0.0.1 {HOST}\n", encoding="utf-8")
        yield name
    finally:
        shutil.rmtree(hosts, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def celery_broker(netns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryBroker]:
    base = tmp_path_factory.mktemp("celery")
    certificate, key = _certificate_for(HOST, base)
    broker = BrokerProcess(base / "data", None, extra_args=["--tls-cert", str(certificate), "--tls-key", str(key)])
    broker.command_prefix = ["ip", "netns", "exec", netns]
    broker.amqps_port, broker.admin_port, broker.http_port = 5671, 443, -1
    try:
        broker.start()
        yield CeleryBroker(netns, certificate, broker)
    finally:
        broker.stop()


def _worker(celery: CeleryBroker, env: dict[str, str]) -> WorkerProcess:
    return WorkerProcess(celery.in_netns(str(BIN / "celery"), "-A", "celery_shop", "worker", "--loglevel", "INFO",
                                         "--concurrency", "1"), env)


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _drained(celery: CeleryBroker, env: dict[str, str], queue: str, timeout: float = 30.0) -> dict[str, Any]:
    """The queue's counts once it holds no message (a worker settles after it reports), or as they stay."""
    deadline = time.monotonic() + timeout
    while True:
        counts: dict[str, Any] = celery.caller(env, "queues")[queue]
        if counts["active"] == 0 or time.monotonic() > deadline:
            return counts
        time.sleep(1)


def test_worker_runs_a_task_end_to_end(celery_broker: CeleryBroker) -> None:
    env = celery_broker.env(lock_seconds="30")
    worker = _worker(celery_broker, env)
    try:
        worker.start("ready.")
        answer = celery_broker.caller(env, "call", "add", "[2, 3]")
        # The result came back through the rpc:// backend, from a pool process of the worker started here.
        assert answer["result"]["sum"] == 5
        assert _parent_of(answer["result"]["pid"]) == worker.pid
        # kombu created its queue through the management API (HTTPS on 443) with the transport's lock
        # duration, and completed the task's message.
        counts = _drained(celery_broker, env, "celery")
        assert counts == {"lock_seconds": 30.0, "active": 0, "dead_letter": 0}
    finally:
        worker.stop()


def test_slow_task_keeps_its_lock_through_renewal(celery_broker: CeleryBroker, tmp_path: Path) -> None:
    # A 5 s lock, a task of 9 s acknowledged only when done, and kombu's lock renewal (the SDK's
    # AutoLockRenewer on a receiver of its own): the task runs once and its message is completed.
    # Without renewal the lock lapses mid-task and the broker hands the message out again.
    runs = tmp_path / "runs.txt"
    env = celery_broker.env(queue_prefix="slow-", lock_seconds="5", lock_renewal="1", acks_late="1", runs=str(runs))
    worker = _worker(celery_broker, env)
    try:
        worker.start("ready.")
        answer = celery_broker.caller(env, "call", "slow_double", "[21, 9]")
        assert answer["result"]["double"] == 42
        counts = _drained(celery_broker, env, "slow-celery")
        assert counts == {"lock_seconds": 5.0, "active": 0, "dead_letter": 0}
        assert runs.read_text(encoding="utf-8").splitlines() == ["21"]
        assert "MessageLockLostError" not in "".join(worker.output)
    finally:
        worker.stop()
