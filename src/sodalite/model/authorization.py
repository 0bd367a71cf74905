"""Shared access authorization rules: who may Send, Listen or Manage, and which token grants what.

A rule (Service Bus ``SharedAccessAuthorizationRule``) is a key name, a primary and an optional
secondary key, and rights (``AccessRights``: ``Manage``, ``Send``, ``Listen``). As in Azure,
``Manage`` is only valid together with ``Send`` and ``Listen``, so a rule's rights already spell
out everything it may do. Rules live on the namespace and, optionally, on a queue or topic; a
token signed with an entity's own key is good only for that entity (a topic's key also covers its
subscriptions).

:func:`authorize` turns a token into an :class:`Authorization`: it tries the namespace's rule of
the token's key name, then the rule of that name on the queue or topic the request is about.

Regenerated keys (:class:`KeyOverride`) are remembered together with the keys the configuration
had when they were regenerated, so that a restart keeps a regenerated key while Config.json still
holds the key it replaced, and an operator's later edit of Config.json wins.

Pure: time comes in as an argument, random keys come in from the caller.
"""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final, Literal

from sodalite.errors import ConfigurationError, Unauthorized
from sodalite.model import sas
from sodalite.model.json_types import json_type


class AccessRights(StrEnum):
    """Service Bus ``AccessRights``, in the order Service Bus lists them."""

    MANAGE = "Manage"
    SEND = "Send"
    LISTEN = "Listen"


ALL_RIGHTS: Final = frozenset(AccessRights)
KeyType = Literal["PrimaryKey", "SecondaryKey"]
KEY_TYPES: Final[tuple[KeyType, ...]] = ("PrimaryKey", "SecondaryKey")
RULE_KEYS: Final = ("KeyName", "PrimaryKey", "SecondaryKey", "Rights")

_KEY_NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,256}", re.ASCII)
MAX_KEY_LENGTH: Final = 256




def key_name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"must be a string, got {json_type(name)}"
    if _KEY_NAME_RE.fullmatch(name) is None:
        return f"invalid key name {name!r}: it must be 1 to 256 letters, digits, periods, hyphens or underscores"
    return None


def key_problem(key: object, optional: bool) -> str | None:
    if key is None and optional:
        return None
    if not isinstance(key, str):
        return f"must be a string, got {json_type(key)}"
    if not key or len(key) > MAX_KEY_LENGTH:
        return f"must be 1 to {MAX_KEY_LENGTH} characters, got {len(key)}"
    return None


def rights_problem(rights: Iterable[AccessRights]) -> str | None:
    held = set(rights)
    if not held:
        return "at least one of Manage, Send, Listen is required"
    if AccessRights.MANAGE in held and not {AccessRights.SEND, AccessRights.LISTEN} <= held:
        return "Manage requires Send and Listen"
    return None


def parse_rights(raw: object, path: str) -> frozenset[AccessRights]:
    """``["Send", "Listen"]`` (names compare case-insensitively) -> the rights; errors name ``path``."""
    if not isinstance(raw, list):
        raise ConfigurationError(f"{path}: must be a JSON array, got {json_type(raw)}")
    by_name = {r.value.lower(): r for r in AccessRights}
    rights: list[AccessRights] = []
    for i, item in enumerate(raw):
        right = by_name.get(item.lower()) if isinstance(item, str) else None
        if right is None:
            raise ConfigurationError(f"{path}[{i}]: must be one of Manage, Send, Listen, got {item!r}")
        if right in rights:
            raise ConfigurationError(f"{path}[{i}]: duplicate right {right.value!r}")
        rights.append(right)
    problem = rights_problem(rights)
    if problem is not None:
        raise ConfigurationError(f"{path}: {problem}")
    return frozenset(rights)


def rights_in_order(rights: Iterable[AccessRights]) -> list[AccessRights]:
    held = set(rights)
    return [r for r in AccessRights if r in held]


