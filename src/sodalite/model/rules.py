"""Subscription rules as stored data: a filter (SQL, correlation, true, false) and an optional SQL action.

Rules are validated on construction (``ConfigurationError`` naming the field) and convert to and
from the Config.json shape (``{"Name": ..., "Properties": {"FilterType": ..., ...}}``); a datetime
parameter is ``{"DateTime": ISO 8601}`` there and a timedelta ``{"Duration": ISO 8601}``. Filters are
not evaluated here (:mod:`sodalite.model.filters` compiles them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from sodalite.errors import ConfigurationError
from sodalite.model.durations import format_duration, parse_duration
from sodalite.model.json_types import (
    JsonObject,
    JsonValue,
    check_keys,
    config_error,
    expect_object,
    expect_string,
    join_path,
    json_type,
    require,
)
from sodalite.model.names import validate_entity_name

#: A value of a correlation filter's application property or of a SQL filter or action parameter
#: (the SDK's ``dateTime`` and ``duration`` values are datetimes and timedeltas).
ScalarValue = str | int | float | bool | datetime | timedelta

# In JSON (Config.json, the stored rules) a datetime is {"DateTime": "<ISO 8601>"} and a timedelta
# {"Duration": "<ISO 8601 duration>"}; the other scalars are themselves.
_JSON_DATETIME: Final = "DateTime"
_JSON_DURATION: Final = "Duration"


def _scalar_to_json(value: ScalarValue) -> JsonValue:
    if isinstance(value, datetime):
        return {_JSON_DATETIME: value.isoformat()}
    if isinstance(value, timedelta):
        return {_JSON_DURATION: format_duration(value)}
    return value


def _scalars_to_json(values: Mapping[str, ScalarValue]) -> JsonObject:
    return {key: _scalar_to_json(value) for key, value in values.items()}


def _scalar_from_json(value: object, where: str) -> object:
    """A datetime or timedelta from its one-key JSON object; anything else as it is."""
    if isinstance(value, dict) and len(value) == 1:
        [(tag, text)] = value.items()
        if tag == _JSON_DATETIME and isinstance(text, str):
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                raise config_error(where, f"{_JSON_DATETIME}: not an ISO 8601 date and time: {text!r}") from None
            return parsed  # without a zone it stays so (a rule's parameter comes back as it was sent)
        if tag == _JSON_DURATION and isinstance(text, str):
            try:
                return parse_duration(text)
            except ConfigurationError as exc:
                raise config_error(where, exc.description) from None
    return value

_MAX_SQL_LENGTH: Final = 1024


def _scalar_problem(value: object) -> str | None:
    if isinstance(value, bool | int | str | datetime | timedelta):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    return f"must be a string, number or boolean (or a date-time or duration), got {json_type(value)}"


def _sql_problem(expression: object) -> str | None:
    if not isinstance(expression, str):
        return f"must be a string, got {json_type(expression)}"
    if not expression.strip():
        return "must not be empty"
    if len(expression) > _MAX_SQL_LENGTH:
        return f"must be at most {_MAX_SQL_LENGTH} characters, got {len(expression)}"
    return None


def _check_scalars(values: object, label: str) -> None:
    if not isinstance(values, dict):
        raise config_error(label, f"must be a dict, got {type(values).__name__}")
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise config_error(label, f"keys must be non-empty strings, got {key!r}")
        problem = _scalar_problem(value)
        if problem is not None:
            raise config_error(f"{label}[{key!r}]", problem)


@dataclass(frozen=True, slots=True)
class _SqlExpression:
    """A SQL expression and the values of its ``@parameters``, checked on construction."""

    expression: str
    parameters: dict[str, ScalarValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kind = type(self).__name__
        problem = _sql_problem(self.expression)
        if problem is not None:
            raise config_error(f"{kind}.expression", problem)
        _check_scalars(self.parameters, f"{kind}.parameters")


class SqlFilter(_SqlExpression):
    """A SQL-92 subset filter; stored, not evaluated here."""

    __slots__ = ()


# CorrelationFilter's fields and the Service Bus system property each one matches.
CORRELATION_FIELDS: Final = (
    ("correlation_id", "CorrelationId"),
    ("message_id", "MessageId"),
    ("to", "To"),
    ("reply_to", "ReplyTo"),
    ("label", "Label"),
    ("session_id", "SessionId"),
    ("reply_to_session_id", "ReplyToSessionId"),
    ("content_type", "ContentType"),
)


@dataclass(frozen=True, slots=True)
class CorrelationFilter:
    """Matches messages whose system and application properties equal the given values."""

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    label: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: dict[str, ScalarValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr, _ in CORRELATION_FIELDS:
            value = getattr(self, attr)
            if value is not None and not isinstance(value, str):
                raise config_error(f"CorrelationFilter.{attr}", f"must be a string, got {type(value).__name__}")
        _check_scalars(self.properties, "CorrelationFilter.properties")
        if not self.properties and all(getattr(self, attr) is None for attr, _ in CORRELATION_FIELDS):
            raise ConfigurationError("CorrelationFilter: a correlation filter must set at least one property")


@dataclass(frozen=True, slots=True)
class TrueFilter:
    """Matches every message."""


@dataclass(frozen=True, slots=True)
class FalseFilter:
    """Matches no message."""


Filter = SqlFilter | CorrelationFilter | TrueFilter | FalseFilter


class SqlRuleAction(_SqlExpression):
    """A SQL action applied to messages a rule's filter matches; stored, not evaluated here."""

    __slots__ = ()


