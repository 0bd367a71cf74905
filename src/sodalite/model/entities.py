"""Service Bus entity properties, as frozen data with the Service Bus defaults and limits.

Every properties class validates itself on construction (``ConfigurationError`` naming the field)
and converts to and from a JSON-able dict keyed by the Service Bus PascalCase property names, with
durations as ISO 8601 strings (``PT1M``). ``from_json`` accepts a subset of the keys (the rest take
their defaults), rejects unknown keys, and takes an optional ``path`` so that its error messages
name the offending field by its position in a larger document
(``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``).

Rules are stored data only; filters are not evaluated here.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Final, Literal, Self, TypeVar

from sodalite.errors import ConfigurationError
from sodalite.model.authorization import AuthorizationRule, rules_from_json
from sodalite.model.json_types import JsonObject, JsonValue, json_type

# --------------------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------------------

#: .NET ``TimeSpan.MaxValue`` truncated to microseconds: Service Bus's "never" for durations.
TIMESPAN_MAX: Final = timedelta(days=10675199, hours=2, minutes=48, seconds=5, microseconds=477580)

_TIMESPAN_MAX_TICKS: Final = 9_223_372_036_854_775_807  # TimeSpan.MaxValue in 100 ns ticks
_TIMESPAN_MAX_TEXT: Final = "P10675199DT2H48M5.4775807S"  # how .NET and Service Bus spell it
_TICKS_PER_SECOND: Final = 10_000_000
_MAX_DIGITS: Final = 20

_DURATION_RE: Final = re.compile(
    r"P(?!\Z)"
    r"(?:(?P<days>[0-9]+)D)?"
    r"(?:T(?=[0-9])"
    r"(?:(?P<hours>[0-9]+)H)?"
    r"(?:(?P<minutes>[0-9]+)M)?"
    r"(?:(?P<seconds>[0-9]+)(?:\.(?P<fraction>[0-9]+))?S)?"
    r")?",
    re.ASCII,
)


def parse_duration(text: str) -> timedelta:
    """Parse an ISO 8601 duration of the form ``PnDTnHnMn.nS`` (each part optional, at least one).

    Fractions are allowed on seconds only and are truncated to microseconds; years, months, weeks,
    signs and values beyond ``TimeSpan.MaxValue`` are rejected with ``ConfigurationError``.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"expected an ISO 8601 duration string, got {json_type(text)}")
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise ConfigurationError(
            f"invalid ISO 8601 duration {text!r} (expected a form such as PT1M, PT45S, P1DT2H or PT0.5S;"
            " years, months and weeks are not supported)"
        )
    parts = match.groupdict()
    if any(value is not None and len(value) > _MAX_DIGITS for value in parts.values()):
        raise ConfigurationError(f"duration {text!r} exceeds the maximum duration {_TIMESPAN_MAX_TEXT}")
    days = int(parts["days"] or 0)
    hours = int(parts["hours"] or 0)
    minutes = int(parts["minutes"] or 0)
    seconds = int(parts["seconds"] or 0)
    fraction = parts["fraction"] or ""
    ticks = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    ticks = ticks * _TICKS_PER_SECOND + int(fraction[:7].ljust(7, "0"))
    if ticks > _TIMESPAN_MAX_TICKS:
        raise ConfigurationError(f"duration {text!r} exceeds the maximum duration {_TIMESPAN_MAX_TEXT}")
    return timedelta(microseconds=ticks // 10)


def format_duration(value: timedelta) -> str:
    """Format a duration as ISO 8601 (``PT1M``, ``P1DT2H``, ``PT0.5S``); the inverse of
    :func:`parse_duration`. ``TIMESPAN_MAX`` is written as .NET writes ``TimeSpan.MaxValue``."""
    if value < timedelta(0) or value > TIMESPAN_MAX:
        raise ConfigurationError(f"duration {value!r} is outside 0 .. TimeSpan.MaxValue")
    if value == TIMESPAN_MAX:
        return _TIMESPAN_MAX_TEXT
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = "P"
    if value.days:
        text += f"{value.days}D"
    time = ""
    if hours:
        time += f"{hours}H"
    if minutes:
        time += f"{minutes}M"
    if seconds or value.microseconds:
        time += f"{seconds}"
        if value.microseconds:
            time += "." + f"{value.microseconds:06d}".rstrip("0")
        time += "S"
    if time:
        text += "T" + time
    return text if text != "P" else "PT0S"


# --------------------------------------------------------------------------------------------------
# JSON helpers (shared with sodalite.model.config)
# --------------------------------------------------------------------------------------------------




def _describe(value: object) -> str:
    """The JSON type of ``value``, with the value itself when it is a number or boolean."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, float):
        return f"number {value!r}"
    return json_type(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _error(path: str, reason: str) -> ConfigurationError:
    return ConfigurationError(f"{path}: {reason}")


# Typed loosely below: the values of a JSON object as parsed, not yet checked. The config reader (config.py)
# hands some straight to the constructors that check them, so they cannot be typed ``object``.
def _expect_object(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _error(path or "(document)", f"must be a JSON object, got {json_type(value)}")
    duplicates = getattr(value, "duplicate_keys", ())
    if duplicates:
        raise _error(_join(path, duplicates[0]), "duplicate key")
    return value


def _expect_array(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise _error(path, f"must be a JSON array, got {json_type(value)}")
    return value


def _expect_string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _error(path, f"must be a string, got {json_type(value)}")
    return value


def _check_keys(obj: Mapping[str, object], allowed: tuple[str, ...], path: str) -> None:
    """Reject any key of ``obj`` not in ``allowed``, suggesting the closest allowed key."""
    for key in obj:
        if key in allowed:
            continue
        by_case = [name for name in allowed if name.lower() == str(key).lower()]
        close = by_case or difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _error(_join(path, str(key)), f"unknown property{hint}; allowed: {', '.join(allowed)}")


def _require(obj: Mapping[str, Any], key: str, path: str) -> Any:  # (unchecked, as above)
    if key not in obj:
        raise _error(_join(path, key), "required property is missing")
    return obj[key]


# --------------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------------

EntityKind = Literal["queue", "topic", "subscription", "rule"]

_NAME_LIMITS: Final[dict[str, int]] = {"queue": 260, "topic": 260, "subscription": 50, "rule": 50}
_PATH_NAME_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?", re.ASCII)
_LEAF_NAME_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?", re.ASCII)

#: The name of the rule every new subscription gets.
DEFAULT_RULE_NAME: Final = "$Default"


_ADDRESS_PREFIX: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*")


def forward_target(value: str) -> str:
    """The entity a ForwardTo or ForwardDeadLetteredMessagesTo names: kept in the form it was given
    (``q2``, ``sb://host:port/q2``, ``https://host/q2``, as Service Bus gives it back), read without
    its scheme and authority."""
    return _ADDRESS_PREFIX.sub("", value).strip("/")


def entity_name_problem(name: object, kind: EntityKind) -> str | None:
    """Why ``name`` is not a valid Service Bus name for ``kind``, or None when it is.

    Names may hold ASCII letters, digits, periods, hyphens and underscores (queues and topics also
    slashes), must start and end with a letter or digit, and are at most 260 characters for queues
    and topics, 50 for subscriptions and rules. The rule name ``$Default`` is always valid.
    """
    if not isinstance(name, str):
        return f"must be a string, got {json_type(name)}"
    if not name:
        return "must not be empty"
    if kind == "rule" and name.lower() == DEFAULT_RULE_NAME.lower():
        return None
    limit = _NAME_LIMITS[kind]
    if len(name) > limit:
        return f"a {kind} name is at most {limit} characters, got {len(name)}"
    pattern = _PATH_NAME_RE if kind in ("queue", "topic") else _LEAF_NAME_RE
    if pattern.fullmatch(name) is None:
        allowed = "letters, digits, periods, hyphens, underscores"
        if kind in ("queue", "topic"):
            allowed += " and slashes"
        return (
            f"invalid {kind} name {name!r}: it may contain only {allowed}, "
            "and must start and end with a letter or digit"
        )
    return None


def validate_entity_name(name: object, kind: EntityKind, *, label: str = "name") -> str:
    """Return ``name`` if it is valid for ``kind``; otherwise raise ``ConfigurationError`` at ``label``."""
    problem = entity_name_problem(name, kind)
    if problem is not None:
        raise _error(label, problem)
    assert isinstance(name, str)
    return name


# --------------------------------------------------------------------------------------------------
# Property specifications
# --------------------------------------------------------------------------------------------------

#: The entity states Service Bus knows.
ENTITY_STATUSES: Final = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")

_INT32_MAX: Final = 2_147_483_647
_MAX_MESSAGE_SIZE_KB: Final = 102_400
_MAX_USER_METADATA: Final = 1024

DEFAULT_LOCK_DURATION: Final = timedelta(minutes=1)
DEFAULT_DUPLICATE_DETECTION_WINDOW: Final = timedelta(minutes=10)
DEFAULT_MAX_DELIVERY_COUNT: Final = 10
DEFAULT_MAX_SIZE_IN_MEGABYTES: Final = 1024

_Kind = Literal["bool", "int", "optional_int", "duration", "forward", "status", "metadata", "authorization_rules"]


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one property is named in JSON, what it holds, and its allowed range."""

    json: str
    kind: _Kind
    low: int | timedelta | None = None  # an int property's bounds are ints, a duration's timedeltas
    high: int | timedelta | None = None


def _meta(spec: _Spec) -> dict[str, _Spec]:
    return {"spec": spec}


_Bound = TypeVar("_Bound", int, timedelta)


def _range_problem(value: _Bound, low: _Bound | None, high: _Bound | None,
                   show: Callable[[_Bound], str]) -> str | None:
    too_low = low is not None and value < low
    too_high = high is not None and value > high
    if not (too_low or too_high):
        return None
    if low is not None and high is not None and high not in (_INT32_MAX, TIMESPAN_MAX):
        return f"must be between {show(low)} and {show(high)}, got {show(value)}"
    if low is not None and too_low:
        return f"must be at least {show(low)}, got {show(value)}"
    assert high is not None
    return f"must be at most {show(high)}, got {show(value)}"


def _value_problem(spec: _Spec, value: object) -> str | None:
    """Why ``value`` is not valid for the property, or None."""
    kind = spec.kind
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be a boolean, got {json_type(value)}"
    if kind in ("int", "optional_int"):
        if value is None and kind == "optional_int":
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an integer, got {_describe(value)}"
        assert not isinstance(spec.low, timedelta) and not isinstance(spec.high, timedelta)
        return _range_problem(value, spec.low, spec.high, str)
    if kind == "duration":
        if not isinstance(value, timedelta):
            return f"must be a duration, got {json_type(value)}"
        assert not isinstance(spec.low, int) and not isinstance(spec.high, int)
        return _range_problem(value, spec.low, spec.high, _show_duration)
    if kind == "forward":
        if value is None:
            return None
        problem = entity_name_problem(forward_target(value) if isinstance(value, str) else value, "queue")
        return None if problem is None else f"must name a queue or topic: {problem}"
    if kind == "authorization_rules":
        return _authorization_rules_problem(value)
    if kind == "status":
        if value not in ENTITY_STATUSES:
            return f"must be one of {', '.join(ENTITY_STATUSES)}, got {value!r}"
        return None
    # metadata
    if value is None:
        return None
    if not isinstance(value, str):
        return f"must be a string, got {json_type(value)}"
    if len(value) > _MAX_USER_METADATA:
        return f"must be at most {_MAX_USER_METADATA} characters, got {len(value)}"
    return None


def _authorization_rules_problem(value: object) -> str | None:
    if not isinstance(value, tuple) or not all(isinstance(r, AuthorizationRule) for r in value):
        return f"must be a tuple of AuthorizationRule, got {type(value).__name__}"
    names = [r.key_name.casefold() for r in value]
    duplicate = next((r.key_name for r in value if names.count(r.key_name.casefold()) > 1), None)
    return None if duplicate is None else f"duplicate key name {duplicate!r}"


def _show_duration(value: timedelta) -> str:
    try:
        return format_duration(value)
    except ConfigurationError:
        return str(value)


def _validate_fields(obj: object) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        spec: _Spec = f.metadata["spec"]
        problem = _value_problem(spec, getattr(obj, f.name))
        if problem is not None:
            raise _error(f"{type(obj).__name__}.{f.name}", problem)


def _decode(spec: _Spec, raw: object, path: str) -> object:
    """Turn the JSON value of one property into the Python value (not yet range-checked)."""
    kind = spec.kind
    if kind == "duration":
        if not isinstance(raw, str):
            raise _error(path, f"must be an ISO 8601 duration string such as 'PT1M', got {json_type(raw)}")
        try:
            return parse_duration(raw)
        except ConfigurationError as exc:
            raise _error(path, exc.description) from None
    if kind == "authorization_rules":
        return rules_from_json(raw, path)
    if kind == "forward":
        if raw == "":
            return None
        if raw is not None and not isinstance(raw, str):
            raise _error(path, f"must be a string, got {json_type(raw)}")
        return raw
    if kind == "status" and isinstance(raw, str):
        for status in ENTITY_STATUSES:
            if status.lower() == raw.lower():
                return status
    return raw


def _encode(spec: _Spec, value: object) -> JsonValue:
    if spec.kind == "duration":
        assert isinstance(value, timedelta)
        return format_duration(value)
    if spec.kind == "authorization_rules":
        assert isinstance(value, tuple)
        return [rule.to_json() for rule in value]
    assert value is None or isinstance(value, bool | int | str)  # the other kinds' values (checked)
    return value


def _from_json_fields(cls: type, data: object, path: str) -> dict[str, object]:
    """Decode and validate a properties object into keyword arguments for ``cls``."""
    obj = _expect_object(data, path)
    specs = {f.metadata["spec"].json: f for f in fields(cls)}
    _check_keys(obj, tuple(specs), path)
    kwargs: dict[str, object] = {}  # each value checked against its field's spec
    for key, raw in obj.items():
        f = specs[key]
        spec: _Spec = f.metadata["spec"]
        where = _join(path, key)
        value = _decode(spec, raw, where)
        problem = _value_problem(spec, value)
        if problem is not None:
            raise _error(where, problem)
        kwargs[f.name] = value
    return kwargs


def _to_json_fields(obj: object) -> JsonObject:
    out: JsonObject = {}
    for f in fields(obj):  # type: ignore[arg-type]
        spec: _Spec = f.metadata["spec"]
        value = getattr(obj, f.name)
        if spec.kind == "authorization_rules" and not value:
            continue  # entities without their own rules keep the JSON form they always had
        out[spec.json] = _encode(spec, value)
    return out


_LOCK_DURATION = _Spec("LockDuration", "duration", timedelta(seconds=5), timedelta(minutes=5))
_MAX_SIZE = _Spec("MaxSizeInMegabytes", "int", 1, _INT32_MAX)
_REQUIRES_DUPLICATE_DETECTION = _Spec("RequiresDuplicateDetection", "bool")
_REQUIRES_SESSION = _Spec("RequiresSession", "bool")
_DEFAULT_TTL = _Spec("DefaultMessageTimeToLive", "duration", timedelta(seconds=1), TIMESPAN_MAX)
_DEAD_LETTERING_ON_EXPIRATION = _Spec("DeadLetteringOnMessageExpiration", "bool")
_DUPLICATE_WINDOW = _Spec(
    "DuplicateDetectionHistoryTimeWindow", "duration", timedelta(seconds=20), timedelta(days=7)
)
_MAX_DELIVERY_COUNT = _Spec("MaxDeliveryCount", "int", 1, _INT32_MAX)
_BATCHED = _Spec("EnableBatchedOperations", "bool")
_AUTO_DELETE = _Spec("AutoDeleteOnIdle", "duration", timedelta(minutes=5), TIMESPAN_MAX)
_PARTITIONING = _Spec("EnablePartitioning", "bool")
_EXPRESS = _Spec("EnableExpress", "bool")
_FORWARD_TO = _Spec("ForwardTo", "forward")
_FORWARD_DLQ_TO = _Spec("ForwardDeadLetteredMessagesTo", "forward")
_MAX_MESSAGE_SIZE = _Spec("MaxMessageSizeInKilobytes", "optional_int", 1, _MAX_MESSAGE_SIZE_KB)
_STATUS = _Spec("Status", "status")
_USER_METADATA = _Spec("UserMetadata", "metadata")
_SUPPORT_ORDERING = _Spec("SupportOrdering", "bool")
# The entity's own shared access policies; a key of these opens this entity only.
_AUTHORIZATION_RULES = _Spec("AuthorizationRules", "authorization_rules")
_DEAD_LETTERING_ON_FILTER_EXCEPTIONS = _Spec("DeadLetteringOnFilterEvaluationExceptions", "bool")


# --------------------------------------------------------------------------------------------------
# Entity properties
# --------------------------------------------------------------------------------------------------


class _EntityProperties:
    """What queue, topic and subscription properties share: validation and their JSON form."""

    __slots__ = ()

    def __post_init__(self) -> None:
        _validate_fields(self)

    def to_json(self) -> JsonObject:
        """Every property by its Service Bus name; durations as ISO 8601, absent values as null."""
        return _to_json_fields(self)

    @classmethod
    def from_json(cls, d: Mapping[str, object], *, path: str = "") -> Self:
        """Build from Service Bus-named properties; missing ones take their defaults.

        ``path`` prefixes error messages (the JSON path of ``d`` in a larger document)."""
        return cls(**_from_json_fields(cls, d, path))


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueProperties(_EntityProperties):
    """The properties of a queue (QueueDescription), with the Service Bus defaults."""

    lock_duration: timedelta = field(default=DEFAULT_LOCK_DURATION, metadata=_meta(_LOCK_DURATION))
    max_size_in_megabytes: int = field(default=DEFAULT_MAX_SIZE_IN_MEGABYTES, metadata=_meta(_MAX_SIZE))
    requires_duplicate_detection: bool = field(default=False, metadata=_meta(_REQUIRES_DUPLICATE_DETECTION))
    requires_session: bool = field(default=False, metadata=_meta(_REQUIRES_SESSION))
    default_message_time_to_live: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_DEFAULT_TTL))
    dead_lettering_on_message_expiration: bool = field(
        default=False, metadata=_meta(_DEAD_LETTERING_ON_EXPIRATION)
    )
    duplicate_detection_history_time_window: timedelta = field(
        default=DEFAULT_DUPLICATE_DETECTION_WINDOW, metadata=_meta(_DUPLICATE_WINDOW)
    )
    max_delivery_count: int = field(default=DEFAULT_MAX_DELIVERY_COUNT, metadata=_meta(_MAX_DELIVERY_COUNT))
    enable_batched_operations: bool = field(default=True, metadata=_meta(_BATCHED))
    auto_delete_on_idle: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_AUTO_DELETE))
    enable_partitioning: bool = field(default=False, metadata=_meta(_PARTITIONING))
    enable_express: bool = field(default=False, metadata=_meta(_EXPRESS))
    forward_to: str | None = field(default=None, metadata=_meta(_FORWARD_TO))
    forward_dead_lettered_messages_to: str | None = field(default=None, metadata=_meta(_FORWARD_DLQ_TO))
    max_message_size_in_kilobytes: int | None = field(default=None, metadata=_meta(_MAX_MESSAGE_SIZE))
    status: str = field(default="Active", metadata=_meta(_STATUS))
    user_metadata: str | None = field(default=None, metadata=_meta(_USER_METADATA))
    support_ordering: bool = field(default=True, metadata=_meta(_SUPPORT_ORDERING))
    authorization_rules: tuple[AuthorizationRule, ...] = field(default=(), metadata=_meta(_AUTHORIZATION_RULES))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProperties(_EntityProperties):
    """The properties of a topic (TopicDescription), with the Service Bus defaults."""

    default_message_time_to_live: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_DEFAULT_TTL))
    max_size_in_megabytes: int = field(default=DEFAULT_MAX_SIZE_IN_MEGABYTES, metadata=_meta(_MAX_SIZE))
    requires_duplicate_detection: bool = field(default=False, metadata=_meta(_REQUIRES_DUPLICATE_DETECTION))
    duplicate_detection_history_time_window: timedelta = field(
        default=DEFAULT_DUPLICATE_DETECTION_WINDOW, metadata=_meta(_DUPLICATE_WINDOW)
    )
    enable_batched_operations: bool = field(default=True, metadata=_meta(_BATCHED))
    auto_delete_on_idle: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_AUTO_DELETE))
    enable_partitioning: bool = field(default=False, metadata=_meta(_PARTITIONING))
    enable_express: bool = field(default=False, metadata=_meta(_EXPRESS))
    support_ordering: bool = field(default=True, metadata=_meta(_SUPPORT_ORDERING))
    max_message_size_in_kilobytes: int | None = field(default=None, metadata=_meta(_MAX_MESSAGE_SIZE))
    status: str = field(default="Active", metadata=_meta(_STATUS))
    user_metadata: str | None = field(default=None, metadata=_meta(_USER_METADATA))
    authorization_rules: tuple[AuthorizationRule, ...] = field(default=(), metadata=_meta(_AUTHORIZATION_RULES))


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionProperties(_EntityProperties):
    """The properties of a subscription (SubscriptionDescription), with the Service Bus defaults."""

    lock_duration: timedelta = field(default=DEFAULT_LOCK_DURATION, metadata=_meta(_LOCK_DURATION))
    requires_session: bool = field(default=False, metadata=_meta(_REQUIRES_SESSION))
    default_message_time_to_live: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_DEFAULT_TTL))
    dead_lettering_on_message_expiration: bool = field(
        default=False, metadata=_meta(_DEAD_LETTERING_ON_EXPIRATION)
    )
    dead_lettering_on_filter_evaluation_exceptions: bool = field(
        default=True, metadata=_meta(_DEAD_LETTERING_ON_FILTER_EXCEPTIONS)
    )
    max_delivery_count: int = field(default=DEFAULT_MAX_DELIVERY_COUNT, metadata=_meta(_MAX_DELIVERY_COUNT))
    enable_batched_operations: bool = field(default=True, metadata=_meta(_BATCHED))
    auto_delete_on_idle: timedelta = field(default=TIMESPAN_MAX, metadata=_meta(_AUTO_DELETE))
    forward_to: str | None = field(default=None, metadata=_meta(_FORWARD_TO))
    forward_dead_lettered_messages_to: str | None = field(default=None, metadata=_meta(_FORWARD_DLQ_TO))
    status: str = field(default="Active", metadata=_meta(_STATUS))
    user_metadata: str | None = field(default=None, metadata=_meta(_USER_METADATA))