@dataclass(frozen=True, slots=True)
class AuthorizationRule:
    """A shared access policy: a key name, its keys (either signs valid tokens) and its rights."""

    key_name: str
    primary_key: str
    secondary_key: str | None = None
    rights: frozenset[AccessRights] = ALL_RIGHTS

    def __post_init__(self) -> None:
        for label, problem in (
            ("key_name", key_name_problem(self.key_name)),
            ("primary_key", key_problem(self.primary_key, optional=False)),
            ("secondary_key", key_problem(self.secondary_key, optional=True)),
            ("rights", rights_problem(self.rights)),
        ):
            if problem is not None:
                raise ConfigurationError(f"AuthorizationRule.{label}: {problem}")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.primary_key, self.secondary_key) if k)

    def with_key(self, key_type: KeyType, key: str) -> AuthorizationRule:
        """This rule with its primary or secondary key replaced (validated like any key)."""
        problem = key_problem(key, optional=False)
        if problem is not None:
            raise ConfigurationError(f"{key_type}: {problem}")
        if key_type == "PrimaryKey":
            return replace(self, primary_key=key)
        return replace(self, secondary_key=key)

    def to_json(self) -> dict[str, Any]:
        return {"KeyName": self.key_name, "PrimaryKey": self.primary_key, "SecondaryKey": self.secondary_key,
                "Rights": [r.value for r in rights_in_order(self.rights)]}

    @classmethod
    def from_json(cls, raw: object, *, path: str = "AuthorizationRule") -> AuthorizationRule:
        """Build from ``{KeyName, PrimaryKey, SecondaryKey?, Rights?}``; Rights default to all three."""
        obj = _object(raw, path)
        unknown = [k for k in obj if k not in RULE_KEYS]
        if unknown:
            raise ConfigurationError(f"{path}.{unknown[0]}: unknown property; allowed: {', '.join(RULE_KEYS)}")
        for key, problem in (
            ("KeyName", key_name_problem(obj["KeyName"]) if "KeyName" in obj else "required property is missing"),
            ("PrimaryKey", key_problem(obj["PrimaryKey"], optional=False) if "PrimaryKey" in obj
             else "required property is missing"),
            ("SecondaryKey", key_problem(obj.get("SecondaryKey"), optional=True)),
        ):
            if problem is not None:
                raise ConfigurationError(f"{path}.{key}: {problem}")
        rights = parse_rights(obj["Rights"], f"{path}.Rights") if "Rights" in obj else ALL_RIGHTS
        return cls(obj["KeyName"], obj["PrimaryKey"], obj.get("SecondaryKey"), rights)


