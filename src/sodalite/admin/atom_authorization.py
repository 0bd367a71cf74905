"""A queue's or topic's ``<AuthorizationRules>`` in ATOM descriptions: writer and parser, pure.

The service writes each rule as a ``SharedAccessAuthorizationRule`` with members in DataContract
order: ``ClaimType`` (``SharedAccessKey``), ``ClaimValue`` (``None``), ``Rights`` (a list of
``AccessRights``), ``KeyName``, ``PrimaryKey``, ``SecondaryKey`` (the order of the SDK's generated
``AuthorizationRule`` model). An entity's rules come back as they were sent: without the
``CreatedTime`` and ``ModifiedTime`` a client never sets (the Go SDK compares them). The element is
meant to sit inside a description that declares the ``.../servicebus/connect`` namespace as its
default and ``i`` as the XML Schema instance namespace, as every description ``admin.atom`` writes does.

Parsing matches elements by local name (the SDK sends ``ns0:`` prefixes), skips the read-only and
claim members, treats ``i:nil="true"`` as absent, and returns the JSON shape
``model.authorization.rules_from_json`` takes, which validates names, keys and rights.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final
from xml.sax.saxutils import escape

from sodalite.errors import ArgumentError
from sodalite.model.authorization import AuthorizationRule, rights_in_order

XSI_NS: Final = "http://www.w3.org/2001/XMLSchema-instance"
RULE_TYPE: Final = "SharedAccessAuthorizationRule"
_NIL: Final = f"{{{XSI_NS}}}nil"
_KEY_MEMBERS: Final = ("KeyName", "PrimaryKey", "SecondaryKey")
# Written by the service and echoed by the SDK on update, but not settable: skipped when parsing.
_IGNORED_MEMBERS: Final = frozenset({"ClaimType", "ClaimValue", "CreatedTime", "ModifiedTime"})


def _rule_xml(rule: AuthorizationRule) -> str:
    rights = "".join(f"<AccessRights>{right.value}</AccessRights>" for right in rights_in_order(rule.rights))
    # Left out when there is none: the SDK reads an empty or nil element as '' rather than None.
    secondary = f"<SecondaryKey>{escape(rule.secondary_key)}</SecondaryKey>" if rule.secondary_key is not None else ""
    return (f'<AuthorizationRule i:type="{RULE_TYPE}">'
            "<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>"
            f"<Rights>{rights}</Rights>"
            f"<KeyName>{escape(rule.key_name)}</KeyName><PrimaryKey>{escape(rule.primary_key)}</PrimaryKey>"
            f"{secondary}</AuthorizationRule>")


def authorization_rules_xml(rules: Sequence[AuthorizationRule], created: datetime | None = None) -> str:
    """The whole ``<AuthorizationRules>`` element (empty for an entity without rules of its own).
    ``created`` is kept for callers; the rules carry no times (they come back as sent)."""
    del created
    return f"<AuthorizationRules>{''.join(_rule_xml(rule) for rule in rules)}</AuthorizationRules>"


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _present(element: ET.Element) -> bool:
    return element.get(_NIL, "").strip().lower() != "true"


def _parse_rule(element: ET.Element, where: str) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    for child in element:
        name = _local(child.tag)
        if name in _IGNORED_MEMBERS or not _present(child):
            continue
        if name in rule:
            raise ArgumentError(f"{where}.{name}: appears more than once")
        if name in _KEY_MEMBERS:
            rule[name] = (child.text or "").strip()
        elif name == "Rights":
            rights = []
            for item in child:
                if _local(item.tag) != "AccessRights":
                    raise ArgumentError(f"{where}.Rights: unexpected element <{_local(item.tag)}>")
                rights.append((item.text or "").strip())
            rule["Rights"] = rights
        else:
            raise ArgumentError(f"{where}: unknown member <{name}>")
    return rule


def parse_authorization_rules(element: ET.Element, where: str) -> list[dict[str, Any]]:
    """``<AuthorizationRules>`` -> ``[{KeyName, PrimaryKey, SecondaryKey?, Rights?}]``; errors name ``where``."""
    if not _present(element):
        return []
    rules = []
    for i, child in enumerate(element):
        if _local(child.tag) != "AuthorizationRule":
            raise ArgumentError(f"{where}: unexpected element <{_local(child.tag)}>")
        rules.append(_parse_rule(child, f"{where}[{i}]"))
    return rules
