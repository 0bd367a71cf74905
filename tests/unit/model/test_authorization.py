"""Authorization rules: rights parsing, token -> rights/entity resolution, regenerated-key precedence."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sodalite.errors import ConfigurationError, Unauthorized
from sodalite.model.authorization import (
    ALL_RIGHTS,
    AccessRights,
    AuthorizationRule,
    KeyOverride,
    KeyOverrides,
    apply_overrides,
    authorize,
    entity_scope,
    find_rule,
    key_grants,
    missing_right,
    parse_rights,
    regenerated,
    rules_from_json,
)
from sodalite.model.sas import generate_token

NOW = 1_700_000_000
SEND, LISTEN, MANAGE = AccessRights.SEND, AccessRights.LISTEN, AccessRights.MANAGE

NAMESPACE = (
    AuthorizationRule("root", "root-key"),
    AuthorizationRule("sender", "send-key", "send-key-2", frozenset({SEND})),
)
ENTITIES: dict[str, tuple[AuthorizationRule, ...]] = {
    "orders": (AuthorizationRule("orders-listen", "orders-key", None, frozenset({LISTEN})),),
    "news": (AuthorizationRule("news-admin", "news-key"),),
    "plain": (),
}


def lookup(path: str) -> Sequence[AuthorizationRule] | None:
    return ENTITIES.get(path)


def token(path: str, key_name: str, key: str, expiry: int = NOW + 60) -> str:
    return generate_token(f"sb://host/{path}", key_name, key, expiry)


# ---- rights -------------------------------------------------------------------------------------


def test_rights_parse_case_insensitively_and_manage_needs_the_other_two() -> None:
    assert parse_rights(["send", "LISTEN"], "R") == frozenset({SEND, LISTEN})
    assert parse_rights(["Manage", "Send", "Listen"], "R") == ALL_RIGHTS
    with pytest.raises(ConfigurationError, match=r"^R: Manage requires Send and Listen"):
        parse_rights(["Manage", "Listen"], "R")
    with pytest.raises(ConfigurationError, match=r"^R\[1\]: must be one of"):
        parse_rights(["Send", "Write"], "R")
    with pytest.raises(ConfigurationError, match=r"^R: at least one"):
        parse_rights([], "R")


def test_rule_json_round_trip_lists_rights_in_service_bus_order() -> None:
    rule = AuthorizationRule.from_json({"KeyName": "k", "PrimaryKey": "p", "Rights": ["Listen", "Send"]})
    assert rule.to_json() == {"KeyName": "k", "PrimaryKey": "p", "SecondaryKey": None, "Rights": ["Send", "Listen"]}
    assert AuthorizationRule.from_json(rule.to_json()) == rule
    assert AuthorizationRule.from_json({"KeyName": "k", "PrimaryKey": "p"}).rights == ALL_RIGHTS


def test_rules_need_unique_names_and_are_found_case_insensitively() -> None:
    with pytest.raises(ConfigurationError, match=r"Rules\[1\]\.KeyName: duplicate key name"):
        rules_from_json([{"KeyName": "a", "PrimaryKey": "p"}, {"KeyName": "A", "PrimaryKey": "q"}], "Rules")
    assert find_rule(NAMESPACE, "SENDER") is NAMESPACE[1]
    assert find_rule(NAMESPACE, "nobody") is None


def test_with_key_validates_the_new_key() -> None:
    rule = NAMESPACE[1]
    assert rule.with_key("SecondaryKey", "fresh").keys == ("send-key", "fresh")
    with pytest.raises(ConfigurationError, match="PrimaryKey"):
        rule.with_key("PrimaryKey", "")


# ---- tokens -> rights ---------------------------------------------------------------------------


def test_a_namespace_key_grants_its_rights_everywhere_its_audience_covers() -> None:
    granted = authorize(token("", "sender", "send-key-2"), NAMESPACE, lookup, "orders", NOW)
    assert (granted.key_name, granted.entity, granted.audience_path) == ("sender", None, "")
    assert granted.allows(SEND) and not granted.allows(LISTEN) and not granted.allows(MANAGE)
    assert granted.covers("orders") and granted.covers("news/subscriptions/s")
    root = authorize(token("orders", "root", "root-key"), NAMESPACE, lookup, "orders", NOW)
    assert root.allows(SEND) and root.allows(LISTEN) and root.allows(MANAGE)  # Manage implies the others
    assert root.covers("orders/$deadletterqueue") and not root.covers("news")


def test_an_entity_key_is_good_for_its_entity_only() -> None:
    granted = authorize(token("orders", "orders-listen", "orders-key"), NAMESPACE, lookup, "orders", NOW)
    assert granted.entity == "orders" and granted.allows(LISTEN) and not granted.allows(SEND)
    # Even with a namespace-wide audience, an entity key never covers another entity ...
    wide = authorize(token("", "orders-listen", "orders-key"), NAMESPACE, lookup, "orders", NOW)
    assert wide.covers("orders") and not wide.covers("news")
    # ... and is unknown when the request is about another entity.
    with pytest.raises(Unauthorized, match="unknown SharedAccessKeyName"):
        authorize(token("plain", "orders-listen", "orders-key"), NAMESPACE, lookup, "plain", NOW)


def test_a_topic_key_covers_its_subscriptions() -> None:
    path = "news/subscriptions/all"
    assert entity_scope(path, lookup) == ("news", ENTITIES["news"])
    granted = authorize(token(path, "news-admin", "news-key"), NAMESPACE, lookup, path, NOW)
    assert granted.entity == "news" and granted.covers(path) and not granted.covers("news")  # the audience's
    topic = authorize(token("news", "news-admin", "news-key"), NAMESPACE, lookup, "news", NOW)
    assert topic.covers(path) and not topic.covers("newsroom")


def test_expired_and_wrongly_signed_tokens_are_refused() -> None:
    with pytest.raises(Unauthorized, match="expired"):
        authorize(token("", "root", "root-key", NOW - 1), NAMESPACE, lookup, "orders", NOW)
    with pytest.raises(Unauthorized, match="signature"):
        authorize(token("", "root", "wrong"), NAMESPACE, lookup, "orders", NOW)
    with pytest.raises(Unauthorized, match="signature"):
        authorize(token("orders", "orders-listen", "wrong"), NAMESPACE, lookup, "orders", NOW)


def test_missing_right_names_the_claim() -> None:
    error = missing_right(MANAGE)
    assert isinstance(error, Unauthorized) and "'Manage' claim(s) are required" in error.description


# ---- regenerated keys and Config.json -----------------------------------------------------------


def test_an_override_holds_while_the_configuration_keeps_the_replaced_key() -> None:
    before = NAMESPACE[1]
    after = before.with_key("PrimaryKey", "new")
    override = regenerated(before, after, None)
    rules, kept = apply_overrides(NAMESPACE, [override])
    assert rules[1].keys == ("new", "send-key-2") and rules[1].rights == before.rights and kept == (override,)
    # Regenerated again: the configuration's original keys are still recognised.
    again = regenerated(after, after.with_key("SecondaryKey", "newer"), override)
    rules, kept = apply_overrides(NAMESPACE, [again])
    assert rules[1].keys == ("new", "newer") and kept == (again,)


def test_an_operator_edit_of_the_configuration_wins_over_an_override() -> None:
    override = regenerated(NAMESPACE[1], NAMESPACE[1].with_key("PrimaryKey", "new"), None)
    edited = (NAMESPACE[0], AuthorizationRule("sender", "operator-key", None, frozenset({SEND})))
    rules, kept = apply_overrides(edited, [override])
    assert rules == edited and kept == ()


def test_overrides_round_trip_through_json() -> None:
    override = KeyOverride("k", "p2", None, "p", "s")
    overrides = KeyOverrides().with_override(None, override).with_override("Orders", override)
    assert overrides.for_entity("orders") == (override,)
    assert KeyOverrides.from_json(overrides.to_json()) == overrides
    replaced = overrides.with_override(None, KeyOverride("K", "p3", None, "p", "s"))
    assert [o.primary_key for o in replaced.namespace] == ["p3"]


# ---- a key name and key given directly (SASL PLAIN) ---------------------------------------------------


def test_a_key_grants_its_rules_rights_namespace_wide_or_on_its_entity_only() -> None:
    scopes = list(ENTITIES.items())
    [grant] = key_grants("sender", "send-key-2", NAMESPACE, scopes)  # the secondary key counts
    assert (grant.entity, grant.rights) == (None, frozenset({SEND}))
    assert grant.covers("orders") and grant.covers("news/subscriptions/s") and grant.allows(SEND)
    assert not grant.allows(LISTEN)
    [grant] = key_grants("orders-listen", "orders-key", NAMESPACE, scopes)
    assert grant.entity == "orders" and grant.covers("orders/$deadletterqueue") and not grant.covers("news")
    assert key_grants("sender", "orders-key", NAMESPACE, scopes) == ()  # another rule's key
    assert key_grants("root", "root-ke", NAMESPACE, scopes) == ()  # a prefix of the key
    assert key_grants("nobody", "root-key", NAMESPACE, scopes) == ()
    assert key_grants("root", "", NAMESPACE, scopes) == ()
