"""The ATOM/XML documents of the Service Bus management REST API, as pure functions (no I/O, no clock).

Theory of operation: ``ServiceBusAdministrationClient`` PUTs an ATOM ``entry`` whose ``content``
holds a ``QueueDescription``, ``TopicDescription``, ``SubscriptionDescription`` or
``RuleDescription`` (sdk-wire-contract.md 8.2), and reads back entries and feeds in the shape the
service writes (8.3). Both directions exist for every kind, so that the broker (which parses PUT
bodies and writes entries) and a client (which writes PUT bodies and parses entries) share them:

* :func:`parse_description` reads any of the four and says which it was; its properties are the
  Service Bus-named, JSON-able dict the model's ``from_json`` takes (a rule in the Config.json shape
  of ``RuleDescription.from_json``), and :meth:`ParsedDescription.description` builds the model;
* :func:`description_element` writes any of them from the model (with the runtime members when
  given a runtime, as a response; without, as a request), :func:`entity_entry` / :func:`request_entry`
  wrap it in an ATOM entry, :func:`feed` lists entries.

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
* rule filters and actions are told apart by ``xsi:type``; the values of SQL parameters and
  correlation properties carry ``xsi:type="d6p1:string|int|long|boolean|double|dateTime|duration"``
  and are read as that type (the model then decides whether it can hold it);
* a malformed value raises :class:`ArgumentError` naming the element
  (``QueueDescription.LockDuration: ...``). Ranges are left to the model's ``from_json``.

Untrusted XML is parsed with defusedxml, with DTDs forbidden.

Writing follows the service: the ATOM namespace as the default on ``entry``/``feed``, the
description in the ``.../2010/10/servicebus/connect`` namespace with ``xmlns:i``, the
``CountDetails`` children in the ``.../2011/06/servicebus`` namespace with the ``d2p1`` prefix,
members in DataContract order, durations in ISO 8601 (``TimeSpan.MaxValue`` as
``P10675199DT2H48M5.4775807S``), booleans in lower case, timestamps in UTC with a ``Z``.
Documents are UTF-8 without an XML declaration, so entries embed into feeds as they are.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal
from urllib.parse import quote, unquote, urlsplit
from xml.sax.saxutils import escape, quoteattr

import defusedxml  # type: ignore[import-untyped, unused-ignore]
import defusedxml.ElementTree as _defused  # type: ignore[import-untyped, unused-ignore]

from sodalite.admin.atom_authorization import authorization_rules_xml, parse_authorization_rules
from sodalite.errors import ArgumentError, ConfigurationError
from sodalite.model.entities import (
    CORRELATION_FIELDS,
    DEFAULT_RULE_NAME,
    TIMESPAN_MAX,
    CorrelationFilter,
    FalseFilter,
    QueueProperties,
    RuleDescription,
    SqlFilter,
    SubscriptionProperties,
    TopicProperties,
    format_duration,
    parse_duration,
)

ATOM_NS: Final = "http://www.w3.org/2005/Atom"
CONNECT_NS: Final = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS_NS: Final = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI_NS: Final = "http://www.w3.org/2001/XMLSchema-instance"
XSD_NS: Final = "http://www.w3.org/2001/XMLSchema"

#: The api-version the service writes into ids and self links.
API_VERSION: Final = "2021-05"

#: What ``AccessedAt`` says for an entity nobody has used yet (.NET ``DateTime.MinValue``).
NEVER: Final = datetime(1, 1, 1, tzinfo=UTC)

#: The SQL compatibility level every filter and action of the service has.
SQL_COMPATIBILITY_LEVEL: Final = "20"

# The SDK cannot send TimeSpan.MaxValue back: it reads it as a timedelta rounded up past the
# maximum, then subtracts a microsecond in float arithmetic (avoid_timedelta_overflow) and sends
# P10675199DT2H48M5.477539S. Anything this close to the maximum means "never" and is read as it.
_NEAR_TIMESPAN_MAX: Final = TIMESPAN_MAX - timedelta(seconds=1)

_NIL: Final = f"{{{XSI_NS}}}nil"
_XSI_TYPE: Final = f"{{{XSI_NS}}}type"
_MAX_SHOWN: Final = 64
_INT32_MAX: Final = 2_147_483_647

DescriptionKind = Literal["QueueDescription", "TopicDescription", "SubscriptionDescription", "RuleDescription"]
KINDS: Final[tuple[DescriptionKind, ...]] = (
    "QueueDescription", "TopicDescription", "SubscriptionDescription", "RuleDescription")

EntityProperties = QueueProperties | TopicProperties | SubscriptionProperties
Description = EntityProperties | RuleDescription

_Kind = Literal["duration", "int", "bool", "status", "text", "entity", "authorization_rules"]

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
    "AuthorizationRules": "authorization_rules",
}

_TOPIC_MEMBERS: Final[dict[str, _Kind]] = {
    "DefaultMessageTimeToLive": "duration",
    "MaxSizeInMegabytes": "int",
    "RequiresDuplicateDetection": "bool",
    "DuplicateDetectionHistoryTimeWindow": "duration",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "SupportOrdering": "bool",
    "AutoDeleteOnIdle": "duration",
    "EnablePartitioning": "bool",
    "EnableExpress": "bool",
    "UserMetadata": "text",
    "MaxMessageSizeInKilobytes": "int",
    "AuthorizationRules": "authorization_rules",
}

_SUBSCRIPTION_MEMBERS: Final[dict[str, _Kind]] = {
    "LockDuration": "duration",
    "RequiresSession": "bool",
    "DefaultMessageTimeToLive": "duration",
    "DeadLetteringOnMessageExpiration": "bool",
    "DeadLetteringOnFilterEvaluationExceptions": "bool",
    "MaxDeliveryCount": "int",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "ForwardTo": "entity",
    "UserMetadata": "text",
    "ForwardDeadLetteredMessagesTo": "entity",
    "AutoDeleteOnIdle": "duration",
}

_MEMBERS: Final[dict[DescriptionKind, dict[str, _Kind]]] = {
    "QueueDescription": _QUEUE_MEMBERS,
    "TopicDescription": _TOPIC_MEMBERS,
    "SubscriptionDescription": _SUBSCRIPTION_MEMBERS,
}

#: Members the service computes; the SDK echoes them back on update and they are ignored.
READ_ONLY_QUEUE_MEMBERS: Final = frozenset(
    {
        "SizeInBytes",
        "MessageCount",
        "IsAnonymousAccessible",
        "CreatedAt",
        "UpdatedAt",
        "AccessedAt",
        "CountDetails",
        "EntityAvailabilityStatus",
    }
)

# The members of each description in DataContract order, settable and computed alike (the order
# the service writes them in; sdk-wire-contract.md 8.3 and the SDK's generated models).
_QUEUE_LAYOUT: Final = (
    "LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
    "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
    "MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
    "AuthorizationRules", "Status", "ForwardTo", "UserMetadata", "CreatedAt", "UpdatedAt", "AccessedAt",
    "SupportOrdering", "CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
    "ForwardDeadLetteredMessagesTo", "EnableExpress", "MaxMessageSizeInKilobytes",
)
_TOPIC_LAYOUT: Final = (
    "DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
    "DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
    "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "CreatedAt",
    "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount", "SqlFilterCount",
    "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
    "EnableSubscriptionPartitioning", "EnableExpress", "UserMetadata", "MaxMessageSizeInKilobytes",
)
_SUBSCRIPTION_LAYOUT: Final = (
    "LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration",
    "DeadLetteringOnFilterEvaluationExceptions", "DefaultRuleDescription", "MessageCount", "MaxDeliveryCount",
    "EnableBatchedOperations", "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "CountDetails",
    "UserMetadata", "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EntityAvailabilityStatus",
)

# Computed members this broker writes as constants: features it does not have, in their off state.
_CONSTANTS: Final = {
    "IsAnonymousAccessible": "<IsAnonymousAccessible>false</IsAnonymousAccessible>",
    "FilteringMessagesBeforePublishing": "<FilteringMessagesBeforePublishing>false</FilteringMessagesBeforePublishing>",
    "EnableSubscriptionPartitioning": "<EnableSubscriptionPartitioning>false</EnableSubscriptionPartitioning>",
}

# Filter and action types (xsi:type) and the FilterType names of RuleDescription.from_json.
_FILTER_TYPES: Final = {"SqlFilter": "Sql", "CorrelationFilter": "Correlation", "TrueFilter": "True",
                        "FalseFilter": "False"}
_ACTION_TYPES: Final = ("SqlRuleAction", "EmptyRuleAction")
# The SQL expressions .NET gives the constant filters.
_TRUE_EXPRESSION: Final = "1=1"
_FALSE_EXPRESSION: Final = "1=0"

_INT_RE: Final = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
_XML_DECLARATION_RE: Final = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<\?xml[^>]*\?>\s*")
# Characters XML 1.0 cannot carry at all, not even as character references.
_NOT_XML_RE: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# --------------------------------------------------------------------------------------------------
# Runtime counts
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityRuntime:
    """What the service computes about an entity: message counts, size, timestamps.

    Queues and subscriptions use the counts; topics use ``size_in_bytes``, ``scheduled`` and the
    subscription and filter counts; a rule only its ``created_at``.
    """

    active: int = 0
    dead_letter: int = 0
    scheduled: int = 0
    transfer: int = 0
    transfer_dead_letter: int = 0
    size_in_bytes: int = 0
    created_at: datetime = NEVER
    updated_at: datetime = NEVER
    accessed_at: datetime | None = None
    subscription_count: int = 0
    sql_filter_count: int = 0
    correlation_filter_count: int = 0
    availability: str = "Available"  # EntityAvailabilityStatus: Limited while a store of it is unavailable

    @property
    def total(self) -> int:
        """``MessageCount``: every message the entity holds, dead-lettered and scheduled included."""
        return self.active + self.dead_letter + self.scheduled + self.transfer + self.transfer_dead_letter


_COUNT_MEMBERS: Final = (
    ("ActiveMessageCount", "active"),
    ("DeadLetterMessageCount", "dead_letter"),
    ("ScheduledMessageCount", "scheduled"),
    ("TransferMessageCount", "transfer"),
    ("TransferDeadLetterMessageCount", "transfer_dead_letter"),
)
_RUNTIME_INTS: Final = {
    "SizeInBytes": "size_in_bytes",
    "SubscriptionCount": "subscription_count",
    "SqlFilterCount": "sql_filter_count",
    "CorrelationFilterCount": "correlation_filter_count",
}
_RUNTIME_TIMES: Final = {"CreatedAt": "created_at", "UpdatedAt": "updated_at", "AccessedAt": "accessed_at"}


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedDescription:
    """A description read from a request or response body.

    ``properties`` is what the model's ``from_json`` takes: Service Bus-named entity properties,
    or for a ``RuleDescription`` the Config.json rule shape (``{"Name": ..., "Properties": ...}``,
    ``Name`` left out when the body has none). ``default_rule`` is a subscription's
    ``DefaultRuleDescription`` in that rule shape, when the body has one. ``runtime`` holds the
    computed members a response carries (None when there are none, as in a request).
    """

    kind: DescriptionKind
    properties: dict[str, Any]
    default_rule: dict[str, Any] | None = None
    runtime: EntityRuntime | None = None

    def description(self, name: str | None = None) -> Description:
        """The model object; ``name`` names a rule (the request path's, winning over the body's)."""
        if self.kind == "QueueDescription":
            return QueueProperties.from_json(self.properties, path=self.kind)
        if self.kind == "TopicDescription":
            return TopicProperties.from_json(self.properties, path=self.kind)
        if self.kind == "SubscriptionDescription":
            return SubscriptionProperties.from_json(self.properties, path=self.kind)
        return _rule_model(self.properties, name, self.kind)

    def default_rule_description(self) -> RuleDescription | None:
        """A subscription's ``DefaultRuleDescription`` (named ``$Default`` unless it names itself)."""
        if self.default_rule is None:
            return None
        return _rule_model(self.default_rule, None, "SubscriptionDescription.DefaultRuleDescription")


