"""Entity names: what Service Bus accepts as a queue, topic, subscription or rule name.

Rules: ASCII letters, digits, periods, hyphens and underscores (queues and topics also slashes),
starting and ending with a letter or digit; at most 260 characters for queues and topics, 50 for
subscriptions and rules; the rule name ``$Default`` is always valid. A forwarding address is read
without its scheme and authority (``sb://host:port/q2`` names ``q2``).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from sodalite.model.json_types import config_error, json_type

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
        raise config_error(label, problem)
    assert isinstance(name, str)
    return name