# --------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------

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
                raise _error(where, f"{_JSON_DATETIME}: not an ISO 8601 date and time: {text!r}") from None
            return parsed  # without a zone it stays so (a rule's parameter comes back as it was sent)
        if tag == _JSON_DURATION and isinstance(text, str):
            try:
                return parse_duration(text)
            except ConfigurationError as exc:
                raise _error(where, exc.description) from None
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
        raise _error(label, f"must be a dict, got {type(values).__name__}")
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise _error(label, f"keys must be non-empty strings, got {key!r}")
        problem = _scalar_problem(value)
        if problem is not None:
            raise _error(f"{label}[{key!r}]", problem)


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A SQL-92 subset filter; stored, not evaluated here."""

    expression: str
    parameters: dict[str, ScalarValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _sql_problem(self.expression)
        if problem is not None:
            raise _error("SqlFilter.expression", problem)
        _check_scalars(self.parameters, "SqlFilter.parameters")


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
                raise _error(f"CorrelationFilter.{attr}", f"must be a string, got {type(value).__name__}")
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


@dataclass(frozen=True, slots=True)
class SqlRuleAction:
    """A SQL action applied to messages a rule's filter matches; stored, not evaluated here."""

    expression: str
    parameters: dict[str, ScalarValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _sql_problem(self.expression)
        if problem is not None:
            raise _error("SqlRuleAction.expression", problem)
        _check_scalars(self.parameters, "SqlRuleAction.parameters")


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
            raise _error("RuleDescription.filter", f"must be a filter, got {type(self.filter).__name__}")
        if self.action is not None and not isinstance(self.action, SqlRuleAction):
            raise _error(
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
        obj = _expect_object(d, path)
        _check_keys(obj, _RULE_KEYS, path)
        name_path = _join(path, "Name")
        name = validate_entity_name(_require(obj, "Name", path), "rule", label=name_path)
        props_path = _join(path, "Properties")
        props = _expect_object(_require(obj, "Properties", path), props_path)
        _check_keys(props, _RULE_PROPERTY_KEYS, props_path)

        type_path = _join(props_path, "FilterType")
        raw_type = _expect_string(_require(props, "FilterType", props_path), type_path)
        filter_type = next((t for t in _FILTER_TYPES if t.lower() == raw_type.lower()), None)
        if filter_type is None:
            raise _error(type_path, f"must be one of {', '.join(_FILTER_TYPES)}, got {raw_type!r}")
        for key in ("SqlFilter", "CorrelationFilter"):
            if key in props and key != f"{filter_type}Filter":
                raise _error(_join(props_path, key), f"not allowed with FilterType {filter_type!r}")

        flt: Filter
        if filter_type == "Sql":
            flt = _sql_filter_from_json(
                _require(props, "SqlFilter", props_path), _join(props_path, "SqlFilter")
            )
        elif filter_type == "Correlation":
            flt = _correlation_filter_from_json(
                _require(props, "CorrelationFilter", props_path), _join(props_path, "CorrelationFilter")
            )
        else:
            flt = TrueFilter() if filter_type == "True" else FalseFilter()

        action: SqlRuleAction | None = None
        raw_action = props.get("Action")
        if raw_action is not None:
            action_path = _join(props_path, "Action")
            action_obj = _expect_object(raw_action, action_path)
            _check_keys(action_obj, ("SqlExpression", "Parameters"), action_path)
            action = SqlRuleAction(_sql_expression(action_obj, action_path),
                                   _scalars_from_json(action_obj.get("Parameters"), _join(action_path, "Parameters")))
        return cls(name, flt, action)


def _sql_expression(obj: Mapping[str, object], path: str) -> str:
    where = _join(path, "SqlExpression")
    expression = _require(obj, "SqlExpression", path)
    problem = _sql_problem(expression)
    if problem is not None:
        raise _error(where, problem)
    assert isinstance(expression, str)
    return expression


def _scalars_from_json(raw: object, path: str) -> dict[str, ScalarValue]:
    if raw is None:
        return {}
    obj = _expect_object(raw, path)
    out: dict[str, ScalarValue] = {}
    for key, value in obj.items():
        where = _join(path, str(key))
        if not key:
            raise _error(where, "property names must not be empty")
        value = _scalar_from_json(value, where)
        problem = _scalar_problem(value)
        if problem is not None:
            raise _error(where, problem)
        assert isinstance(value, str | int | float | bool | datetime | timedelta)
        out[str(key)] = value
    return out


def _sql_filter_from_json(raw: object, path: str) -> SqlFilter:
    obj = _expect_object(raw, path)
    _check_keys(obj, ("SqlExpression", "Parameters"), path)
    expression = _sql_expression(obj, path)
    parameters = _scalars_from_json(obj.get("Parameters"), _join(path, "Parameters"))
    return SqlFilter(expression, parameters)


def _correlation_filter_from_json(raw: object, path: str) -> CorrelationFilter:
    obj = _expect_object(raw, path)
    _check_keys(obj, (*(key for _, key in CORRELATION_FIELDS), "Properties"), path)
    texts: dict[str, str | None] = {}
    for attr, key in CORRELATION_FIELDS:
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            raise _error(_join(path, key), f"must be a string, got {json_type(value)}")
        texts[attr] = value
    properties = _scalars_from_json(obj.get("Properties"), _join(path, "Properties"))
    if all(value is None for value in texts.values()) and not properties:
        raise _error(path, "a correlation filter must set at least one property")
    return CorrelationFilter(
        correlation_id=texts["correlation_id"], message_id=texts["message_id"], to=texts["to"],
        reply_to=texts["reply_to"], label=texts["label"], session_id=texts["session_id"],
        reply_to_session_id=texts["reply_to_session_id"], content_type=texts["content_type"],
        properties=properties)
