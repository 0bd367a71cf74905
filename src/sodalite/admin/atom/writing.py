"""Writing ATOM entries, feeds and descriptions as the service writes them.

:func:`description_element` writes any description from the model (with the runtime members when
given a runtime, as a response; without, as a request), :func:`entity_entry` / :func:`request_entry`
wrap it in an ATOM entry, :func:`feed` lists entries.

Rules: the ATOM namespace as the default on ``entry``/``feed``, the description in the
``.../2010/10/servicebus/connect`` namespace with ``xmlns:i``, the ``CountDetails`` children in the
``.../2011/06/servicebus`` namespace with the ``d2p1`` prefix, members in DataContract order,
durations in ISO 8601 (``TimeSpan.MaxValue`` as ``P10675199DT2H48M5.4775807S``), booleans in lower
case, timestamps in UTC with a ``Z``. Documents are UTF-8 without an XML declaration, so entries
embed into feeds as they are; characters XML cannot carry are replaced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape, quoteattr

from sodalite.admin.atom.vocabulary import (
    API_VERSION,
    ATOM_NS,
    CONNECT_NS,
    COUNT_MEMBERS,
    COUNTS_NS,
    MEMBERS,
    NEVER,
    QUEUE_LAYOUT,
    RUNTIME_INTS,
    RUNTIME_TIMES,
    SQL_COMPATIBILITY_LEVEL,
    SUBSCRIPTION_LAYOUT,
    TOPIC_LAYOUT,
    XSD_NS,
    Description,
    DescriptionKind,
    EntityProperties,
    EntityRuntime,
    MemberKind,
)
from sodalite.admin.atom_authorization import XSI_NS, authorization_rules_xml
from sodalite.model.entities import (
    CORRELATION_FIELDS,
    CorrelationFilter,
    FalseFilter,
    QueueProperties,
    RuleDescription,
    SqlFilter,
    TopicProperties,
    format_duration,
)

_INT32_MAX: Final = 2_147_483_647
# Computed members this broker writes as constants: features it does not have, in their off state.
_CONSTANTS: Final = {
    "IsAnonymousAccessible": "<IsAnonymousAccessible>false</IsAnonymousAccessible>",
    "FilteringMessagesBeforePublishing": "<FilteringMessagesBeforePublishing>false</FilteringMessagesBeforePublishing>",
    "EnableSubscriptionPartitioning": "<EnableSubscriptionPartitioning>false</EnableSubscriptionPartitioning>",
}
# The SQL expressions .NET gives the constant filters.
_TRUE_EXPRESSION: Final = "1=1"
_FALSE_EXPRESSION: Final = "1=0"
_XML_DECLARATION_RE: Final = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<\?xml[^>]*\?>\s*")
# Characters XML 1.0 cannot carry at all, not even as character references.
_NOT_XML_RE: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


def _count_details(runtime: EntityRuntime) -> str:
    inner = "".join(f"<d2p1:{name}>{getattr(runtime.counts, attr)}</d2p1:{name}>" for name, attr in COUNT_MEMBERS)
    return f'<CountDetails xmlns:d2p1="{COUNTS_NS}">{inner}</CountDetails>'


def _runtime_member(name: str, runtime: EntityRuntime) -> str | None:
    if name in _CONSTANTS:
        return _CONSTANTS[name]
    if name == "MessageCount":
        return _element(name, str(runtime.total))
    if name == "SizeInBytes":
        return _element(name, str(runtime.counts.size_in_bytes))
    if name in RUNTIME_INTS:
        return _element(name, str(getattr(runtime, RUNTIME_INTS[name])))
    if name in RUNTIME_TIMES:
        value: datetime | None = getattr(runtime, RUNTIME_TIMES[name])
        return _element(name, format_timestamp(value or NEVER))
    if name == "CountDetails":
        return _count_details(runtime)
    if name == "EntityAvailabilityStatus":
        return _element(name, runtime.availability)
    return None


def _settable_member(name: str, kind: MemberKind, value: object, base_url: str | None) -> str | None:
    if value is None:
        return None  # absent: the reader takes the default (or no forwarding, no metadata)
    if kind == "entity":
        return _element(name, str(value))  # in the form it was given
    if isinstance(value, bool):
        return _element(name, _bool(value))
    return _element(name, str(value))


def _xsd_value(value: object) -> tuple[str, str]:
    """(xsi:type, text) of a parameter or property value, as the SDK types them."""
    if isinstance(value, bool):
        return "boolean", _bool(value)
    if isinstance(value, int):
        return ("int" if -_INT32_MAX - 1 <= value <= _INT32_MAX else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:  # sent without a zone: written back without one
            return "dateTime", format_timestamp(value).removesuffix("Z")
        return "dateTime", format_timestamp(value)
    if isinstance(value, timedelta):
        return "duration", format_duration(value)
    return "string", str(value)


def _key_values_xml(name: str, values: Mapping[str, object]) -> str:
    pairs = []
    for key, value in values.items():
        value_type, text = _xsd_value(value)
        pairs.append(
            f"<KeyValueOfstringanyType>{_element('Key', key)}"
            f'<Value i:type="d6p1:{value_type}" xmlns:d6p1="{XSD_NS}">{_clean(text)}</Value>'
            "</KeyValueOfstringanyType>")
    return f"<{name}>{''.join(pairs)}</{name}>"


def _filter_xml(rule: RuleDescription) -> str:
    flt = rule.filter
    level = _element("CompatibilityLevel", SQL_COMPATIBILITY_LEVEL)
    if isinstance(flt, SqlFilter):
        parameters = _key_values_xml("Parameters", flt.parameters) if flt.parameters else ""
        return f'<Filter i:type="SqlFilter">{_element("SqlExpression", flt.expression)}{level}{parameters}</Filter>'
    if isinstance(flt, CorrelationFilter):
        members = [_element(key, getattr(flt, attr)) for attr, key in CORRELATION_FIELDS
                   if getattr(flt, attr) is not None]
        if flt.properties:
            members.append(_key_values_xml("Properties", flt.properties))
        return f'<Filter i:type="CorrelationFilter">{"".join(members)}</Filter>'
    if isinstance(flt, FalseFilter):
        return f'<Filter i:type="FalseFilter">{_element("SqlExpression", _FALSE_EXPRESSION)}{level}</Filter>'
    return f'<Filter i:type="TrueFilter">{_element("SqlExpression", _TRUE_EXPRESSION)}{level}</Filter>'


def _rule_members(rule: RuleDescription, created_at: datetime | None) -> str:
    if rule.action is None:
        action = '<Action i:type="EmptyRuleAction"/>'
    else:
        parameters = _key_values_xml("Parameters", rule.action.parameters) if rule.action.parameters else ""
        action = (f'<Action i:type="SqlRuleAction">{_element("SqlExpression", rule.action.expression)}'
                  f'{_element("CompatibilityLevel", SQL_COMPATIBILITY_LEVEL)}{parameters}</Action>')
    created = "" if created_at is None else _element("CreatedAt", format_timestamp(created_at))
    return _filter_xml(rule) + action + created + _element("Name", rule.name)


def _layout(description: EntityProperties) -> tuple[DescriptionKind, tuple[str, ...]]:
    if isinstance(description, QueueProperties):
        return "QueueDescription", QUEUE_LAYOUT
    if isinstance(description, TopicProperties):
        return "TopicDescription", TOPIC_LAYOUT
    return "SubscriptionDescription", SUBSCRIPTION_LAYOUT


def description_element(
    description: Description,
    runtime: EntityRuntime | None = None,
    base_url: str | None = None,
    *,
    default_rule: RuleDescription | None = None,
) -> str:
    """The description element (as text) of any kind, with every member in DataContract order.

    With a ``runtime`` it is a response's: the computed members are written too (for a rule, its
    ``CreatedAt``). Without, it is a request's: settable members only. ``base_url`` (the scheme and
    authority the client used, ``https://localhost:5300``) makes forwarding targets the
    ``sb://host/name`` addresses the service writes; without it they are bare names.
    ``default_rule`` becomes a subscription's ``DefaultRuleDescription`` (requests only).
    """
    if isinstance(description, RuleDescription):
        created = None if runtime is None else runtime.created_at
        body = _rule_members(description, created)
        return f'<RuleDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{body}</RuleDescription>'
    kind, layout = _layout(description)
    members = MEMBERS[kind]
    values = description.to_json()
    parts: list[str] = []
    for name in layout:
        if name == "AuthorizationRules":
            # A response always lists the entity's own keys (none: an empty element); a request only when it has some.
            rules = getattr(description, "authorization_rules", ())
            created = NEVER if runtime is None else runtime.created_at
            written = authorization_rules_xml(rules, created) if rules or runtime is not None else None
        elif name in members:
            written = _settable_member(name, members[name], values.get(name), base_url)
        elif name == "DefaultRuleDescription":
            written = None if default_rule is None else (
                f"<DefaultRuleDescription>{_rule_members(default_rule, None)}</DefaultRuleDescription>")
        else:
            written = None if runtime is None else _runtime_member(name, runtime)
        if written is not None:
            parts.append(written)
    return f'<{kind} xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{"".join(parts)}</{kind}>'


def queue_description_xml(properties: QueueProperties, runtime: EntityRuntime, base_url: str) -> str:
    """The ``QueueDescription`` element (as text) of a response."""
    return description_element(properties, runtime, base_url)


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


def entity_entry(
    path: str, title: str, description: Description, runtime: EntityRuntime, base_url: str, now: datetime
) -> bytes:
    """The ATOM ``entry`` for one entity or rule, as GET, PUT (create and update) and list answer.

    ``path`` is the entity's path under ``base_url`` (``orders``, ``t1/subscriptions/s1``,
    ``t1/subscriptions/s1/rules/r1``) for the id and self link; ``title`` is its own name, which
    the SDK names the entity after when listing. ``published`` is the creation time, ``updated``
    is ``now``.
    """
    return _entry(
        title=title,
        href=_self_href(base_url, path),
        author=_author(base_url),
        published=runtime.created_at,
        updated=now,
        content=description_element(description, runtime, base_url),
    )


def queue_entry(name: str, properties: QueueProperties, runtime: EntityRuntime, base_url: str, now: datetime) -> bytes:
    """The ATOM ``entry`` for one queue (see :func:`entity_entry`)."""
    return entity_entry(name, name, properties, runtime, base_url, now)


def request_entry(description: Description, *, default_rule: RuleDescription | None = None) -> bytes:
    """The body of a create or update request: an ATOM entry holding the settable members."""
    content = description_element(description, default_rule=default_rule)
    return f'<entry xmlns="{ATOM_NS}"><content type="application/xml">{content}</content></entry>'.encode()


def _strip_declaration(entry: bytes) -> bytes:
    return _XML_DECLARATION_RE.sub(b"", entry, count=1)


def feed(
    entries: Sequence[bytes],
    base_url: str,
    title: str,
    next_link: str | None,
    *,
    path: str = "$Resources/queues",
    now: datetime | None = None,
) -> bytes:
    """An ATOM ``feed`` of entries (from :func:`entity_entry`), as list operations answer.

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