def _rule_model(rule: dict[str, Any], name: str | None, where: str) -> RuleDescription:
    shaped = dict(rule)
    if name is not None:
        shaped["Name"] = name
    if "Name" not in shaped:
        raise ArgumentError(f"{where}.Name: a rule needs a name")
    return RuleDescription.from_json(shaped, path=where)


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
        raise ArgumentError("the request body is empty; expected an ATOM entry holding a description")
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


def _description_of(root: ET.Element) -> ET.Element:
    """The description element of an ATOM ``entry`` (or the root itself when it is one)."""
    expected = ", ".join(KINDS)
    root_name = _local(root.tag)
    if root_name in KINDS:
        return root
    if root_name != "entry":
        raise ArgumentError(f"expected an ATOM entry holding one of {expected}, got a root element {root_name!r}")
    contents = [child for child in _children(root) if _local(child.tag) == "content"]
    if len(contents) != 1:
        problem = "has no content element" if not contents else "has more than one content element"
        raise ArgumentError(f"entry: {problem}; expected one holding one of {expected}")
    inner = _children(contents[0])
    if len(inner) != 1 or _local(inner[0].tag) not in KINDS:
        got = ", ".join(_local(child.tag) for child in inner) or "nothing"
        raise ArgumentError(f"entry.content: expected one of {expected}, got {got}")
    return inner[0]


