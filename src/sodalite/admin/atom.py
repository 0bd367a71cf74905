"""The ATOM/XML documents of the Service Bus management REST API, as pure functions (no I/O, no clock).

Theory of operation: ``ServiceBusAdministrationClient`` PUTs an ATOM ``entry`` whose ``content``
holds a ``QueueDescription`` (sdk-wire-contract.md 8.2), and reads back entries and feeds in the
shape the service writes (8.3). This module turns the request body into the Service Bus-named,
JSON-able dict that :meth:`QueueProperties.from_json` takes, and writes the response documents.

Parsing is lenient where the SDK's own echo demands it and strict about values:

* namespaces and prefixes are ignored (elements are matched by local name), because the SDK
  sends ``ns0:`` prefixes and a default namespace, and hand-written clients send none;
* the read-only elements the SDK echoes back on update (``SizeInBytes``, ``CountDetails``,
  ``CreatedAt``, ...) and elements this broker does not know are skipped, as .NET's
  DataContractSerializer skips unknown members;
* an element marked ``i:nil="true"`` counts as absent;
* a duration within a second of ``TimeSpan.MaxValue`` is read as ``TimeSpan.MaxValue``, because
  the SDK cannot echo that value exactly (it sends ``P10675199DT2H48M5.477539S``);
* ``ForwardTo`` / ``ForwardDeadLetteredMessagesTo`` arrive as ``sb://host:port/name`` and are
  reduced to the entity name; an empty one clears forwarding;
* a malformed value raises :class:`ArgumentError` naming the element
  (``QueueDescription.LockDuration: ...``). Ranges are left to ``QueueProperties.from_json``.

Untrusted XML is parsed with defusedxml, with DTDs forbidden.

Writing follows the service: the ATOM namespace as the default on ``entry``/``feed``, the
``QueueDescription`` in the ``.../2010/10/servicebus/connect`` namespace with ``xmlns:i``, the
``CountDetails`` children in the ``.../2011/06/servicebus`` namespace with the ``d2p1`` prefix,
members in DataContract order, durations in ISO 8601 (``TimeSpan.MaxValue`` as
``P10675199DT2H48M5.4775807S``), booleans in lower case, timestamps in UTC with a ``Z``.
Documents are UTF-8 without an XML declaration, so entries embed into feeds as they are.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal
from urllib.parse import quote, unquote, urlsplit
from xml.sax.saxutils import escape, quoteattr

import defusedxml  # type: ignore[import-untyped, unused-ignore]
import defusedxml.ElementTree as _defused  # type: ignore[import-untyped, unused-ignore]

from sodalite.errors import ArgumentError, ConfigurationError
from sodalite.model.entities import TIMESPAN_MAX, QueueProperties, format_duration, parse_duration

ATOM_NS: Final = "http://www.w3.org/2005/Atom"
CONNECT_NS: Final = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS_NS: Final = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI_NS: Final = "http://www.w3.org/2001/XMLSchema-instance"

#: The api-version the service writes into ids and self links.
API_VERSION: Final = "2021-05"

#: What ``AccessedAt`` says for an entity nobody has used yet (.NET ``DateTime.MinValue``).
NEVER: Final = datetime(1, 1, 1, tzinfo=UTC)

# The SDK cannot send TimeSpan.MaxValue back: it reads it as a timedelta rounded up past the
# maximum, then subtracts a microsecond in float arithmetic (avoid_timedelta_overflow) and sends
# P10675199DT2H48M5.477539S. Anything this close to the maximum means "never" and is read as it.
_NEAR_TIMESPAN_MAX: Final = TIMESPAN_MAX - timedelta(seconds=1)

_NIL: Final = f"{{{XSI_NS}}}nil"
_MAX_SHOWN: Final = 64

_Kind = Literal["duration", "int", "bool", "status", "text", "entity"]

#: The settable QueueDescription members, by element name, and how their text is read.
_QUEUE_MEMBERS: Final[dict[str, _Kind]] = {
    "LockDuration": "duration",
    "MaxSizeInMegabytes": "int",
    "RequiresDuplicateDetection": "bool",
    "RequiresSession": "bool",
    "DefaultMessageTimeToLive": "duration",
    "DeadLetteringOnMessageExpiration": "bool",
    "DuplicateDetectionHistoryTimeWindow": "duration",
    "MaxDeliveryCount": "int",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "ForwardTo": "entity",
    "UserMetadata": "text",
    "SupportOrdering": "bool",
    "AutoDeleteOnIdle": "duration",
    "EnablePartitioning": "bool",
    "ForwardDeadLetteredMessagesTo": "entity",
    "EnableExpress": "bool",
    "MaxMessageSizeInKilobytes": "int",
}

#: Members the service computes; the SDK echoes them back on update and they are ignored.
READ_ONLY_QUEUE_MEMBERS: Final = frozenset(
    {
        "SizeInBytes",
        "MessageCount",
        "IsAnonymousAccessible",
        "AuthorizationRules",
        "CreatedAt",
        "UpdatedAt",
        "AccessedAt",
        "CountDetails",
        "EntityAvailabilityStatus",
    }
)

_INT_RE: Final = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
_XML_DECLARATION_RE: Final = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<\?xml[^>]*\?>\s*")
# Characters XML 1.0 cannot carry at all, not even as character references.
_NOT_XML_RE: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# --------------------------------------------------------------------------------------------------
# Runtime counts
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    """What the service computes about a queue: message counts, size and timestamps."""

    active: int
    dead_letter: int
    scheduled: int
    transfer: int
    transfer_dead_letter: int
    size_in_bytes: int
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime | None

    @property
    def total(self) -> int:
        """``MessageCount``: every message the queue holds, dead-lettered and scheduled included."""
        return self.active + self.dead_letter + self.scheduled + self.transfer + self.transfer_dead_letter


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


def _local(tag: object) -> str:
    """The local name of an element tag (``{ns}Name`` -> ``Name``); '' for comments and the like."""
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


def _show(text: str) -> str:
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")


def _parse_xml(body: bytes) -> ET.Element:
    if not isinstance(body, bytes | bytearray):
        raise ArgumentError(f"the request body must be bytes, got {type(body).__name__}")
    if not body.strip():
        raise ArgumentError("the request body is empty; expected an ATOM entry holding a QueueDescription")
    try:
        root: ET.Element = _defused.fromstring(bytes(body), forbid_dtd=True)
    except ET.ParseError as exc:
        raise ArgumentError(f"the request body is not well-formed XML: {exc}") from None
    except defusedxml.DefusedXmlException as exc:
        raise ArgumentError(f"the request body uses a forbidden XML feature (DTD or entity): {exc!r}") from None
    return root


def _children(element: ET.Element) -> list[ET.Element]:
    """The element children of ``element`` (comments and processing instructions left out)."""
    return [child for child in element if isinstance(child.tag, str)]


def _description(root: ET.Element, kind: str) -> ET.Element:
    """The ``kind`` element of an ATOM ``entry`` (or ``kind`` itself when it is the root)."""
    root_name = _local(root.tag)
    if root_name == kind:
        return root
    if root_name != "entry":
        raise ArgumentError(f"expected an ATOM entry holding a {kind}, got a root element {root_name!r}")
    contents = [child for child in _children(root) if _local(child.tag) == "content"]
    if len(contents) != 1:
        problem = "has no content element" if not contents else "has more than one content element"
        raise ArgumentError(f"entry: {problem}; expected one holding a {kind}")
    inner = _children(contents[0])
    if len(inner) != 1 or _local(inner[0].tag) != kind:
        got = ", ".join(_local(child.tag) for child in inner) or "nothing"
        raise ArgumentError(f"entry.content: expected a {kind}, got {got}")
    return inner[0]


def _is_nil(element: ET.Element) -> bool:
    return element.get(_NIL, "").strip().lower() in ("true", "1")


def _entity_name(text: str, where: str) -> str | None:
    """``sb://host:port/name`` (or a bare name) -> ``name``; empty -> None (no forwarding)."""
    if not text:
        return None
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ArgumentError(f"{where}: {_show(text)} is not a valid entity address: {exc}") from None
    if not (parts.scheme and parts.netloc):
        return text
    name = unquote(parts.path).strip("/")
    if not name or parts.query or parts.fragment:
        raise ArgumentError(f"{where}: {_show(text)} must name an entity, as in sb://host/name")
    return name


