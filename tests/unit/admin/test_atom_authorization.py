"""``<AuthorizationRules>`` in ATOM descriptions, checked through the installed SDK's own (de)serializers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest
from azure.core.pipeline.policies import ContentDecodePolicy
from azure.servicebus.management import AccessRights as SdkAccessRights
from azure.servicebus.management import AuthorizationRule as SdkAuthorizationRule
from azure.servicebus.management._generated.models import QueueDescription as SdkQueueDescription

from sodalite.admin.atom_authorization import authorization_rules_xml, parse_authorization_rules
from sodalite.errors import ArgumentError
from sodalite.model.authorization import AccessRights, AuthorizationRule, rules_from_json

CONNECT_NS = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
CREATED = datetime(2024, 5, 1, 12, 30, 15, 250000, tzinfo=UTC)
RULES = (
    AuthorizationRule("listener", "p&<key>", None, frozenset({AccessRights.LISTEN})),
    AuthorizationRule("admin", "primary", "secondary"),
)


def _in_description(rules_xml: str) -> str:
    return f'<QueueDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{rules_xml}</QueueDescription>'


def test_the_sdk_reads_what_we_write() -> None:
    body = _in_description(authorization_rules_xml(RULES, CREATED))
    description = SdkQueueDescription.deserialize(ContentDecodePolicy.deserialize_from_text(body, "application/xml"))
    listener, admin = (SdkAuthorizationRule._from_internal_entity(r) for r in description.authorization_rules)
    assert (listener.type, listener.claim_type, listener.claim_value) == (
        "SharedAccessAuthorizationRule", "SharedAccessKey", "None")
    assert (listener.key_name, listener.primary_key, listener.secondary_key) == ("listener", "p&<key>", None)
    assert listener.rights == [SdkAccessRights.LISTEN]
    assert admin.rights == ["Manage", "Send", "Listen"] and admin.secondary_key == "secondary"
    # As sent: no times (Service Bus gives an entity's rules back without them; the Go SDK compares them).
    assert listener.created_at_utc is None and admin.modified_at_utc is None


def test_we_read_what_the_sdk_writes() -> None:
    sdk_rules = [SdkAuthorizationRule(key_name="listener", primary_key="p&<key>", rights=["Listen"]),
                 SdkAuthorizationRule(key_name="admin", primary_key="primary", secondary_key="secondary",
                                      rights=["Manage", "Send", "Listen"])]
    description = SdkQueueDescription(authorization_rules=[r._to_internal_entity() for r in sdk_rules])
    element = description.serialize(is_xml=True)
    [rules] = [child for child in element if child.tag.endswith("AuthorizationRules")]
    parsed = parse_authorization_rules(rules, "QueueDescription.AuthorizationRules")
    assert rules_from_json(parsed, "QueueDescription.AuthorizationRules") == RULES


def test_round_trip_and_an_empty_list() -> None:
    element = ET.fromstring(_in_description(authorization_rules_xml(RULES, CREATED)))[0]
    assert rules_from_json(parse_authorization_rules(element, "R"), "R") == RULES
    empty = ET.fromstring(_in_description(authorization_rules_xml((), CREATED)))[0]
    assert parse_authorization_rules(empty, "R") == []


def test_unknown_members_are_refused_with_their_place() -> None:
    element = ET.fromstring(_in_description(
        "<AuthorizationRules><AuthorizationRule><KeyName>k</KeyName><Colour>red</Colour></AuthorizationRule>"
        "</AuthorizationRules>"))[0]
    with pytest.raises(ArgumentError, match=r"^Q\.AuthorizationRules\[0\]: unknown member <Colour>"):
        parse_authorization_rules(element, "Q.AuthorizationRules")