def _is_nil(element: ET.Element) -> bool:
    return element.get(_NIL, "").strip().lower() in ("true", "1")


def _entity_name(text: str, where: str) -> str | None:
    """A forwarding target in the form given (``sb://host:port/name`` or a bare name, kept so: Service
    Bus gives it back so); empty -> None (no forwarding)."""
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
    return text


def _text(element: ET.Element, where: str) -> str:
    if _children(element):
        raise ArgumentError(f"{where}: must hold text, not child elements")
    return element.text or ""


def _bool_value(text: str, where: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ArgumentError(f"{where}: must be true or false, got {_show(text)}")


def _int_value(text: str, where: str) -> int:
    text = text.strip()
    if _INT_RE.fullmatch(text) is None:
        raise ArgumentError(f"{where}: must be an integer, got {_show(text)}")
    return int(text)


def _duration_value(text: str, where: str) -> timedelta:
    try:
        return parse_duration(text.strip())
    except ConfigurationError as exc:
        raise ArgumentError(f"{where}: {exc.description}") from None


def _timestamp_value(text: str, where: str, *, keep_naive: bool = False) -> datetime:
    """A timestamp in UTC; one without a zone is UTC, or (``keep_naive``: a rule's parameter value,
    which comes back as it was sent, as Service Bus gives it) stays without one."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ArgumentError(f"{where}: must be an ISO 8601 timestamp, got {_show(text)}") from None
    if value.tzinfo is None:
        return value if keep_naive else value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _member_value(kind: _Kind, element: ET.Element, where: str) -> Any:
    """The JSON-able value of one member, as the model's ``from_json`` takes it."""
    if kind == "authorization_rules":
        return parse_authorization_rules(element, where)
    raw = _text(element, where)
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
        return _bool_value(text, where)
    if kind == "int":
        return _int_value(text, where)
    # duration: check the syntax here, keep the text; from_json checks the range
    value = _duration_value(text, where)
    return format_duration(TIMESPAN_MAX) if value >= _NEAR_TIMESPAN_MAX else text


def _unique_children(element: ET.Element, where: str) -> list[tuple[str, ET.Element]]:
    """(local name, child) for each element child; a member given twice is refused."""
    seen: set[str] = set()
    out = []
    for child in _children(element):
        name = _local(child.tag)
        if name in seen:
            raise ArgumentError(f"{where}.{name}: appears more than once")
        seen.add(name)
        out.append((name, child))
    return out


def _parse_members(description: ET.Element, members: Mapping[str, _Kind]) -> dict[str, Any]:
    kind_name = _local(description.tag)
    out: dict[str, Any] = {}
    for name, child in _unique_children(description, kind_name):
        kind = members.get(name)
        if kind is None or _is_nil(child):
            continue
        out[name] = _member_value(kind, child, f"{kind_name}.{name}")
    return out


def _parse_runtime(description: ET.Element) -> EntityRuntime | None:
    """The computed members of a response's description, or None when it has none."""
    where = _local(description.tag)
    values: dict[str, Any] = {}
    for name, child in _unique_children(description, where):
        if _is_nil(child):
            continue
        if name in _RUNTIME_INTS:
            values[_RUNTIME_INTS[name]] = _int_value(_text(child, f"{where}.{name}"), f"{where}.{name}")
        elif name in _RUNTIME_TIMES:
            values[_RUNTIME_TIMES[name]] = _timestamp_value(_text(child, f"{where}.{name}"), f"{where}.{name}")
        elif name == "EntityAvailabilityStatus":
            values["availability"] = _text(child, f"{where}.{name}").strip()
        elif name == "CountDetails":
            counts = dict(_COUNT_MEMBERS)
            for count_name, count in _unique_children(child, f"{where}.CountDetails"):
                if count_name in counts:
                    at = f"{where}.CountDetails.{count_name}"
                    values[counts[count_name]] = _int_value(_text(count, at), at)
    return EntityRuntime(**values) if values else None


def _xsi_type(element: ET.Element) -> str | None:
    """The local part of an element's ``xsi:type`` (``d6p1:int`` -> ``int``)."""
    value = element.get(_XSI_TYPE)
    return None if value is None else value.strip().rpartition(":")[2]


def _key_value(value: ET.Element, where: str) -> Any:
    """One SQL parameter or correlation property value, typed by its ``xsi:type``."""
    if _is_nil(value):
        return None
    text = _text(value, where)
    value_type = _xsi_type(value) or "string"
    if value_type == "string":
        return text
    if value_type in ("int", "long", "short", "byte", "unsignedInt", "unsignedShort", "unsignedByte"):
        return _int_value(text, where)
    if value_type == "boolean":
        return _bool_value(text, where)
    if value_type in ("double", "float"):
        try:
            return float(text.strip())
        except ValueError:
            raise ArgumentError(f"{where}: must be a number, got {_show(text)}") from None
    if value_type == "dateTime":
        return _timestamp_value(text, where, keep_naive=True)
    if value_type == "duration":
        return _duration_value(text, where)
    raise ArgumentError(f"{where}: unsupported value type {value_type!r} (expected string, int, long, boolean, "
                        "double, dateTime or duration)")


def _key_values(element: ET.Element, where: str) -> dict[str, Any]:
    """``<KeyValueOfstringanyType><Key/><Value xsi:type=.../></...>`` children as a dict."""
    out: dict[str, Any] = {}
    for index, pair in enumerate(_children(element)):
        at = f"{where}[{index}]"
        parts = dict(_unique_children(pair, at))
        if "Key" not in parts or "Value" not in parts:
            raise ArgumentError(f"{at}: needs a Key and a Value")
        key = _text(parts["Key"], f"{at}.Key")
        if key in out:
            raise ArgumentError(f"{where}: the key {_show(key)} appears more than once")
        out[key] = _key_value(parts["Value"], f"{where}[{key!r}]")
    return out


def _sql_member(parts: Mapping[str, ET.Element], where: str) -> str:
    element = parts.get("SqlExpression")
    if element is None or _is_nil(element):
        raise ArgumentError(f"{where}.SqlExpression: required")
    return _text(element, f"{where}.SqlExpression")


def _parse_filter(element: ET.Element, where: str) -> dict[str, Any]:
    """A ``Filter`` element as the ``FilterType`` / ``SqlFilter`` / ``CorrelationFilter`` keys."""
    filter_type = _xsi_type(element)
    if filter_type not in _FILTER_TYPES:
        raise ArgumentError(f"{where}: xsi:type must be one of {', '.join(_FILTER_TYPES)}, got {filter_type!r}")
    parts = dict(_unique_children(element, where))
    out: dict[str, Any] = {"FilterType": _FILTER_TYPES[filter_type]}
    if filter_type == "SqlFilter":
        sql: dict[str, Any] = {"SqlExpression": _sql_member(parts, where)}
        if "Parameters" in parts and not _is_nil(parts["Parameters"]):
            sql["Parameters"] = _key_values(parts["Parameters"], f"{where}.Parameters")
        out["SqlFilter"] = sql
    elif filter_type == "CorrelationFilter":
        correlation: dict[str, Any] = {}
        for _, key in CORRELATION_FIELDS:
            if key in parts and not _is_nil(parts[key]):
                correlation[key] = _text(parts[key], f"{where}.{key}")
        if "Properties" in parts and not _is_nil(parts["Properties"]):
            correlation["Properties"] = _key_values(parts["Properties"], f"{where}.Properties")
        out["CorrelationFilter"] = correlation
    return out


def _parse_action(element: ET.Element, where: str) -> dict[str, Any] | None:
    action_type = _xsi_type(element)
    if action_type not in _ACTION_TYPES:
        raise ArgumentError(f"{where}: xsi:type must be one of {', '.join(_ACTION_TYPES)}, got {action_type!r}")
    if action_type == "EmptyRuleAction":
        return None
    parts = dict(_unique_children(element, where))
    action: dict[str, Any] = {"SqlExpression": _sql_member(parts, where)}
    if "Parameters" in parts and not _is_nil(parts["Parameters"]):
        action["Parameters"] = _key_values(parts["Parameters"], f"{where}.Parameters")
    return action


def _parse_rule(element: ET.Element, where: str) -> dict[str, Any]:
    """A RuleDescription (or DefaultRuleDescription) in ``RuleDescription.from_json``'s shape."""
    parts = dict(_unique_children(element, where))
    flt = parts.get("Filter")
    properties: dict[str, Any] = (
        {"FilterType": "True"} if flt is None or _is_nil(flt) else _parse_filter(flt, f"{where}.Filter"))
    action = parts.get("Action")
    properties["Action"] = None if action is None or _is_nil(action) else _parse_action(action, f"{where}.Action")
    rule: dict[str, Any] = {"Properties": properties}
    name = parts.get("Name")
    if name is not None and not _is_nil(name):
        rule["Name"] = _text(name, f"{where}.Name").strip()
    return rule


def parse_description(body: bytes) -> ParsedDescription:
    """Read a request or response body: an ATOM ``entry`` whose ``content`` holds a description
    (or a bare description), of any of the four kinds.

    Settable members the body leaves out are left out of ``properties``, so the model's
    ``from_json`` gives them their defaults. Raises ``ArgumentError``, naming the element, for XML
    that is not well formed, a document that is not a description, or a malformed value.
    """
    element = _description_of(_parse_xml(body))
    kind: DescriptionKind = next(k for k in KINDS if k == _local(element.tag))
    runtime = _parse_runtime(element)
    if kind == "RuleDescription":
        return ParsedDescription(kind, _parse_rule(element, kind), runtime=runtime)
    properties = _parse_members(element, _MEMBERS[kind])
    default_rule = None
    if kind == "SubscriptionDescription":
        found = [child for child in _children(element) if _local(child.tag) == "DefaultRuleDescription"]
        if found and not _is_nil(found[0]):
            default_rule = _parse_rule(found[0], f"{kind}.DefaultRuleDescription")
            default_rule.setdefault("Name", DEFAULT_RULE_NAME)
    return ParsedDescription(kind, properties, default_rule, runtime)


def parse_queue_description(body: bytes) -> dict[str, Any]:
    """The settable properties in a create/update queue request body, by their Service Bus names.

    As :func:`parse_description`, for a body that must hold a ``QueueDescription``: the result maps
    PascalCase names to JSON-able values (durations as ISO 8601 strings, booleans as bool, integers
    as int, forwarding targets as entity names, None to clear).
    """
    parsed = parse_description(body)
    if parsed.kind != "QueueDescription":
        raise ArgumentError(f"entry.content: expected a QueueDescription, got {parsed.kind}")
    return parsed.properties


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


def _count_details(runtime: EntityRuntime) -> str:
    inner = "".join(f"<d2p1:{name}>{getattr(runtime, attr)}</d2p1:{name}>" for name, attr in _COUNT_MEMBERS)
    return f'<CountDetails xmlns:d2p1="{COUNTS_NS}">{inner}</CountDetails>'


def _runtime_member(name: str, runtime: EntityRuntime) -> str | None:
    if name in _CONSTANTS:
        return _CONSTANTS[name]
    if name == "MessageCount":
        return _element(name, str(runtime.total))
    if name in _RUNTIME_INTS:
        return _element(name, str(getattr(runtime, _RUNTIME_INTS[name])))
    if name in _RUNTIME_TIMES:
        value: datetime | None = getattr(runtime, _RUNTIME_TIMES[name])
        return _element(name, format_timestamp(value or NEVER))
    if name == "CountDetails":
        return _count_details(runtime)
    if name == "EntityAvailabilityStatus":
        return _element(name, runtime.availability)
    return None


def _settable_member(name: str, kind: _Kind, value: Any, base_url: str | None) -> str | None:
    if value is None:
        return None  # absent: the reader takes the default (or no forwarding, no metadata)
    if kind == "entity":
        return _element(name, value)  # in the form it was given
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
        return "QueueDescription", _QUEUE_LAYOUT
    if isinstance(description, TopicProperties):
        return "TopicDescription", _TOPIC_LAYOUT
    return "SubscriptionDescription", _SUBSCRIPTION_LAYOUT


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
    members = _MEMBERS[kind]
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