def _member_value(kind: _Kind, element: ET.Element, where: str) -> Any:
    """The JSON-able value of one member, as ``QueueProperties.from_json`` takes it."""
    if _children(element):
        raise ArgumentError(f"{where}: must hold text, not child elements")
    raw = element.text or ""
    if kind == "text":
        return raw if raw.strip() else None
    text = raw.strip()
    if kind == "entity":
        return _entity_name(text, where)
    if not text:
        raise ArgumentError(f"{where}: must not be empty")
    if kind == "status":
        return text
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ArgumentError(f"{where}: must be true or false, got {_show(text)}")
    if kind == "int":
        if _INT_RE.fullmatch(text) is None:
            raise ArgumentError(f"{where}: must be an integer, got {_show(text)}")
        return int(text)
    # duration: check the syntax here, keep the text; QueueProperties.from_json checks the range
    try:
        value = parse_duration(text)
    except ConfigurationError as exc:
        raise ArgumentError(f"{where}: {exc.description}") from None
    return format_duration(TIMESPAN_MAX) if value >= _NEAR_TIMESPAN_MAX else text


def _parse_members(description: ET.Element, members: dict[str, _Kind], ignored: frozenset[str]) -> dict[str, Any]:
    kind_name = _local(description.tag)
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for child in _children(description):
        name = _local(child.tag)
        where = f"{kind_name}.{name}"
        if name in seen:
            raise ArgumentError(f"{where}: appears more than once")
        seen.add(name)
        kind = members.get(name)
        if kind is None or name in ignored or _is_nil(child):
            continue
        out[name] = _member_value(kind, child, where)
    return out


