"""Where the command line's client commands connect: a Service Bus connection string, read as the SDK reads it.

``UseDevelopmentEmulator=true`` means plain AMQP on the endpoint's port (default 5672), as the
SDK does for the emulator; anything else means AMQP over TLS, on the endpoint's port or 5671.
The management API (HTTPS) is on its own port, which a connection string cannot say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from sodalite.errors import ConfigurationError

ENVIRONMENT_VARIABLE: Final = "SODALITE_CONNECTION_STRING"
#: What `sodalite serve` prints for its defaults (the emulator's key).
DEFAULT: Final = ("Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
                  "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;")
#: Where `sodalite serve` writes its ports and certificate, in its data directory (cli/main.py Endpoints).
ENDPOINTS_FILE: Final = "endpoints.json"
AMQP_PORT: Final = 5672
AMQPS_PORT: Final = 5671


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    host: str
    port: int
    key_name: str
    key: str
    tls: bool


def parse(text: str) -> ConnectionSettings:
    """Read ``Endpoint=sb://host[:port];SharedAccessKeyName=...;SharedAccessKey=...[;UseDevelopmentEmulator=true]``."""
    fields: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        name, separator, value = part.partition("=")
        if not separator:
            raise ConfigurationError(f"connection string: '{part}' is not Name=Value")
        fields[name.strip().lower()] = value.strip()
    missing = [n for n in ("Endpoint", "SharedAccessKeyName", "SharedAccessKey") if n.lower() not in fields]
    if missing:
        raise ConfigurationError(f"connection string: {', '.join(missing)} missing")
    endpoint = urlsplit(fields["endpoint"])
    if endpoint.scheme != "sb" or not endpoint.hostname:
        raise ConfigurationError(f"connection string: Endpoint must be sb://host[:port], got '{fields['endpoint']}'")
    emulator = fields.get("usedevelopmentemulator", "").lower() == "true"
    try:
        explicit_port = endpoint.port
    except ValueError:
        raise ConfigurationError(f"connection string: bad port in '{fields['endpoint']}'") from None
    port = explicit_port or (AMQP_PORT if emulator else AMQPS_PORT)
    return ConnectionSettings(endpoint.hostname, port, fields["sharedaccesskeyname"], fields["sharedaccesskey"],
                              tls=not emulator)


def from_environment(explicit: str | None) -> ConnectionSettings:
    """``--connection-string``, else ``$SODALITE_CONNECTION_STRING``, else the local broker's default."""
    return parse(explicit or os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT)
