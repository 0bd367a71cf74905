"""The official Go SDK's own live tests (``azservicebus`` v1.11.0) against a broker: prepare and run.

``prepare`` takes the module from the Go module proxy (``go mod download``; its ``*_test.go`` files are
in the module zip, so nothing of it is committed here), copies it to a work directory, patches only
what must change to reach a local broker, and compiles the test binaries of ``.``, ``./admin`` and
``./internal``. The patches: the helpers build every client from the SAS connection string instead
of Azure AD (``test.NewClient``, ``test.GetIdentityVars``, ``test.CreateExpiringQueue`` and the
internal package's namespace helper).

``run`` (``python go_live.py run WORK RESULTS``) is executed inside a network namespace of its own
(``unshare -n``): the SDK always dials TLS on 5671 and its administration client ``https://host/``
on 443, so the broker listens on those ports there, where nothing else does, with its generated
certificate trusted through ``SSL_CERT_FILE``. It runs every live test except the ones that cannot
apply to a local broker (:data:`NOT_APPLICABLE`) and writes each test's outcome as JSON.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess, write_config
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

MODULE = "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
VERSION = "v1.11.0"
PACKAGES = {"root": ".", "admin": "./admin", "internal": "./internal"}
KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"

# Not applicable to a local broker, and only these: Azure AD identities, the TLS custom endpoint in
# emulator mode, Microsoft's fault injector, expired SAS tokens dialled on the plain port, a test that
# passes only if the broker cannot deliver 1,000 messages in 20 ms, and a timing race with a detach.
NOT_APPLICABLE_TESTS = {
    "root": ["TestNewClientWithAzureIdentity", "TestClientUsingCustomEndpoint", "TestReceiveWithDelay",
             "TestReceiveWithDifferentWaitTime", "TestSessionReceiver_Detach"],
    "admin": ["TestAdminClient_UsingIdentity"],
    "internal": [],
}
NOT_APPLICABLE_SUBTESTS = ["invalid_identity_creds", "Expired_SAS"]

# Live tests that still fail for a conformance gap (each gap is named in docs/clients.md): a failure
# outside this list fails the tier; one in it that passes is printed, so the list shrinks.
KNOWN_GAPS: dict[str, set[str]] = {
    "root": set(),
    "admin": set(),
    "internal": set(),
}

# (file, old, new): each must match exactly once, so a changed module fails loudly here.
PATCHES = [
    ("internal/test/test_helpers.go",
     '\t"github.com/Azure/azure-sdk-for-go/sdk/internal/test/credential"\n', ""),
    ("internal/test/test_helpers.go",
     "\ttokenCred, err := credential.New(nil)\n\trequire.NoError(t, err)\n",
     "\tvar tokenCred azcore.TokenCredential // a local broker takes SAS tokens only\n"),
    ("internal/test/test_helpers.go",
     "\tif options == nil {\n\t\toptions = &NewClientOptions[OptionsT]{}\n\t}\n",
     "\tif options == nil {\n\t\toptions = &NewClientOptions[OptionsT]{}\n\t}\n"
     "\toptions.UseConnectionString = true // a local broker takes SAS tokens only\n"),
    ("internal/test/test_helpers.go",
     '\tem, err := atom.NewEntityManager(iv.Endpoint, iv.Cred, "", nil)\n',
     '\t_ = iv\n\tem, err := atom.NewEntityManagerWithConnectionString('
     'os.Getenv(string(EnvKeyConnectionString)), "", nil)\n'),
    ("internal/amqpLinks_test.go",
     "\tns, err := NewNamespace(NamespaceWithTokenCredential(iv.Endpoint, iv.Cred))\n",
     "\t_ = iv\n\tns, err := NewNamespace(NamespaceWithConnectionString("
     "os.Getenv(\"SERVICEBUS_CONNECTION_STRING\")))\n"),
]


def prepare(work: Path) -> dict[str, Path]:
    """Download, copy, patch and compile; returns the test binary of each package."""
    download = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
                              capture_output=True, text=True, check=True, timeout=600)
    source = Path(json.loads(download.stdout)["Dir"])
    tree = work / "azservicebus"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(source, tree)
    for path in tree.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
    for name, old, new in PATCHES:
        file = tree / name
        text = file.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"patch for {name} no longer matches: {old!r}"
        text = text.replace(old, new)
        if name == "internal/amqpLinks_test.go" and '\t"os"\n' not in text:
            text = text.replace("import (\n", 'import (\n\t"os"\n', 1)
        file.write_text(text, encoding="utf-8")
    binaries = {}
    for name, package in PACKAGES.items():
        binary = work / f"{name}.test"
        subprocess.run(["go", "test", "-c", "-o", str(binary), package], cwd=tree, check=True, timeout=1200,
                       capture_output=True)
        binaries[name] = binary
    return binaries


def connection_string(key_name: str, key: str, host: str = "localhost") -> str:
    return f"Endpoint=sb://{host}/;SharedAccessKeyName={key_name};SharedAccessKey={key}"


# The Premium namespace the tests also expect: a second broker, configured Premium, on another
# loopback address, with a certificate of its own for that address.
PREMIUM_HOST = "127.0.0.2"


def premium_certificate(directory: Path) -> tuple[Path, Path]:
    private_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, PREMIUM_HOST)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(PREMIUM_HOST))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private_key, hashes.SHA256()))
    cert, key = directory / "premium-cert.pem", directory / "premium-key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    return cert, key


RULES = [
    {"KeyName": KEY_NAME, "PrimaryKey": KEY},
    {"KeyName": "no-manage", "PrimaryKey": "no-manage-key", "Rights": ["Send", "Listen"]},
    {"KeyName": "send-only", "PrimaryKey": "send-only-key", "Rights": ["Send"]},
    {"KeyName": "listen-only", "PrimaryKey": "listen-only-key", "Rights": ["Listen"]},
]
QUEUES = [{"Name": "testQueue", "Properties": {}},
          {"Name": "testQueueWithSessions", "Properties": {"RequiresSession": True}}]


def environment(certificates: Path) -> dict[str, str]:
    full = connection_string(KEY_NAME, KEY)
    return {**os.environ, "SSL_CERT_FILE": str(certificates), "AZURE_RECORD_MODE": "live",
            "SERVICEBUS_ENDPOINT": "localhost", "SERVICEBUS_ENDPOINT_PREMIUM": PREMIUM_HOST,
            "SERVICEBUS_CONNECTION_STRING": full,
            "SERVICEBUS_CONNECTION_STRING_PREMIUM": connection_string(KEY_NAME, KEY, PREMIUM_HOST),
            "SERVICEBUS_CONNECTION_STRING_NO_MANAGE": connection_string("no-manage", "no-manage-key"),
            "SERVICEBUS_CONNECTION_STRING_SEND_ONLY": connection_string("send-only", "send-only-key"),
            "SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY": connection_string("listen-only", "listen-only-key")}


RESULT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(")


def run_package(binary: Path, directory: Path, name: str, env: dict[str, str], log: Path) -> dict[str, str]:
    listed = subprocess.run([str(binary), "-test.list", "."], cwd=directory, env=env, capture_output=True,
                            text=True, timeout=120).stdout.split()
    only = re.compile(os.environ.get("GO_LIVE_ONLY", ""))  # to rerun a few by hand: GO_LIVE_ONLY=Premium
    tests = [t for t in listed if t.startswith("Test") and t not in NOT_APPLICABLE_TESTS[name] and only.search(t)]
    if not tests:
        return {}
    args = [str(binary), "-test.v", "-test.timeout", "15m", "-test.count", "1",
            "-test.run", "^(" + "|".join(tests) + ")$",
            "-test.skip", ".*/^(" + "|".join(NOT_APPLICABLE_SUBTESTS) + ")$"]
    with log.open("a", encoding="utf-8") as out:
        out.write(f"== {name}: {' '.join(args)}\n")
        out.flush()
        start = out.tell()
        proc = subprocess.run(args, cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    with log.open(encoding="utf-8") as written:
        written.seek(start)
        printed = written.read()
    outcomes: dict[str, str] = {}
    for line in printed.splitlines():
        match = RESULT.match(line)
        if match:
            outcomes[f"{name}:{match.group(2)}"] = match.group(1)
    if proc.returncode != 0 and not any(v == "FAIL" for v in outcomes.values()):
        outcomes[f"{name}:(binary)"] = "FAIL"  # a panic or a time-out: no test line says so
    return outcomes


def run(work: Path, results: Path) -> None:
    """Inside a network namespace: loopback up, a broker on the Service Bus ports, every live test."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    base = work / "broker"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    config = write_config(base / "Config.json", QUEUES, AuthorizationRules=RULES)
    broker = BrokerProcess(base / "data", config, port=5672)
    broker.amqps_port, broker.admin_port = 5671, 443
    cert, key = premium_certificate(base)
    premium = BrokerProcess(base / "premium", write_config(base / "Premium.json", QUEUES, AuthorizationRules=RULES,
                                                           Sku="Premium"), port=5672,
                            extra_args=["--host", PREMIUM_HOST, "--tls-cert", str(cert), "--tls-key", str(key)])
    premium.amqps_port, premium.admin_port = 5671, 443
    broker.start()
    premium.start()
    outcomes: dict[str, str] = {}
    try:
        certificates = base / "certificates.pem"
        certificates.write_bytes((base / "data" / "admin-cert.pem").read_bytes() + cert.read_bytes())
        env = environment(certificates)
        tree = work / "azservicebus"
        log = work / "go-live.log"
        log.write_text("", encoding="utf-8")
        for name, package in PACKAGES.items():
            outcomes.update(run_package(work / f"{name}.test", tree / package, name, env, log))
    finally:
        premium.stop()
        broker.stop()
        results.write_text(json.dumps(outcomes, indent=1, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["prepare"]:
        print(prepare(Path(sys.argv[2])))
    elif sys.argv[1:2] == ["run"]:
        run(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit("usage: go_live.py prepare WORK | run WORK RESULTS")