def parse_queue_description(body: bytes) -> dict[str, Any]:
    """The settable properties in a create/update queue request body, by their Service Bus names.

    ``body`` is an ATOM ``entry`` whose ``content`` holds a ``QueueDescription`` (or a bare
    ``QueueDescription``). The result maps PascalCase names to JSON-able values: durations as
    ISO 8601 strings, booleans as bool, integers as int, forwarding targets as entity names (None
    to clear), ``Status``/``UserMetadata`` as strings. Members the body leaves out are left out, so
    ``QueueProperties.from_json`` gives them their defaults. Raises ``ArgumentError``, naming the
    element, for XML that is not well formed, the wrong document, or a malformed value.
    """
    root = _parse_xml(body)
    return _parse_members(_description(root, "QueueDescription"), _QUEUE_MEMBERS, READ_ONLY_QUEUE_MEMBERS)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def _clean(text: str) -> str:
    """``text`` escaped for XML character data, with characters XML cannot carry replaced."""
    return escape(_NOT_XML_RE.sub("\ufffd", text))


def _attr(text: str) -> str:
    """``text`` as a quoted XML attribute value."""
    return quoteattr(_NOT_XML_RE.sub("\ufffd", text))


def format_timestamp(value: datetime) -> str:
    """A timestamp as the service writes it: UTC, ``2024-05-01T12:00:00.5Z`` (naive means UTC)."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    if value.microsecond:
        text += "." + f"{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _element(name: str, text: str) -> str:
    return f"<{name}>{_clean(text)}</{name}>"


def _base(base_url: str) -> str:
    return base_url.rstrip("/")


def _self_href(base_url: str, path: str) -> str:
    return f"{_base(base_url)}/{quote(path.lstrip('/'), safe='/$')}?api-version={API_VERSION}"


def _author(base_url: str) -> str:
    parts = urlsplit(base_url)
    return parts.hostname or parts.netloc or base_url


def _forward_address(base_url: str, name: str | None) -> str | None:
    """A forwarding target as the service writes it: ``sb://host[:port]/name``."""
    if name is None:
        return None
    host = urlsplit(base_url).netloc or base_url
    return f"sb://{host}/{name}"


