"""Reading ATOM entries and descriptions (PUT bodies from the SDK, or the service's answers).

:func:`parse_description` reads any of the four descriptions and says which it was; its properties
are the Service Bus-named, JSON-able dict the model's ``from_json`` takes (a rule in the Config.json
shape of ``RuleDescription.from_json``), and :meth:`ParsedDescription.description` builds the model.

Lenient where the SDK's own echo demands it, strict about values:

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
  (``QueueDescription.LockDuration: ...``). Ranges are left to the model's ``from_json``;
* untrusted XML is parsed with defusedxml, with DTDs forbidden.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import unquote, urlsplit

import defusedxml  # type: ignore[import-untyped, unused-ignore]
import defusedxml.ElementTree as _defused  # type: ignore[import-untyped, unused-ignore]

from sodalite.admin.atom.vocabulary import (
    COUNT_MEMBERS,
    KINDS,
    MEMBERS,
    RUNTIME_INTS,
    RUNTIME_TIMES,
    Description,
    DescriptionKind,
    EntityRuntime,
    MemberKind,
)
from sodalite.admin.atom_authorization import XSI_NS, parse_authorization_rules
from sodalite.admin.counts import EntityCounts
from sodalite.errors import ArgumentError, ConfigurationError
from sodalite.model.entities import (
    CORRELATION_FIELDS,
    DEFAULT_RULE_NAME,
    TIMESPAN_MAX,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
    format_duration,
    parse_duration,
)

# The SDK cannot send TimeSpan.MaxValue back: it reads it as a timedelta rounded up past the
# maximum, then subtracts a microsecond in float arithmetic (avoid_timedelta_overflow) and sends
# P10675199DT2H48M5.477539S. Anything this close to the maximum means "never" and is read as it.
_NEAR_TIMESPAN_MAX: Final = TIMESPAN_MAX - timedelta(seconds=1)
_NIL: Final = f"{{{XSI_NS}}}nil"
_XSI_TYPE: Final = f"{{{XSI_NS}}}type"
_MAX_SHOWN: Final = 64
# Filter and action types (xsi:type) and the FilterType names of RuleDescription.from_json.
_FILTER_TYPES: Final = {"SqlFilter": "Sql", "CorrelationFilter": "Correlation", "TrueFilter": "True",
                        "FalseFilter": "False"}
_ACTION_TYPES: Final = ("SqlRuleAction", "EmptyRuleAction")
_INT_RE: Final = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)


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
    properties: dict[str, object]
    default_rule: dict[str, object] | None = None
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


def _rule_model(rule: dict[str, object], name: str | None, where: str) -> RuleDescription:
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


def _member_value(kind: MemberKind, element: ET.Element, where: str) -> object:
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


def _parse_members(description: ET.Element, members: Mapping[str, MemberKind]) -> dict[str, object]:
    kind_name = _local(description.tag)
    out: dict[str, object] = {}
    for name, child in _unique_children(description, kind_name):
        kind = members.get(name)
        if kind is None or _is_nil(child):
            continue
        out[name] = _member_value(kind, child, f"{kind_name}.{name}")
    return out


def _parse_runtime(description: ET.Element) -> EntityRuntime | None:
    """The computed members of a response's description, or None when it has none."""
    where = _local(description.tag)
    values: dict[str, object] = {}
    counts: dict[str, int] = {}
    for name, child in _unique_children(description, where):
        if _is_nil(child):
            continue
        if name == "SizeInBytes":
            counts["size_in_bytes"] = _int_value(_text(child, f"{where}.{name}"), f"{where}.{name}")
        elif name in RUNTIME_INTS:
            values[RUNTIME_INTS[name]] = _int_value(_text(child, f"{where}.{name}"), f"{where}.{name}")
        elif name in RUNTIME_TIMES:
            values[RUNTIME_TIMES[name]] = _timestamp_value(_text(child, f"{where}.{name}"), f"{where}.{name}")
        elif name == "EntityAvailabilityStatus":
            values["availability"] = _text(child, f"{where}.{name}").strip()
        elif name == "CountDetails":
            members = dict(COUNT_MEMBERS)
            for count_name, count in _unique_children(child, f"{where}.CountDetails"):
                if count_name in members:
                    at = f"{where}.CountDetails.{count_name}"
                    counts[members[count_name]] = _int_value(_text(count, at), at)
    if counts:
        values["counts"] = EntityCounts(**counts)
    runtime: Callable[..., EntityRuntime] = EntityRuntime  # values typed by the member tables above
    return runtime(**values) if values else None


