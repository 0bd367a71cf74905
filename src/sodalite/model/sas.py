"""Shared Access Signature tokens: parsing, validation and (for tests and tools) generation.

A token is ``SharedAccessSignature sr=<audience>&sig=<signature>&se=<expiry>&skn=<key name>``
with every value URL-encoded. The signature is base64(HMAC-SHA256(key, encoded(sr) + "\\n" + se))
where the key is the UTF-8 bytes of the key string, not its base64 decoding
(sdk-wire-contract.md section 2). Clients disagree on how they percent-encode ``sr`` before
signing (Python's quote_plus writes upper-case hex, .NET's HttpUtility lower-case), so the
validator accepts a signature over any of those spellings. Time comes in as an argument.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote_plus, urlencode

from sodalite.errors import Unauthorized

PREFIX = "SharedAccessSignature "


@dataclass(frozen=True, slots=True)
class SasToken:
    audience: str  # decoded ``sr``
    raw_audience: str  # ``sr`` exactly as it appears in the token
    signature: str
    expiry: int  # seconds since the epoch
    key_name: str


def parse_token(token: str) -> SasToken:
    if not token.startswith(PREFIX):
        raise Unauthorized("token is not a SharedAccessSignature")
    raw_fields: dict[str, str] = {}
    for part in token[len(PREFIX):].strip().split("&"):
        key, _, value = part.partition("=")
        raw_fields[key] = value
    fields = dict(parse_qsl(token[len(PREFIX):].strip(), keep_blank_values=True))
    try:
        return SasToken(fields["sr"], raw_fields["sr"], fields["sig"], int(fields["se"]), fields["skn"])
    except (KeyError, ValueError):
        raise Unauthorized("token lacks sr, sig, se or skn") from None


def sign(audience_encoded: str, expiry: int, key: str) -> str:
    digest = hmac.new(key.encode("utf-8"), f"{audience_encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def generate_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """A token as the Python SDK builds it (used by tests and the project's own tools)."""
    sig = sign(quote_plus(audience), expiry, key)
    return PREFIX + urlencode({"sr": audience, "sig": sig, "se": str(expiry), "skn": key_name})


def _lower_hex(encoded: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)


def validate_token(token: str, keys: Mapping[str, tuple[str, ...]], now: float) -> SasToken:
    """Check signature and expiry; ``keys`` maps a key name to its keys (primary, secondary)."""
    parsed = parse_token(token)
    candidates = keys.get(parsed.key_name)
    if not candidates:
        raise Unauthorized(f"unknown SharedAccessKeyName {parsed.key_name!r}")
    if parsed.expiry < now:
        raise Unauthorized("the token has expired")
    spellings = {quote_plus(parsed.audience), parsed.raw_audience, _lower_hex(quote_plus(parsed.audience))}
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (TypeError), and the
    # signature is whatever the client wrote.
    claimed = parsed.signature.encode("utf-8", "surrogatepass")
    for key in candidates:
        for spelling in spellings:
            if hmac.compare_digest(sign(spelling, parsed.expiry, key).encode("ascii"), claimed):
                return parsed
    raise Unauthorized("the token's signature does not match")


# A scheme-less audience that opens with ``host:port`` names the namespace: the Go SDK's
# ``sas.CreateConnectionStringWithSASUsingExpiry`` signs the bare fully qualified namespace,
# ``localhost:5672``. No entity name holds a colon, so such a first segment is never an entity's.
_BARE_AUTHORITY = re.compile(r"^((?:[a-zA-Z0-9._-]+|\[[0-9a-fA-F:.]+\]):[0-9]+)(/.*)?$")


def audience_path(audience: str, host: str = "") -> tuple[str, str]:
    """Split ``sb://host[:port]/path`` (or ``host:port/path`` without a scheme) into (host without port,
    lower-cased path without slashes); an audience with neither is a bare path, with host "". A scheme-less
    audience that opens with ``host`` (the namespace's host name, when the caller knows it) names the
    namespace too: the Go SDK signs the bare fully qualified namespace, port or not.

    A query or fragment is not part of the path: the JavaScript administration client signs the
    whole request URL, ``https://host/queue?api-version=2021-05`` (entity names hold neither ``?``
    nor ``#``).
    """
    audience = re.split(r"[?#]", audience, maxsplit=1)[0]
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^/]*)(/.*)?$", audience) or _BARE_AUTHORITY.match(audience)
    if match is None:
        first, _, rest = audience.strip("/").partition("/")
        if host and first.lower() == host.lower():
            return first.lower(), rest.strip("/").lower()
        return "", audience.strip("/").lower()
    return host_of(match.group(1)), (match.group(2) or "").strip("/").lower()


def host_of(authority: str) -> str:
    """The lower-cased host of ``[user@]host[:port]`` (an IPv6 host keeps its brackets): the AMQP open's
    hostname may carry the port, as the Go SDK sends it (``localhost:5672``)."""
    host = authority.rsplit("@", 1)[-1]
    if host.startswith("["):
        return (host.split("]")[0] + "]").lower()
    return host.split(":")[0].lower()


def covers(granted_path: str, entity_path: str) -> bool:
    """A token for ``granted_path`` covers that entity and everything below it."""
    entity_path = entity_path.strip("/").lower()
    return granted_path == "" or entity_path == granted_path or entity_path.startswith(granted_path + "/")