def _entry(
    *, title: str, href: str | None, author: str, published: datetime | None, updated: datetime, content: str
) -> bytes:
    parts = [f'<entry xmlns="{ATOM_NS}">']
    if href is not None:
        parts.append(_element("id", href))
    parts.append(f'<title type="text">{_clean(title)}</title>')
    if published is not None:
        parts.append(_element("published", format_timestamp(published)))
    parts.append(_element("updated", format_timestamp(updated)))
    parts.append(f"<author>{_element('name', author)}</author>")
    if href is not None:
        parts.append(f'<link rel="self" href={_attr(href)}/>')
    parts.append(f'<content type="application/xml">{content}</content></entry>')
    return "".join(parts).encode("utf-8")


def _count_details(runtime: QueueRuntime) -> str:
    counts = (
        ("ActiveMessageCount", runtime.active),
        ("DeadLetterMessageCount", runtime.dead_letter),
        ("ScheduledMessageCount", runtime.scheduled),
        ("TransferMessageCount", runtime.transfer),
        ("TransferDeadLetterMessageCount", runtime.transfer_dead_letter),
    )
    inner = "".join(f"<d2p1:{name}>{value}</d2p1:{name}>" for name, value in counts)
    return f'<CountDetails xmlns:d2p1="{COUNTS_NS}">{inner}</CountDetails>'


def queue_description_xml(properties: QueueProperties, runtime: QueueRuntime, base_url: str) -> str:
    """The ``QueueDescription`` element (as text) with every member in DataContract order."""
    p = properties
    members: list[str] = [
        _element("LockDuration", format_duration(p.lock_duration)),
        _element("MaxSizeInMegabytes", str(p.max_size_in_megabytes)),
        _element("RequiresDuplicateDetection", _bool(p.requires_duplicate_detection)),
        _element("RequiresSession", _bool(p.requires_session)),
        _element("DefaultMessageTimeToLive", format_duration(p.default_message_time_to_live)),
        _element("DeadLetteringOnMessageExpiration", _bool(p.dead_lettering_on_message_expiration)),
        _element("DuplicateDetectionHistoryTimeWindow", format_duration(p.duplicate_detection_history_time_window)),
        _element("MaxDeliveryCount", str(p.max_delivery_count)),
        _element("EnableBatchedOperations", _bool(p.enable_batched_operations)),
        _element("SizeInBytes", str(runtime.size_in_bytes)),
        _element("MessageCount", str(runtime.total)),
        _element("IsAnonymousAccessible", "false"),
        "<AuthorizationRules/>",
        _element("Status", p.status),
    ]
    forward_to = _forward_address(base_url, p.forward_to)
    if forward_to is not None:
        members.append(_element("ForwardTo", forward_to))
    if p.user_metadata is not None:
        members.append(_element("UserMetadata", p.user_metadata))
    members += [
        _element("CreatedAt", format_timestamp(runtime.created_at)),
        _element("UpdatedAt", format_timestamp(runtime.updated_at)),
        _element("AccessedAt", format_timestamp(runtime.accessed_at or NEVER)),
        _element("SupportOrdering", _bool(p.support_ordering)),
        _count_details(runtime),
        _element("AutoDeleteOnIdle", format_duration(p.auto_delete_on_idle)),
        _element("EnablePartitioning", _bool(p.enable_partitioning)),
        _element("EntityAvailabilityStatus", "Available"),
    ]
    forward_dlq_to = _forward_address(base_url, p.forward_dead_lettered_messages_to)
    if forward_dlq_to is not None:
        members.append(_element("ForwardDeadLetteredMessagesTo", forward_dlq_to))
    members.append(_element("EnableExpress", _bool(p.enable_express)))
    if p.max_message_size_in_kilobytes is not None:
        members.append(_element("MaxMessageSizeInKilobytes", str(p.max_message_size_in_kilobytes)))
    body = "".join(members)
    return f'<QueueDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{body}</QueueDescription>'


