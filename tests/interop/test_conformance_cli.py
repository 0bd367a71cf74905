"""Sodalite tried as a new user would (issue 13, item 14): the command line finds its broker.

The broker runs with its management API on a port other than the default and with an operator
certificate (--tls-cert); the command line, run from the directory that holds sodalite-data/,
is told neither and still works. Its errors name the URL they tried.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import ROOT, BrokerProcess, write_config
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.interop

TLS_HOST = "sodalite.test"  # the operator certificate's first name: what the amqps banner must show


def _operator_certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_HOST)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(TLS_HOST), x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "operator-cert.pem", directory / "operator-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("new-user")


@pytest.fixture(scope="module")
def cli_broker(home: Path) -> Iterator[BrokerProcess]:
    cert, key = _operator_certificate(home)
    config = write_config(home / "Config.json", [{"Name": "orders", "Properties": {}}])
    # --admin-port 0 (BrokerProcess's default): a free port, never the CLI's default 5443
    process = BrokerProcess(home / "sodalite-data", config,
                            extra_args=["--tls-cert", str(cert), "--tls-key", str(key), "--log-level", "INFO"])
    process.start()
    yield process
    process.stop()


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SODALITE_CONNECTION_STRING"}
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_cli_finds_a_moved_admin_port_and_the_operator_certificate(cli_broker: BrokerProcess,
                                                                       home: Path) -> None:
    assert cli_broker.admin_port != 5443
    ok(cli(home, "topic", "create", "news"))
    ok(cli(home, "subscription", "create", "news", "all"))
    created = ok(cli(home, "rule", "create", "news", "all", "urgent", "--sql", "priority > 3"))
    assert created.strip() == "created rule news/subscriptions/all/rules/urgent"
    assert "orders" in ok(cli(home, "queue", "list"))


def test_peek_shows_when_a_message_expires(cli_broker: BrokerProcess, home: Path) -> None:
    ok(cli(home, "send", "orders", "--body", "soon gone", "--ttl", "PT1H", "--message-id", "ttl-1"))
    ok(cli(home, "send", "orders", "--body", "kept", "--message-id", "forever-1"))
    lines = ok(cli(home, "peek", "orders")).splitlines()
    [expiring] = [line for line in lines if "id=ttl-1" in line]
    [forever] = [line for line in lines if "id=forever-1" in line]
    enqueued = datetime.datetime.fromisoformat(expiring.split()[1])
    expires = datetime.datetime.fromisoformat(re.search(r"expires=(\S+)", expiring).group(1))  # type: ignore[union-attr]
    assert expires - enqueued == datetime.timedelta(hours=1)
    assert "expires=never" in forever


def test_an_unreachable_broker_error_names_the_url(home: Path, tmp_path: Path) -> None:
    result = cli(tmp_path, "queue", "list", "--admin-port", "9")  # nothing listens on the discard port
    assert result.returncode == 1
    assert "https://localhost:9/api/v1/entities" in result.stderr  # the entity commands call the JSON API
    result = cli(tmp_path, "send", "orders", "--body", "x", "--connection-string",
                 "Endpoint=sb://localhost:9;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true")
    assert result.returncode == 1 and "amqp://localhost:9" in result.stderr


def test_the_amqps_banner_shows_the_certificates_host(cli_broker: BrokerProcess) -> None:
    assert f"sb://{TLS_HOST}/" in cli_broker.amqps_connection_string


def test_management_access_logs_are_quiet_at_info(cli_broker: BrokerProcess, home: Path) -> None:
    ok(cli(home, "queue", "list"))
    time.sleep(0.5)  # let the broker's output reach the reader thread
    output = "".join(cli_broker.output)
    assert "Management (HTTPS" in output
    assert "/$Resources/queues" not in output  # no access-log line per request


def test_the_data_directory_is_not_committed() -> None:
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "sodalite-data/" in ignored
