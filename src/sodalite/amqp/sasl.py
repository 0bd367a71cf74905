"""SASL settings for both roles (AMQP 1.0 part 5, section 5.3).

The server offers MSSBCBS, ANONYMOUS and PLAIN: the Python SDK always picks ANONYMOUS and then
authenticates through ``$cbs``; the .NET SDK picks MSSBCBS against the emulator
(sdk-wire-contract.md 1.3). PLAIN credentials are checked by a callback the owner supplies.
Challenges are never sent: the Python SDK cannot answer them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SASL_OK = 0
SASL_AUTH = 1  # authentication failed: bad credentials
SASL_SYS = 2

PlainValidator = Callable[[str, str], bool]  # (username, password) -> accepted


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    mechanisms: tuple[str, ...] = ("MSSBCBS", "ANONYMOUS", "PLAIN")
    plain_validator: PlainValidator | None = None
    require_sasl: bool = False  # False: a bare AMQP header is accepted as anonymous


@dataclass(frozen=True, slots=True)
class SaslClientConfig:
    mechanism: str = "ANONYMOUS"
    username: str | None = None
    password: str | None = None
    hostname: str | None = None

    def initial_response(self) -> bytes:
        if self.mechanism == "PLAIN":
            return b"\x00" + (self.username or "").encode() + b"\x00" + (self.password or "").encode()
        return b""


def parse_plain(response: bytes) -> tuple[str, str] | None:
    """Split a PLAIN initial response ``authzid NUL authcid NUL passwd``; None if malformed."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError:
        return None
