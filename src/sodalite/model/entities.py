"""Service Bus entity properties, as frozen data with the Service Bus defaults and limits.

Every properties class validates itself on construction (``ConfigurationError`` naming the field)
and converts to and from a JSON-able dict keyed by the Service Bus PascalCase property names, with
durations as ISO 8601 strings (``PT1M``). ``from_json`` accepts a subset of the keys (the rest take
their defaults), rejects unknown keys, and takes an optional ``path`` so that its error messages
name the offending field by its position in a larger document
(``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``).

Subscription rules (:mod:`sodalite.model.rules`), entity names (:mod:`sodalite.model.names`) and
durations (:mod:`sodalite.model.durations`) have modules of their own, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Final, Generic, Literal, Self, TypeVar

from sodalite.errors import ConfigurationError
from sodalite.model.authorization import AuthorizationRule, rules_from_json
from sodalite.model.durations import TIMESPAN_MAX, format_duration, parse_duration
from sodalite.model.json_types import (
    JsonObject,
    JsonValue,
    check_keys,
    config_error,
    describe_value,
    expect_object,
    join_path,
    json_type,
)
from sodalite.model.names import (
    DEFAULT_RULE_NAME,
    EntityKind,
    entity_name_problem,
    forward_target,
    validate_entity_name,
)
from sodalite.model.rules import (
    CORRELATION_FIELDS,
    CorrelationFilter,
    FalseFilter,
    Filter,
    RuleDescription,
    ScalarValue,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)

__all__ = [  # the rules, the names and the durations have modules of their own; re-exported here
    "CORRELATION_FIELDS", "DEFAULT_DUPLICATE_DETECTION_WINDOW", "DEFAULT_LOCK_DURATION", "DEFAULT_MAX_DELIVERY_COUNT",
    "DEFAULT_MAX_SIZE_IN_MEGABYTES", "DEFAULT_RULE_NAME", "ENTITY_STATUSES", "TIMESPAN_MAX", "CorrelationFilter",
    "EntityKind", "FalseFilter", "Filter", "QueueProperties", "RuleDescription", "ScalarValue", "SqlFilter",
    "SqlRuleAction", "SubscriptionProperties", "TopicProperties", "TrueFilter", "entity_name_problem",
    "format_duration", "forward_target", "parse_duration", "validate_entity_name",
]


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

_V = TypeVar("_V")
_Kind = Literal["bool", "int", "optional_int", "duration", "forward", "status", "metadata", "authorization_rules"]


@dataclass(frozen=True, slots=True)
class _Spec(Generic[_V]):
    """How one property is named in JSON, what it holds, its default and its allowed range."""

    json: str
    kind: _Kind
    default: _V
    low: int | timedelta | None = None  # an int property's bounds are ints, a duration's timedeltas
    high: int | timedelta | None = None


def _prop(spec: _Spec[_V]) -> _V:
    """The dataclass field of the property ``spec``: its default, and the spec for the JSON form."""
    return field(default=spec.default, metadata={"spec": spec})


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


def _value_problem(spec: _Spec[object], value: object) -> str | None:
    """Why ``value`` is not valid for the property, or None."""
    kind = spec.kind
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be a boolean, got {json_type(value)}"
    if kind in ("int", "optional_int"):
        if value is None and kind == "optional_int":
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an integer, got {describe_value(value)}"
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
        spec: _Spec[object] = f.metadata["spec"]
        problem = _value_problem(spec, getattr(obj, f.name))
        if problem is not None:
            raise config_error(f"{type(obj).__name__}.{f.name}", problem)


def _decode(spec: _Spec[object], raw: object, path: str) -> object:
    """Turn the JSON value of one property into the Python value (not yet range-checked)."""
    kind = spec.kind
    if kind == "duration":
        if not isinstance(raw, str):
            raise config_error(path, f"must be an ISO 8601 duration string such as 'PT1M', got {json_type(raw)}")
        try:
            return parse_duration(raw)
        except ConfigurationError as exc:
            raise config_error(path, exc.description) from None
    if kind == "authorization_rules":
        return rules_from_json(raw, path)
    if kind == "forward":
        if raw == "":
            return None
        if raw is not None and not isinstance(raw, str):
            raise config_error(path, f"must be a string, got {json_type(raw)}")
        return raw
    if kind == "status" and isinstance(raw, str):
        for status in ENTITY_STATUSES:
            if status.lower() == raw.lower():
                return status
    return raw


def _encode(spec: _Spec[object], value: object) -> JsonValue:
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
    obj = expect_object(data, path)
    specs = {f.metadata["spec"].json: f for f in fields(cls)}
    check_keys(obj, tuple(specs), path)
    kwargs: dict[str, object] = {}  # each value checked against its field's spec
    for key, raw in obj.items():
        f = specs[key]
        spec: _Spec[object] = f.metadata["spec"]
        where = join_path(path, key)
        value = _decode(spec, raw, where)
        problem = _value_problem(spec, value)
        if problem is not None:
            raise config_error(where, problem)
        kwargs[f.name] = value
    return kwargs


def _to_json_fields(obj: object) -> JsonObject:
    out: JsonObject = {}
    for f in fields(obj):  # type: ignore[arg-type]
        spec: _Spec[object] = f.metadata["spec"]
        value = getattr(obj, f.name)
        if spec.kind == "authorization_rules" and not value:
            continue  # entities without their own rules keep the JSON form they always had
        out[spec.json] = _encode(spec, value)
    return out


_LOCK_DURATION = _Spec("LockDuration", "duration", DEFAULT_LOCK_DURATION, timedelta(seconds=5),
                       timedelta(minutes=5))
_MAX_SIZE = _Spec("MaxSizeInMegabytes", "int", DEFAULT_MAX_SIZE_IN_MEGABYTES, 1, _INT32_MAX)
_REQUIRES_DUPLICATE_DETECTION = _Spec("RequiresDuplicateDetection", "bool", False)
_REQUIRES_SESSION = _Spec("RequiresSession", "bool", False)
_DEFAULT_TTL = _Spec("DefaultMessageTimeToLive", "duration", TIMESPAN_MAX, timedelta(seconds=1),
                     TIMESPAN_MAX)
_DEAD_LETTERING_ON_EXPIRATION = _Spec("DeadLetteringOnMessageExpiration", "bool", False)
_DUPLICATE_WINDOW = _Spec("DuplicateDetectionHistoryTimeWindow", "duration", DEFAULT_DUPLICATE_DETECTION_WINDOW,
                          timedelta(seconds=20), timedelta(days=7))
_MAX_DELIVERY_COUNT = _Spec("MaxDeliveryCount", "int", DEFAULT_MAX_DELIVERY_COUNT, 1, _INT32_MAX)
_BATCHED = _Spec("EnableBatchedOperations", "bool", True)
_AUTO_DELETE = _Spec("AutoDeleteOnIdle", "duration", TIMESPAN_MAX, timedelta(minutes=5), TIMESPAN_MAX)
_PARTITIONING = _Spec("EnablePartitioning", "bool", False)
_EXPRESS = _Spec("EnableExpress", "bool", False)
_FORWARD_TO = _Spec("ForwardTo", "forward", None)
_FORWARD_DLQ_TO = _Spec("ForwardDeadLetteredMessagesTo", "forward", None)
_MAX_MESSAGE_SIZE = _Spec("MaxMessageSizeInKilobytes", "optional_int", None, 1, _MAX_MESSAGE_SIZE_KB)
_STATUS = _Spec("Status", "status", "Active")
_USER_METADATA = _Spec("UserMetadata", "metadata", None)
_SUPPORT_ORDERING = _Spec("SupportOrdering", "bool", True)
# The entity's own shared access policies; a key of these opens this entity only.
_AUTHORIZATION_RULES: Final[_Spec[tuple[AuthorizationRule, ...]]] = _Spec(
    "AuthorizationRules", "authorization_rules", ())
_DEAD_LETTERING_ON_FILTER_EXCEPTIONS = _Spec("DeadLetteringOnFilterEvaluationExceptions", "bool", True)


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

    lock_duration: timedelta = _prop(_LOCK_DURATION)
    max_size_in_megabytes: int = _prop(_MAX_SIZE)
    requires_duplicate_detection: bool = _prop(_REQUIRES_DUPLICATE_DETECTION)
    requires_session: bool = _prop(_REQUIRES_SESSION)
    default_message_time_to_live: timedelta = _prop(_DEFAULT_TTL)
    dead_lettering_on_message_expiration: bool = _prop(_DEAD_LETTERING_ON_EXPIRATION)
    duplicate_detection_history_time_window: timedelta = _prop(_DUPLICATE_WINDOW)
    max_delivery_count: int = _prop(_MAX_DELIVERY_COUNT)
    enable_batched_operations: bool = _prop(_BATCHED)
    auto_delete_on_idle: timedelta = _prop(_AUTO_DELETE)
    enable_partitioning: bool = _prop(_PARTITIONING)
    enable_express: bool = _prop(_EXPRESS)
    forward_to: str | None = _prop(_FORWARD_TO)
    forward_dead_lettered_messages_to: str | None = _prop(_FORWARD_DLQ_TO)
    max_message_size_in_kilobytes: int | None = _prop(_MAX_MESSAGE_SIZE)
    status: str = _prop(_STATUS)
    user_metadata: str | None = _prop(_USER_METADATA)
    support_ordering: bool = _prop(_SUPPORT_ORDERING)
    authorization_rules: tuple[AuthorizationRule, ...] = _prop(_AUTHORIZATION_RULES)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProperties(_EntityProperties):
    """The properties of a topic (TopicDescription), with the Service Bus defaults."""

    default_message_time_to_live: timedelta = _prop(_DEFAULT_TTL)
    max_size_in_megabytes: int = _prop(_MAX_SIZE)
    requires_duplicate_detection: bool = _prop(_REQUIRES_DUPLICATE_DETECTION)
    duplicate_detection_history_time_window: timedelta = _prop(_DUPLICATE_WINDOW)
    enable_batched_operations: bool = _prop(_BATCHED)
    auto_delete_on_idle: timedelta = _prop(_AUTO_DELETE)
    enable_partitioning: bool = _prop(_PARTITIONING)
    enable_express: bool = _prop(_EXPRESS)
    support_ordering: bool = _prop(_SUPPORT_ORDERING)
    max_message_size_in_kilobytes: int | None = _prop(_MAX_MESSAGE_SIZE)
    status: str = _prop(_STATUS)
    user_metadata: str | None = _prop(_USER_METADATA)
    authorization_rules: tuple[AuthorizationRule, ...] = _prop(_AUTHORIZATION_RULES)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionProperties(_EntityProperties):
    """The properties of a subscription (SubscriptionDescription), with the Service Bus defaults."""

    lock_duration: timedelta = _prop(_LOCK_DURATION)
    requires_session: bool = _prop(_REQUIRES_SESSION)
    default_message_time_to_live: timedelta = _prop(_DEFAULT_TTL)
    dead_lettering_on_message_expiration: bool = _prop(_DEAD_LETTERING_ON_EXPIRATION)
    dead_lettering_on_filter_evaluation_exceptions: bool = _prop(_DEAD_LETTERING_ON_FILTER_EXCEPTIONS)
    max_delivery_count: int = _prop(_MAX_DELIVERY_COUNT)
    enable_batched_operations: bool = _prop(_BATCHED)
    auto_delete_on_idle: timedelta = _prop(_AUTO_DELETE)
    forward_to: str | None = _prop(_FORWARD_TO)
    forward_dead_lettered_messages_to: str | None = _prop(_FORWARD_DLQ_TO)
    status: str = _prop(_STATUS)
    user_metadata: str | None = _prop(_USER_METADATA)