def queue_entry(name: str, properties: QueueProperties, runtime: QueueRuntime, base_url: str, now: datetime) -> bytes:
    """The ATOM ``entry`` for one queue, as GET, PUT (create and update) and list answer with it.

    ``base_url`` is the scheme and authority the client used (``https://localhost:5300``); it
    makes the id and self link, and the ``sb://`` addresses of forwarding targets. The entry's
    ``published`` is the queue's creation time and its ``updated`` is ``now``.
    The SDK names the queue after the entry's ``title`` when listing, so ``name`` must be the
    queue's own spelling.
    """
    return _entry(
        title=name,
        href=_self_href(base_url, name),
        author=_author(base_url),
        published=runtime.created_at,
        updated=now,
        content=queue_description_xml(properties, runtime, base_url),
    )


def _strip_declaration(entry: bytes) -> bytes:
    return _XML_DECLARATION_RE.sub(b"", entry, count=1)


def queue_feed(
    entries: Sequence[bytes],
    base_url: str,
    title: str,
    next_link: str | None,
    *,
    path: str = "$Resources/queues",
    now: datetime | None = None,
) -> bytes:
    """An ATOM ``feed`` of entries (from :func:`queue_entry`), as list operations answer.

    It carries one ``<link rel="self">`` and, when ``next_link`` is given, a second
    ``<link rel="next">``: the SDK asks for another page only when a feed has exactly two links,
    and reads ``$skip`` and ``$top`` from the second one's query string, so ``next_link`` must be
    an absolute URL such as ``https://host/$Resources/queues?$skip=100&$top=100``. ``path`` is the
    listed collection (for the id and self link); ``now``, when given, is the feed's ``updated``.
    """
    href = _self_href(base_url, path)
    parts = [f'<feed xmlns="{ATOM_NS}">', f'<title type="text">{_clean(title)}</title>', _element("id", href)]
    if now is not None:
        parts.append(_element("updated", format_timestamp(now)))
    parts.append(f'<link rel="self" href={_attr(href)}/>')
    if next_link is not None:
        parts.append(f'<link rel="next" href={_attr(next_link)}/>')
    head = "".join(parts).encode("utf-8")
    return head + b"".join(_strip_declaration(bytes(entry)) for entry in entries) + b"</feed>"


def empty_feed(base_url: str, *, now: datetime | None = None) -> bytes:
    """The feed with no entries the service answers a GET of a missing entity with (status 200).

    The SDK finds no ``content`` in it and raises ``ResourceNotFoundError``.
    """
    parts = [
        f'<feed xmlns="{ATOM_NS}">',
        '<title type="text">Publicly Listed Services</title>',
        '<subtitle type="text">This is the list of publicly-listed services currently available.</subtitle>',
        _element("id", f"{_base(base_url)}/"),
    ]
    if now is not None:
        parts.append(_element("updated", format_timestamp(now)))
    parts.append("<generator>Sodalite</generator></feed>")
    return "".join(parts).encode("utf-8")


def namespace_info_entry(
    name: str, now: datetime, *, base_url: str | None = None, created_at: datetime | None = None
) -> bytes:
    """The entry ``GET /$namespaceinfo`` answers with: a ``NamespaceInfo`` for a Standard namespace.

    ``created_at`` (default ``now``) is both its creation and modification time; ``base_url``,
    when given, makes the id and self link.
    """
    created = created_at or now
    members = (
        _element("CreatedTime", format_timestamp(created))
        + _element("MessagingSKU", "Standard")
        + _element("ModifiedTime", format_timestamp(created))
        + _element("Name", name)
        + _element("NamespaceType", "Messaging")
    )
    content = f'<NamespaceInfo xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{members}</NamespaceInfo>'
    return _entry(
        title=name,
        href=None if base_url is None else _self_href(base_url, "$namespaceinfo"),
        author=name if base_url is None else _author(base_url),
        published=None,
        updated=now,
        content=content,
    )


def error_body(code: int, detail: str) -> bytes:
    """The body of an error response: ``<Error><Code>409</Code><Detail>...</Detail></Error>``.

    The SDK reads it into ``ServiceBusManagementError`` and uses ``Detail`` as the exception's
    message; the exception class comes from the HTTP status alone.
    """
    return f"<Error><Code>{int(code)}</Code>{_element('Detail', detail)}</Error>".encode()