_RULE_KEYS: Final = ("Name", "Properties")
_RULE_PROPERTY_KEYS: Final = ("FilterType", "SqlFilter", "CorrelationFilter", "Action")
_FILTER_TYPES: Final = ("Sql", "Correlation", "True", "False")


@dataclass(frozen=True, slots=True)
class RuleDescription:
    """A subscription rule: a filter and an optional action."""

    name: str
    filter: Filter = field(default_factory=TrueFilter)
    action: SqlRuleAction | None = None

    def __post_init__(self) -> None:
        validate_entity_name(self.name, "rule", label="RuleDescription.name")
        if not isinstance(self.filter, SqlFilter | CorrelationFilter | TrueFilter | FalseFilter):
            raise config_error("RuleDescription.filter", f"must be a filter, got {type(self.filter).__name__}")
        if self.action is not None and not isinstance(self.action, SqlRuleAction):
            raise config_error(
                "RuleDescription.action", f"must be a SqlRuleAction, got {type(self.action).__name__}"
            )

    def to_json(self) -> JsonObject:
        """The rule in the emulator's Config.json shape: ``{"Name": ..., "Properties": {...}}``."""
        props: JsonObject = {}
        flt = self.filter
        if isinstance(flt, SqlFilter):
            props["FilterType"] = "Sql"
            props["SqlFilter"] = {"SqlExpression": flt.expression, "Parameters": _scalars_to_json(flt.parameters)}
        elif isinstance(flt, CorrelationFilter):
            props["FilterType"] = "Correlation"
            correlation: JsonObject = {
                key: getattr(flt, attr) for attr, key in CORRELATION_FIELDS if getattr(flt, attr) is not None
            }
            correlation["Properties"] = _scalars_to_json(flt.properties)
            props["CorrelationFilter"] = correlation
        else:
            props["FilterType"] = "True" if isinstance(flt, TrueFilter) else "False"
        action: JsonObject | None = None
        if self.action is not None:
            action = {"SqlExpression": self.action.expression}
            if self.action.parameters:
                action["Parameters"] = _scalars_to_json(self.action.parameters)
        props["Action"] = action
        return {"Name": self.name, "Properties": props}

    @classmethod
    def from_json(cls, d: Mapping[str, object], *, path: str = "") -> RuleDescription:
        """Parse a rule in the emulator's Config.json shape (see :meth:`to_json`).

        ``FilterType`` is one of ``Sql``, ``Correlation``, ``True``, ``False`` (any case); the
        matching ``SqlFilter`` / ``CorrelationFilter`` object is required for the first two and
        not allowed otherwise. ``Action`` is optional (``{"SqlExpression": ...}`` or null)."""
        obj = expect_object(d, path)
        check_keys(obj, _RULE_KEYS, path)
        name_path = join_path(path, "Name")
        name = validate_entity_name(require(obj, "Name", path), "rule", label=name_path)
        props_path = join_path(path, "Properties")
        props = expect_object(require(obj, "Properties", path), props_path)
        check_keys(props, _RULE_PROPERTY_KEYS, props_path)

        type_path = join_path(props_path, "FilterType")
        raw_type = expect_string(require(props, "FilterType", props_path), type_path)
        filter_type = next((t for t in _FILTER_TYPES if t.lower() == raw_type.lower()), None)
        if filter_type is None:
            raise config_error(type_path, f"must be one of {', '.join(_FILTER_TYPES)}, got {raw_type!r}")
        for key in ("SqlFilter", "CorrelationFilter"):
            if key in props and key != f"{filter_type}Filter":
                raise config_error(join_path(props_path, key), f"not allowed with FilterType {filter_type!r}")

        flt: Filter
        if filter_type == "Sql":
            flt = _sql_filter_from_json(
                require(props, "SqlFilter", props_path), join_path(props_path, "SqlFilter")
            )
        elif filter_type == "Correlation":
            flt = _correlation_filter_from_json(
                require(props, "CorrelationFilter", props_path), join_path(props_path, "CorrelationFilter")
            )
        else:
            flt = TrueFilter() if filter_type == "True" else FalseFilter()

        action: SqlRuleAction | None = None
        raw_action = props.get("Action")
        if raw_action is not None:
            action_path = join_path(props_path, "Action")
            action_obj = expect_object(raw_action, action_path)
            check_keys(action_obj, ("SqlExpression", "Parameters"), action_path)
            parameters = _scalars_from_json(action_obj.get("Parameters"), join_path(action_path, "Parameters"))
            action = SqlRuleAction(_sql_expression(action_obj, action_path), parameters)
        return cls(name, flt, action)


