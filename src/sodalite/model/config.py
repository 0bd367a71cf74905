"""The broker's entity configuration: the Azure Service Bus emulator's ``Config.json`` format.

The document looks like this (every section but ``UserConfig.Namespaces`` is optional)::

    {"UserConfig": {
        "Namespaces": [{
            "Name": "sbemulatorns",
            "Queues": [{"Name": "queue.1", "Properties": {"LockDuration": "PT1M", ...}}],
            "Topics": [{"Name": "topic.1", "Properties": {...}, "Subscriptions": [{
                "Name": "subscription.1", "Properties": {...}, "Rules": [
                    {"Name": "r1", "Properties": {"FilterType": "Correlation",
                                                  "CorrelationFilter": {"Label": "x", "Properties": {...}}}},
                    {"Name": "r2", "Properties": {"FilterType": "Sql",
                                                  "SqlFilter": {"SqlExpression": "color = 'red'"},
                                                  "Action": {"SqlExpression": "SET x = 1"}}}]}]}]}],
        "Logging": {"Type": "File"}}}

Entity ``Properties`` accept every Service Bus property by its PascalCase name (see
:mod:`sodalite.model.entities`); durations are ISO 8601 (``PT1M``, ``P1DT2H``,
``P10675199DT2H48M5.4775807S``); an empty ``ForwardTo`` / ``ForwardDeadLetteredMessagesTo`` means
none, and a non-empty one must name a queue or topic of the same namespace. ``FilterType`` is
``Sql``, ``Correlation``, ``True`` or ``False``; a rule's ``SqlFilter`` may also carry
``Parameters`` (an object of scalars). A subscription without ``Rules`` (or with an empty list)
gets one rule ``$Default`` with a true filter; to receive nothing, use a ``False`` filter.
``Logging`` is accepted and ignored; ``$schema`` is allowed at the top level.

Sodalite's extensions, on a namespace object:

``AuthorizationRules``
    ``[{"KeyName": "...", "PrimaryKey": "...", "SecondaryKey": "...", "Rights": ["Send", "Listen"]}]``
    (``SecondaryKey`` optional; ``Rights`` are Service Bus ``AccessRights``, ``Manage``, ``Send``
    and ``Listen``, all three by default, and ``Manage`` requires the other two). When present it
    replaces the default rule, KeyName ``RootManageSharedAccessKey`` with PrimaryKey
    ``SAS_KEY_VALUE`` (the emulator's). It must not be empty; key names are unique
    (case-insensitively). Queues and topics take rules of the same form in their ``Properties``
    (``AuthorizationRules``); a key of those is good for that entity only.
``MaxMessageSizeInKilobytes``
    The namespace's largest message, 1..102400 KB, default 256. An entity's own
    ``MaxMessageSizeInKilobytes`` overrides it.
``PartitionCount``
    How many partitions a partitioned entity (``EnablePartitioning``) has, 1..1024, default 16.
``MessagingStores``
    ``[{"Name": "disk2", "Path": "/mnt/disk2/sodalite.db"}]``: more SQLite messaging stores besides
    the default one in the data directory (a relative ``Path`` is under it). ``"Url":
    "postgresql://user:password@host:5432/database"`` instead of ``Path`` makes the store a
    PostgreSQL database (docs/postgresql.md); one entry has a ``Path`` or a ``Url``, not both. ``"Offline": true``
    starts one out of service (the outage switch, which ``sodalite store online`` turns back). Partition ``i`` of a
    partitioned entity lives in store ``i mod n`` (the default store first, then these in order); a
    non-partitioned queue or topic lives in the store its name hashes to, its subscriptions with
    it. Adding or removing stores moves partitions to other stores: drain the entities first.
``Sku``
    ``Standard`` (default) or ``Premium``: in a Premium-like namespace, a partitioned entity's
    messages are limited to 1 MB.
``MaxEntityCount`` / ``MaxPartitionedEntityCount``
    Quotas on queues plus topics (default 10000) and on partitioned ones among them (default 100).

Several namespaces may be given; their names must be unique. Names are case-insensitive in Service
Bus, so queues and topics of one namespace share one name space and must differ regardless of case,
as must the subscriptions of a topic and the rules of a subscription.

Every invalid input raises ``ConfigurationError`` whose message starts with the JSON path of the
offending field, e.g. ``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from sodalite.errors import ConfigurationError
from sodalite.model.authorization import AuthorizationRule, rules_from_json
from sodalite.model.entities import (
    DEFAULT_RULE_NAME,
    EntityKind,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
    TrueFilter,
    forward_target,
    validate_entity_name,
)
from sodalite.model.json_types import (
    check_keys,
    config_error,
    describe_value,
    expect_array,
    expect_object,
    join_path,
    json_type,
    require,
)

_T = TypeVar("_T")
_P = TypeVar("_P")  # an entity's properties


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)

DEFAULT_NAMESPACE_NAME: Final = "sbemulatorns"
DEFAULT_KEY_NAME: Final = "RootManageSharedAccessKey"
DEFAULT_KEY: Final = "SAS_KEY_VALUE"
DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES: Final = 256
MAX_MESSAGE_SIZE_IN_KILOBYTES: Final = 102_400
DEFAULT_PARTITION_COUNT: Final = 16
MAX_PARTITION_COUNT: Final = 1024
DEFAULT_MAX_ENTITY_COUNT: Final = 10_000
DEFAULT_MAX_PARTITIONED_ENTITY_COUNT: Final = 100
_MAX_QUOTA: Final = 1_000_000
SKUS: Final = ("Basic", "Standard", "Premium")
DEFAULT_STORE_NAME: Final = "default"
POSTGRESQL_URL_PREFIXES: Final = ("postgresql://", "postgres://")


def _scheme_only(url: object) -> str:
    """Enough of a URL to say what is wrong without showing a password."""
    return url.split("://", 1)[0] + "://..." if isinstance(url, str) and "://" in url else str(url)[:40]


_STORE_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)

_NAMESPACE_NAME_RE: Final = re.compile(r"[A-Za-z](?:[A-Za-z0-9-]{0,48}[A-Za-z0-9])?", re.ASCII)


# --------------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------------


def _namespace_name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"must be a string, got {json_type(name)}"
    if _NAMESPACE_NAME_RE.fullmatch(name) is None:
        return (
            f"invalid namespace name {name!r}: it may contain only letters, digits and hyphens, "
            "must start with a letter, end with a letter or digit, and be at most 50 characters"
        )
    return None


def _first_duplicate(names: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        folded = name.casefold()
        if folded in seen:
            return name
        seen.add(folded)
    return None


def _check_unique(owner: str, what: str, names: Iterable[str]) -> None:
    duplicate = _first_duplicate(names)
    if duplicate is not None:
        raise ConfigurationError(f"{owner}: duplicate {what} name {duplicate!r}")


DEFAULT_AUTHORIZATION_RULE: Final = AuthorizationRule(DEFAULT_KEY_NAME, DEFAULT_KEY)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    properties: QueueProperties = field(default_factory=QueueProperties)

    def __post_init__(self) -> None:
        validate_entity_name(self.name, "queue", label="QueueConfig.name")


@dataclass(frozen=True, slots=True)
class SubscriptionConfig:
    name: str
    properties: SubscriptionProperties = field(default_factory=SubscriptionProperties)
    rules: tuple[RuleDescription, ...] = (RuleDescription(DEFAULT_RULE_NAME, TrueFilter()),)

    def __post_init__(self) -> None:
        validate_entity_name(self.name, "subscription", label="SubscriptionConfig.name")
        _check_unique(f"SubscriptionConfig {self.name!r}", "rule", (r.name for r in self.rules))


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    properties: TopicProperties = field(default_factory=TopicProperties)
    subscriptions: tuple[SubscriptionConfig, ...] = ()

    def __post_init__(self) -> None:
        validate_entity_name(self.name, "topic", label="TopicConfig.name")
        _check_unique(f"TopicConfig {self.name!r}", "subscription", (s.name for s in self.subscriptions))


@dataclass(frozen=True, slots=True)
class MessagingStoreConfig:
    """A messaging store besides the default one: a name (for the outage switch) and either a SQLite
    file path or a PostgreSQL URL (``path`` empty then)."""

    name: str
    path: str
    offline: bool = False  # start with the store out of service (the outage switch's initial position)
    url: str | None = None  # postgresql://...: a PostgreSQL database instead of a SQLite file

    def __post_init__(self) -> None:
        if not isinstance(self.offline, bool):
            raise ConfigurationError("MessagingStore.offline: must be true or false")
        if not isinstance(self.name, str) or _STORE_NAME_RE.fullmatch(self.name) is None:
            raise ConfigurationError(
                f"MessagingStore.name: {self.name!r} must be 1 to 64 letters, digits, '.', '_' or '-'")
        if self.name.lower() == DEFAULT_STORE_NAME:
            raise ConfigurationError(f"MessagingStore.name: '{DEFAULT_STORE_NAME}' is the data directory's store")
        if self.url is not None:
            if self.path:
                raise ConfigurationError("MessagingStore: give a Path (SQLite) or a Url (PostgreSQL), not both")
            if not isinstance(self.url, str) or not self.url.startswith(POSTGRESQL_URL_PREFIXES):
                raise ConfigurationError(
                    f"MessagingStore.url: must be a PostgreSQL URL starting with postgresql://, got "
                    f"{_scheme_only(self.url)!r}")
        elif not isinstance(self.path, str) or not self.path.strip():
            raise ConfigurationError("MessagingStore.path: must be a non-empty string (or give a Url)")


@dataclass(frozen=True, slots=True)
class NamespaceConfig:
    name: str
    queues: tuple[QueueConfig, ...] = ()
    topics: tuple[TopicConfig, ...] = ()
    authorization_rules: tuple[AuthorizationRule, ...] = (DEFAULT_AUTHORIZATION_RULE,)
    max_message_size_in_kilobytes: int = DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES
    partition_count: int = DEFAULT_PARTITION_COUNT
    messaging_stores: tuple[MessagingStoreConfig, ...] = ()
    sku: str = "Standard"
    max_entity_count: int = DEFAULT_MAX_ENTITY_COUNT
    max_partitioned_entity_count: int = DEFAULT_MAX_PARTITIONED_ENTITY_COUNT

    def __post_init__(self) -> None:
        owner = f"NamespaceConfig {self.name!r}"
        problem = _namespace_name_problem(self.name)
        if problem is not None:
            raise ConfigurationError(f"NamespaceConfig.name: {problem}")
        _check_unique(
            owner, "queue or topic", [*(q.name for q in self.queues), *(t.name for t in self.topics)]
        )
        if not self.authorization_rules:
            raise ConfigurationError(f"{owner}: at least one authorization rule is required")
        _check_unique(owner, "authorization rule", (r.key_name for r in self.authorization_rules))
        for label, value, high in (
            (
                "max_message_size_in_kilobytes",
                self.max_message_size_in_kilobytes,
                MAX_MESSAGE_SIZE_IN_KILOBYTES,
            ),
            ("partition_count", self.partition_count, MAX_PARTITION_COUNT),
            ("max_entity_count", self.max_entity_count, _MAX_QUOTA),
            ("max_partitioned_entity_count", self.max_partitioned_entity_count, _MAX_QUOTA),
        ):
            problem = _int_problem(value, 1, high)
            if problem is not None:
                raise ConfigurationError(f"NamespaceConfig.{label}: {problem}")
        if self.sku not in SKUS:
            raise ConfigurationError(f"NamespaceConfig.sku: must be one of {', '.join(SKUS)}, got {self.sku!r}")
        _check_unique(owner, "messaging store", (s.name for s in self.messaging_stores))
        entities = [*(q.properties for q in self.queues), *(t.properties for t in self.topics)]
        if len(entities) > self.max_entity_count:
            raise ConfigurationError(f"{owner}: {len(entities)} queues and topics exceed MaxEntityCount "
                                     f"{self.max_entity_count}")
        partitioned = sum(1 for p in entities if getattr(p, "enable_partitioning", False))
        if partitioned > self.max_partitioned_entity_count:
            raise ConfigurationError(f"{owner}: {partitioned} partitioned queues and topics exceed "
                                     f"MaxPartitionedEntityCount {self.max_partitioned_entity_count}")


def default_namespace() -> NamespaceConfig:
    """The configuration used when none is given: the emulator's namespace with one queue."""
    return NamespaceConfig(
        name=DEFAULT_NAMESPACE_NAME,
        queues=(QueueConfig("queue.1", QueueProperties()),),
        topics=(),
        authorization_rules=(DEFAULT_AUTHORIZATION_RULE,),
        max_message_size_in_kilobytes=DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES,
        partition_count=DEFAULT_PARTITION_COUNT,
    )


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers keys given more than once."""

    __slots__ = ("duplicate_keys",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        self.duplicate_keys: list[str] = []
        for key, _ in pairs:
            if key in seen:
                self.duplicate_keys.append(key)
            seen.add(key)


def without_comments(text: str) -> str:
    """The text with its ``//`` and ``/* */`` comments blanked out, outside strings.

    The emulator's Config.json is read by .NET with comments allowed and ships with ``//``
    comments. Each comment character becomes a space (newlines stay), so a JSON error's line and
    column still point into the user's file.
    """
    if "/" not in text:
        return text
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] not in "\r\n":
                out[i] = " "
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line = text.count("\n", 0, i) + 1
                raise ConfigurationError(f"invalid JSON at line {line}: a /* comment is never closed")
            for j in range(i, end + 2):
                if text[j] not in "\r\n":
                    out[j] = " "
            i = end + 2
        else:
            i += 1
    return "".join(out)


def load_config_text(text: str) -> list[NamespaceConfig]:
    """Parse a Config.json document (comments allowed); JSON syntax errors report their line and column."""
    try:
        data = json.loads(without_comments(text.removeprefix("\ufeff")), object_pairs_hook=_Object)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ConfigurationError("invalid JSON: nested too deeply") from None
    return load_config(data)


def load_config(data: Any) -> list[NamespaceConfig]:
    """Validate a parsed Config.json document and build the namespaces it declares."""
    root = expect_object(data, "")
    check_keys(root, ("UserConfig", "$schema"), "")
    user = expect_object(require(root, "UserConfig", ""), "UserConfig")
    check_keys(user, ("Namespaces", "Logging"), "UserConfig")
    path = "UserConfig.Namespaces"
    items = expect_array(require(user, "Namespaces", "UserConfig"), path)
    if not items:
        raise config_error(path, "at least one namespace is required")
    namespaces = [_namespace(item, f"{path}[{i}]") for i, item in enumerate(items)]
    _unique_names(((ns.name, f"{path}[{i}]") for i, ns in enumerate(namespaces)), "namespace")
    return namespaces


_NAMESPACE_KEYS: Final = (
    "Name",
    "Queues",
    "Topics",
    "AuthorizationRules",
    "MaxMessageSizeInKilobytes",
    "PartitionCount",
    "MessagingStores",
    "Sku",
    "MaxEntityCount",
    "MaxPartitionedEntityCount",
)


def _namespace(raw: object, path: str) -> NamespaceConfig:
    obj = expect_object(raw, path)
    check_keys(obj, _NAMESPACE_KEYS, path)
    name_path = join_path(path, "Name")
    name = require(obj, "Name", path)
    problem = _namespace_name_problem(name)
    if problem is not None:
        raise config_error(name_path, problem)

    queues_path = join_path(path, "Queues")
    queues = _each(obj, "Queues", path, _queue)
    topics_path = join_path(path, "Topics")
    topics = _each(obj, "Topics", path, _topic)
    _unique_names(
        [(q.name, f"{queues_path}[{i}]") for i, q in enumerate(queues)]
        + [(t.name, f"{topics_path}[{i}]") for i, t in enumerate(topics)],
        "queue or topic",
    )
    _check_forwarding(queues, topics, path)

    rules: tuple[AuthorizationRule, ...] = (DEFAULT_AUTHORIZATION_RULE,)
    if "AuthorizationRules" in obj:
        rules = rules_from_json(obj["AuthorizationRules"], join_path(path, "AuthorizationRules"), allow_empty=False)

    max_size = _optional_int(
        obj,
        "MaxMessageSizeInKilobytes",
        path,
        DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES,
        MAX_MESSAGE_SIZE_IN_KILOBYTES,
    )
    partitions = _optional_int(obj, "PartitionCount", path, DEFAULT_PARTITION_COUNT, MAX_PARTITION_COUNT)
    stores = _named_items(obj, "MessagingStores", path, _messaging_store, "messaging store")
    sku = obj.get("Sku", "Standard")
    if sku not in SKUS:
        raise config_error(join_path(path, "Sku"), f"must be one of {', '.join(SKUS)}, got {sku!r}")
    max_entities = _optional_int(obj, "MaxEntityCount", path, DEFAULT_MAX_ENTITY_COUNT, _MAX_QUOTA)
    max_partitioned = _optional_int(obj, "MaxPartitionedEntityCount", path, DEFAULT_MAX_PARTITIONED_ENTITY_COUNT,
                                    _MAX_QUOTA)
    try:
        return NamespaceConfig(name, queues, topics, rules, max_size, partitions, stores, sku, max_entities,
                               max_partitioned)
    except ConfigurationError as exc:
        raise config_error(path, exc.description) from None


def _messaging_store(raw: object, path: str) -> MessagingStoreConfig:
    obj = expect_object(raw, path)
    check_keys(obj, ("Name", "Path", "Url", "Offline"), path)
    try:
        if "Url" in obj:
            if "Path" in obj:
                raise config_error(path, "give a Path (a SQLite file) or a Url (a PostgreSQL database), not both")
            return MessagingStoreConfig(require(obj, "Name", path), "", obj.get("Offline", False),
                                        url=require(obj, "Url", path))
        return MessagingStoreConfig(require(obj, "Name", path), require(obj, "Path", path),
                                    obj.get("Offline", False))
    except ConfigurationError as exc:
        raise config_error(path, exc.description) from None


def _queue(raw: object, path: str) -> QueueConfig:
    _, name, properties = _entity(raw, path, "queue", QueueProperties.from_json)
    return QueueConfig(name, properties)


def _topic(raw: object, path: str) -> TopicConfig:
    obj, name, properties = _entity(raw, path, "topic", TopicProperties.from_json, "Subscriptions")
    subscriptions = _named_items(obj, "Subscriptions", path, _subscription, "subscription")
    return TopicConfig(name, properties, subscriptions)


def _subscription(raw: object, path: str) -> SubscriptionConfig:
    obj, name, properties = _entity(raw, path, "subscription", SubscriptionProperties.from_json, "Rules")
    rules = _named_items(obj, "Rules", path, _rule, "rule") or (RuleDescription(DEFAULT_RULE_NAME, TrueFilter()),)
    return SubscriptionConfig(name, properties, rules)


def _entity(raw: object, path: str, kind: EntityKind, read_properties: Callable[..., _P],
            *children: str) -> tuple[Mapping[str, Any], str, _P]:
    """What every entity in the file has: an object with its Name and Properties (and its ``children``)."""
    obj = expect_object(raw, path)
    check_keys(obj, ("Name", "Properties", *children), path)
    name = validate_entity_name(require(obj, "Name", path), kind, label=join_path(path, "Name"))
    properties_path = join_path(path, "Properties")
    return obj, name, read_properties(expect_object(obj.get("Properties", {}), properties_path), path=properties_path)


def _each(obj: Mapping[str, Any], key: str, path: str, read: Callable[[object, str], _T]) -> tuple[_T, ...]:
    """The optional array ``obj[key]``, each item read at its own path (``...Queues[2]``)."""
    if key not in obj:
        return ()
    at = join_path(path, key)
    return tuple(read(item, f"{at}[{i}]") for i, item in enumerate(expect_array(obj[key], at)))


def _named_items(obj: Mapping[str, Any], key: str, path: str, read: Callable[[object, str], _N],
                 what: str) -> tuple[_N, ...]:
    """The optional array ``obj[key]`` (as :func:`_each`), no name in it used twice."""
    items = _each(obj, key, path, read)
    at = join_path(path, key)
    _unique_names(((item.name, f"{at}[{i}]") for i, item in enumerate(items)), what)
    return items


def _rule(raw: object, path: str) -> RuleDescription:
    return RuleDescription.from_json(expect_object(raw, path), path=path)  # from_json checks it the same way


def _int_problem(value: object, low: int, high: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an integer, got {describe_value(value)}"
    if not low <= value <= high:
        return f"must be between {low} and {high}, got {value}"
    return None


def _optional_int(obj: Mapping[str, Any], key: str, path: str, default: int, high: int) -> int:
    if key not in obj:
        return default
    value = obj[key]
    problem = _int_problem(value, 1, high)
    if problem is not None:
        raise config_error(join_path(path, key), problem)
    assert isinstance(value, int)
    return value


def _unique_names(entries: Iterable[tuple[str, str]], what: str, key: str = "Name") -> None:
    """Reject a name used twice (case-insensitively); ``entries`` are (name, JSON path) pairs."""
    seen: dict[str, str] = {}
    for name, path in entries:
        folded = name.casefold()
        if folded in seen:
            raise config_error(join_path(path, key), f"duplicate {what} name {name!r} (already used by {seen[folded]})")
        seen[folded] = path


def _check_forwarding(queues: tuple[QueueConfig, ...], topics: tuple[TopicConfig, ...], path: str) -> None:
    """ForwardTo and ForwardDeadLetteredMessagesTo must name a queue or topic of the namespace."""
    targets = {q.name.casefold() for q in queues} | {t.name.casefold() for t in topics}
    sources: list[tuple[str, QueueProperties | SubscriptionProperties]] = [
        (f"{path}.Queues[{i}].Properties", q.properties) for i, q in enumerate(queues)
    ]
    for i, topic in enumerate(topics):
        sources.extend(
            (f"{path}.Topics[{i}].Subscriptions[{j}].Properties", s.properties)
            for j, s in enumerate(topic.subscriptions)
        )
    for where, props in sources:
        for key, target in (
            ("ForwardTo", props.forward_to),
            ("ForwardDeadLetteredMessagesTo", props.forward_dead_lettered_messages_to),
        ):
            if target is not None and forward_target(target).casefold() not in targets:
                raise config_error(join_path(where, key), f"no queue or topic named {target!r} in this namespace")


__all__ = [
    "DEFAULT_AUTHORIZATION_RULE",
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES",
    "DEFAULT_NAMESPACE_NAME",
    "DEFAULT_PARTITION_COUNT",
    "MAX_MESSAGE_SIZE_IN_KILOBYTES",
    "MAX_PARTITION_COUNT",
    "AuthorizationRule",
    "MessagingStoreConfig",
    "NamespaceConfig",
    "QueueConfig",
    "SubscriptionConfig",
    "TopicConfig",
    "default_namespace",
    "load_config",
    "load_config_text",
]
