"""The certificate the management endpoint serves: the operator's, or one generated on first start.

The Python admin client only speaks HTTPS (sdk-wire-contract.md 8.1), so the broker needs a
certificate from its first start. A generated one is self-signed for ``localhost``, ``127.0.0.1``
and ``::1`` and kept in the data directory, so clients trust it once with
``connection_verify=<data-dir>/admin-cert.pem``.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT_FILE = "admin-cert.pem"
KEY_FILE = "admin-key.pem"


def ensure_certificate(data_dir: Path) -> tuple[Path, Path]:
    """The certificate and key paths in ``data_dir``, generating them the first time."""
    cert, key = data_dir / CERT_FILE, data_dir / KEY_FILE
    if cert.exists() and key.exists():
        return cert, key
    private_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sodalite")])
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(private_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private_key, hashes.SHA256())
    )
    key.write_bytes(private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    key.chmod(0o600)
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert, key


def certificate_host(cert: Path) -> str | None:
    """The first DNS name a PEM certificate is for (its subject alternative names, else its common name)."""
    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        names = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = names.get_values_for_type(x509.DNSName)
        if dns:
            return str(dns[0])
    except x509.ExtensionNotFound:
        pass
    common = loaded.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else None


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