def _object(raw: object, path: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{path}: must be a JSON object, got {json_type(raw)}")
    return raw


def rules_from_json(raw: object, path: str, *, allow_empty: bool = True) -> tuple[AuthorizationRule, ...]:
    """A JSON array of rules; key names must be unique (case-insensitively)."""
    if not isinstance(raw, list):
        raise ConfigurationError(f"{path}: must be a JSON array, got {json_type(raw)}")
    if not raw and not allow_empty:
        raise ConfigurationError(f"{path}: at least one authorization rule is required")
    rules = tuple(AuthorizationRule.from_json(item, path=f"{path}[{i}]") for i, item in enumerate(raw))
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        folded = rule.key_name.casefold()
        if folded in seen:
            raise ConfigurationError(f"{path}[{i}].KeyName: duplicate key name {rule.key_name!r} "
                                     f"(already used by {path}[{seen[folded]}])")
        seen[folded] = i
    return rules


def find_rule(rules: Sequence[AuthorizationRule], key_name: str) -> AuthorizationRule | None:
    """The rule named ``key_name`` (case-insensitively, as Service Bus names compare)."""
    folded = key_name.casefold()
    return next((r for r in rules if r.key_name.casefold() == folded), None)


# --------------------------------------------------------------------------------------------------
# Tokens -> rights
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Authorization:
    """What a valid token grants: its rule's rights, within its audience (and its rule's entity)."""

    key_name: str
    rights: frozenset[AccessRights]
    entity: str | None  # lower-cased queue or topic path whose own rule signed the token; None: namespace rule
    audience_path: str  # lower-cased, '' for the whole namespace
    expires_at: float  # seconds since the epoch

    def allows(self, right: AccessRights | None) -> bool:
        """``None`` asks only for a valid token; Manage implies Send and Listen."""
        return right is None or right in self.rights or AccessRights.MANAGE in self.rights

    def covers(self, path: str) -> bool:
        """The token's audience and, for an entity key, its entity contain ``path``."""
        return sas.covers(self.audience_path, path) and (self.entity is None or sas.covers(self.entity, path))


EntityRules = Callable[[str], Sequence[AuthorizationRule] | None]


def entity_scope(path: str, lookup: EntityRules) -> tuple[str, Sequence[AuthorizationRule]] | None:
    """The queue or topic ``path`` is about (the longest prefix ``lookup`` knows) and its own rules."""
    parts = path.strip("/").lower().split("/")
    for end in range(len(parts), 0, -1):
        prefix = "/".join(parts[:end])
        rules = lookup(prefix)
        if rules is not None:
            return prefix, rules
    return None


def authorize(token: str, namespace_rules: Sequence[AuthorizationRule], lookup: EntityRules, target_path: str,
              now: float, host: str = "") -> Authorization:
    """Validate ``token`` against the namespace's rules, then against the rules of the entity
    ``target_path`` names (``lookup`` gives a queue's or topic's own rules, None for anything else).

    Raises Unauthorized for an unknown key name, a bad signature or an expired token.
    """
    parsed = sas.parse_token(token)
    _, audience_path = sas.audience_path(parsed.audience, host)  # host: the namespace's, when known
    scopes: list[tuple[str | None, Sequence[AuthorizationRule]]] = [(None, namespace_rules)]
    found = entity_scope(target_path, lookup)
    if found is not None:
        scopes.append(found)
    failure: Unauthorized | None = None
    for entity, rules in scopes:
        rule = next((r for r in rules if r.key_name == parsed.key_name), None)
        if rule is None:
            continue
        try:
            sas.validate_token(token, {rule.key_name: rule.keys}, now)
        except Unauthorized as exc:
            failure = failure or exc
            continue
        return Authorization(rule.key_name, rule.rights, entity, audience_path, float(parsed.expiry))
    raise failure or Unauthorized(f"unknown SharedAccessKeyName {parsed.key_name!r}")


def key_matches(rule: AuthorizationRule, key: str) -> bool:
    """Whether ``key`` is the rule's primary or secondary key, compared in constant time: both keys are
    always compared, so the time taken tells nothing about which one (or how much of it) matched."""
    given = key.encode("utf-8")
    primary = hmac.compare_digest(given, rule.primary_key.encode("utf-8"))
    secondary = rule.secondary_key is not None and hmac.compare_digest(given, rule.secondary_key.encode("utf-8"))
    return primary | secondary


def key_grants(key_name: str, key: str, namespace_rules: Sequence[AuthorizationRule],
               entity_rules: Iterable[tuple[str, Sequence[AuthorizationRule]]]) -> tuple[Authorization, ...]:
    """What a key name and key given directly (SASL PLAIN, as a JMS client logs in) grant: the rights
    of the namespace's rule of that name if the key is one of its keys (namespace-wide), and of each
    queue's or topic's own rule of that name whose key it is (on that entity only). Empty: refused.

    ``entity_rules`` gives each queue or topic (lower-cased path) with its own rules. The grants do not
    expire; they last while the rule still has that key (see :func:`key_grants` again on a change).
    """
    grants: list[Authorization] = []
    scopes: list[tuple[str | None, Sequence[AuthorizationRule]]] = [(None, namespace_rules), *entity_rules]
    for entity, rules in scopes:
        rule = next((r for r in rules if r.key_name == key_name), None)
        if rule is not None and key_matches(rule, key):
            grants.append(Authorization(rule.key_name, rule.rights, entity, "", math.inf))
    return tuple(grants)


def missing_right(right: AccessRights) -> Unauthorized:
    return Unauthorized(f"Unauthorized access. '{right.value}' claim(s) are required to perform this operation.")


# --------------------------------------------------------------------------------------------------
# Regenerated keys and Config.json
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyOverride:
    """A rule's keys as regenerated, and the keys the configuration had when that happened."""

    key_name: str
    primary_key: str
    secondary_key: str | None
    configured_primary_key: str
    configured_secondary_key: str | None

    def to_json(self) -> dict[str, Any]:
        return {"KeyName": self.key_name, "PrimaryKey": self.primary_key, "SecondaryKey": self.secondary_key,
                "ConfiguredPrimaryKey": self.configured_primary_key,
                "ConfiguredSecondaryKey": self.configured_secondary_key}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KeyOverride:
        return cls(raw["KeyName"], raw["PrimaryKey"], raw.get("SecondaryKey"), raw["ConfiguredPrimaryKey"],
                   raw.get("ConfiguredSecondaryKey"))


def regenerated(before: AuthorizationRule, after: AuthorizationRule, earlier: KeyOverride | None) -> KeyOverride:
    """The override to remember after ``before`` became ``after``; the configured keys are those of the
    first regeneration, so regenerating twice still recognises the configuration's original keys."""
    configured = ((earlier.configured_primary_key, earlier.configured_secondary_key) if earlier is not None
                  else (before.primary_key, before.secondary_key))
    return KeyOverride(after.key_name, after.primary_key, after.secondary_key, *configured)


def apply_overrides(rules: Sequence[AuthorizationRule], overrides: Sequence[KeyOverride],
                    ) -> tuple[tuple[AuthorizationRule, ...], tuple[KeyOverride, ...]]:
    """The rules with their regenerated keys, and the overrides still in force.

    An override applies while the rule of its key name still has the keys it replaced (or already
    the regenerated ones); if the configuration now names other keys, or no longer has the rule,
    the configuration was changed after the regeneration and wins: the override is dropped.
    Rights always come from the rule.
    """
    by_name = {o.key_name.casefold(): o for o in overrides}
    out: list[AuthorizationRule] = []
    kept: list[KeyOverride] = []
    for rule in rules:
        override = by_name.get(rule.key_name.casefold())
        current = (rule.primary_key, rule.secondary_key)
        if override is not None and current in (
                (override.configured_primary_key, override.configured_secondary_key),
                (override.primary_key, override.secondary_key)):
            rule = replace(rule, primary_key=override.primary_key, secondary_key=override.secondary_key)
            kept.append(override)
        out.append(rule)
    return tuple(out), tuple(kept)


@dataclass(frozen=True, slots=True)
class KeyOverrides:
    """Every regenerated key of a namespace: its own rules' and each queue's or topic's (by lower-cased path)."""

    namespace: tuple[KeyOverride, ...] = ()
    entities: Mapping[str, tuple[KeyOverride, ...]] = field(default_factory=dict)

    def for_entity(self, path: str) -> tuple[KeyOverride, ...]:
        return self.entities.get(path.lower(), ())

    def with_override(self, entity: str | None, override: KeyOverride) -> KeyOverrides:
        def merged(existing: tuple[KeyOverride, ...]) -> tuple[KeyOverride, ...]:
            folded = override.key_name.casefold()
            return (*(o for o in existing if o.key_name.casefold() != folded), override)

        if entity is None:
            return KeyOverrides(merged(self.namespace), self.entities)
        return KeyOverrides(self.namespace, {**self.entities, entity.lower(): merged(self.for_entity(entity))})

    def to_json(self) -> dict[str, Any]:
        return {"Namespace": [o.to_json() for o in self.namespace],
                "Entities": {path: [o.to_json() for o in items] for path, items in self.entities.items()}}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KeyOverrides:
        return cls(tuple(KeyOverride.from_json(o) for o in raw.get("Namespace", [])),
                   {str(path): tuple(KeyOverride.from_json(o) for o in items)
                    for path, items in raw.get("Entities", {}).items()})


__all__ = [
    "ALL_RIGHTS",
    "KEY_TYPES",
    "AccessRights",
    "Authorization",
    "AuthorizationRule",
    "KeyOverride",
    "KeyOverrides",
    "KeyType",
    "apply_overrides",
    "authorize",
    "entity_scope",
    "find_rule",
    "key_grants",
    "key_matches",
    "missing_right",
    "parse_rights",
    "regenerated",
    "rules_from_json",
]