def _sql_expression(obj: Mapping[str, object], path: str) -> str:
    where = join_path(path, "SqlExpression")
    expression = require(obj, "SqlExpression", path)
    problem = _sql_problem(expression)
    if problem is not None:
        raise config_error(where, problem)
    assert isinstance(expression, str)
    return expression


def _scalars_from_json(raw: object, path: str) -> dict[str, ScalarValue]:
    if raw is None:
        return {}
    obj = expect_object(raw, path)
    out: dict[str, ScalarValue] = {}
    for key, value in obj.items():
        where = join_path(path, str(key))
        if not key:
            raise config_error(where, "property names must not be empty")
        value = _scalar_from_json(value, where)
        problem = _scalar_problem(value)
        if problem is not None:
            raise config_error(where, problem)
        assert isinstance(value, str | int | float | bool | datetime | timedelta)
        out[str(key)] = value
    return out


def _sql_filter_from_json(raw: object, path: str) -> SqlFilter:
    obj = expect_object(raw, path)
    check_keys(obj, ("SqlExpression", "Parameters"), path)
    expression = _sql_expression(obj, path)
    parameters = _scalars_from_json(obj.get("Parameters"), join_path(path, "Parameters"))
    return SqlFilter(expression, parameters)


def _correlation_filter_from_json(raw: object, path: str) -> CorrelationFilter:
    obj = expect_object(raw, path)
    check_keys(obj, (*(key for _, key in CORRELATION_FIELDS), "Properties"), path)
    texts: dict[str, str | None] = {}
    for attr, key in CORRELATION_FIELDS:
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            raise config_error(join_path(path, key), f"must be a string, got {json_type(value)}")
        texts[attr] = value
    properties = _scalars_from_json(obj.get("Properties"), join_path(path, "Properties"))
    if all(value is None for value in texts.values()) and not properties:
        raise config_error(path, "a correlation filter must set at least one property")
    return CorrelationFilter(
        correlation_id=texts["correlation_id"], message_id=texts["message_id"], to=texts["to"],
        reply_to=texts["reply_to"], label=texts["label"], session_id=texts["session_id"],
        reply_to_session_id=texts["reply_to_session_id"], content_type=texts["content_type"],
        properties=properties)