def _xsi_type(element: ET.Element) -> str | None:
    """The local part of an element's ``xsi:type`` (``d6p1:int`` -> ``int``)."""
    value = element.get(_XSI_TYPE)
    return None if value is None else value.strip().rpartition(":")[2]


def _key_value(value: ET.Element, where: str) -> object:
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


def _key_values(element: ET.Element, where: str) -> dict[str, object]:
    """``<KeyValueOfstringanyType><Key/><Value xsi:type=.../></...>`` children as a dict."""
    out: dict[str, object] = {}
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


def _parse_filter(element: ET.Element, where: str) -> dict[str, object]:
    """A ``Filter`` element as the ``FilterType`` / ``SqlFilter`` / ``CorrelationFilter`` keys."""
    filter_type = _xsi_type(element)
    if filter_type not in _FILTER_TYPES:
        raise ArgumentError(f"{where}: xsi:type must be one of {', '.join(_FILTER_TYPES)}, got {filter_type!r}")
    parts = dict(_unique_children(element, where))
    out: dict[str, object] = {"FilterType": _FILTER_TYPES[filter_type]}
    if filter_type == "SqlFilter":
        sql: dict[str, object] = {"SqlExpression": _sql_member(parts, where)}
        if "Parameters" in parts and not _is_nil(parts["Parameters"]):
            sql["Parameters"] = _key_values(parts["Parameters"], f"{where}.Parameters")
        out["SqlFilter"] = sql
    elif filter_type == "CorrelationFilter":
        correlation: dict[str, object] = {}
        for _, key in CORRELATION_FIELDS:
            if key in parts and not _is_nil(parts[key]):
                correlation[key] = _text(parts[key], f"{where}.{key}")
        if "Properties" in parts and not _is_nil(parts["Properties"]):
            correlation["Properties"] = _key_values(parts["Properties"], f"{where}.Properties")
        out["CorrelationFilter"] = correlation
    return out


def _parse_action(element: ET.Element, where: str) -> dict[str, object] | None:
    action_type = _xsi_type(element)
    if action_type not in _ACTION_TYPES:
        raise ArgumentError(f"{where}: xsi:type must be one of {', '.join(_ACTION_TYPES)}, got {action_type!r}")
    if action_type == "EmptyRuleAction":
        return None
    parts = dict(_unique_children(element, where))
    action: dict[str, object] = {"SqlExpression": _sql_member(parts, where)}
    if "Parameters" in parts and not _is_nil(parts["Parameters"]):
        action["Parameters"] = _key_values(parts["Parameters"], f"{where}.Parameters")
    return action


def _parse_rule(element: ET.Element, where: str) -> dict[str, object]:
    """A RuleDescription (or DefaultRuleDescription) in ``RuleDescription.from_json``'s shape."""
    parts = dict(_unique_children(element, where))
    flt = parts.get("Filter")
    properties: dict[str, object] = (
        {"FilterType": "True"} if flt is None or _is_nil(flt) else _parse_filter(flt, f"{where}.Filter"))
    action = parts.get("Action")
    properties["Action"] = None if action is None or _is_nil(action) else _parse_action(action, f"{where}.Action")
    rule: dict[str, object] = {"Properties": properties}
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
    properties = _parse_members(element, MEMBERS[kind])
    default_rule = None
    if kind == "SubscriptionDescription":
        found = [child for child in _children(element) if _local(child.tag) == "DefaultRuleDescription"]
        if found and not _is_nil(found[0]):
            default_rule = _parse_rule(found[0], f"{kind}.DefaultRuleDescription")
            default_rule.setdefault("Name", DEFAULT_RULE_NAME)
    return ParsedDescription(kind, properties, default_rule, runtime)


def parse_queue_description(body: bytes) -> dict[str, object]:
    """The settable properties in a create/update queue request body, by their Service Bus names.

    As :func:`parse_description`, for a body that must hold a ``QueueDescription``: the result maps
    PascalCase names to JSON-able values (durations as ISO 8601 strings, booleans as bool, integers
    as int, forwarding targets as entity names, None to clear).
    """
    parsed = parse_description(body)
    if parsed.kind != "QueueDescription":
        raise ArgumentError(f"entry.content: expected a QueueDescription, got {parsed.kind}")
    return parsed.properties
