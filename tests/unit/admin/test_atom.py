"""The ATOM/XML documents of the management API, checked against the installed SDK's own (de)serializers.

The SDK's response path is: ``ContentDecodePolicy`` parses the body into an ElementTree element
(any content type containing "xml"), the generated model's ``deserialize`` reads it, and
``QueueProperties._from_internal_entity`` / ``QueueRuntimeProperties._from_internal_entity`` make
the public objects (``management/_management_client.py``, ``_utils.extract_data_template``). The
tests call exactly that path, and one test drives the whole ``ServiceBusAdministrationClient``
over an in-process ``requests`` adapter.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import requests
import urllib3
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.core.pipeline.policies import ContentDecodePolicy
from azure.core.pipeline.transport import RequestsTransport
from azure.servicebus.management import CorrelationRuleFilter as SdkCorrelationRuleFilter
from azure.servicebus.management import FalseRuleFilter as SdkFalseRuleFilter
from azure.servicebus.management import NamespaceProperties as SdkNamespaceProperties
from azure.servicebus.management import QueueProperties as SdkQueueProperties
from azure.servicebus.management import QueueRuntimeProperties as SdkQueueRuntimeProperties
from azure.servicebus.management import RuleProperties as SdkRuleProperties
from azure.servicebus.management import ServiceBusAdministrationClient
from azure.servicebus.management import SqlRuleAction as SdkSqlRuleAction
from azure.servicebus.management import SqlRuleFilter as SdkSqlRuleFilter
from azure.servicebus.management import SubscriptionProperties as SdkSubscriptionProperties
from azure.servicebus.management import SubscriptionRuntimeProperties as SdkSubscriptionRuntimeProperties
from azure.servicebus.management import TopicProperties as SdkTopicProperties
from azure.servicebus.management import TopicRuntimeProperties as SdkTopicRuntimeProperties
from azure.servicebus.management import TrueRuleFilter as SdkTrueRuleFilter
from azure.servicebus.management._generated.models import (
    CreateRuleBody,
    CreateRuleBodyContent,
    CreateSubscriptionBody,
    CreateSubscriptionBodyContent,
    CreateTopicBody,
    CreateTopicBodyContent,
    NamespacePropertiesEntry,
    QueueDescriptionEntry,
    QueueDescriptionFeed,
    RuleDescriptionEntry,
    RuleDescriptionFeed,
    ServiceBusManagementError,
    SubscriptionDescriptionEntry,
    SubscriptionDescriptionFeed,
    TopicDescriptionEntry,
    TopicDescriptionFeed,
)
from azure.servicebus.management._utils import (
    deserialize_rule_key_values,
    extract_data_template,
    extract_rule_data_template,
    serialize_rule_key_values,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from sodalite.admin import atom
from sodalite.admin.atom import EntityRuntime
from sodalite.admin.control import EntityCounts
from sodalite.errors import ArgumentError, ConfigurationError, SodaliteError
from sodalite.model.entities import (
    CORRELATION_FIELDS,
    ENTITY_STATUSES,
    TIMESPAN_MAX,
    CorrelationFilter,
    FalseFilter,
    QueueProperties,
    RuleDescription,
    SqlFilter,
    SqlRuleAction,
    SubscriptionProperties,
    TopicProperties,
    TrueFilter,
)

BASE = "https://localhost:5300"
NOW = datetime(2024, 5, 1, 12, 30, 15, 250000, tzinfo=UTC)
CREATED = datetime(2024, 4, 30, 8, 0, 0, tzinfo=UTC)
UPDATED = datetime(2024, 4, 30, 9, 15, 0, 123456, tzinfo=UTC)
ACCESSED = datetime(2024, 5, 1, 12, 0, 0, 1000, tzinfo=UTC)

# sdk-wire-contract.md 8.2, as captured from create_queue.
CAPTURED_CREATE_BODY = (
    b"<?xml version='1.0' encoding='utf-8'?>\n"
    b'<ns0:entry xmlns:ns0="http://www.w3.org/2005/Atom" '
    b'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
    b'<ns0:content type="application/xml"><QueueDescription><LockDuration>PT45S</LockDuration>'
    b"<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><RequiresDuplicateDetection>true</RequiresDuplicateDetection>"
    b"<RequiresSession>true</RequiresSession><DefaultMessageTimeToLive>P1D</DefaultMessageTimeToLive>"
    b"<DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>"
    b"<DuplicateDetectionHistoryTimeWindow>PT5M</DuplicateDetectionHistoryTimeWindow>"
    b"<MaxDeliveryCount>5</MaxDeliveryCount><EnablePartitioning>true</EnablePartitioning>"
    b"<ForwardTo>sb://localhost:58443/q2</ForwardTo>"
    b"<ForwardDeadLetteredMessagesTo>sb://localhost:58443/q3</ForwardDeadLetteredMessagesTo>"
    b"</QueueDescription></ns0:content></ns0:entry>"
)

CONNECT = "{http://schemas.microsoft.com/netservices/2010/10/servicebus/connect}"
COUNTS = "{http://schemas.microsoft.com/netservices/2011/06/servicebus}"

EVERYTHING_SET = QueueProperties(
    lock_duration=timedelta(seconds=45),
    max_size_in_megabytes=2048,
    requires_duplicate_detection=True,
    requires_session=True,
    default_message_time_to_live=timedelta(days=1, hours=2, seconds=3, microseconds=500000),
    dead_lettering_on_message_expiration=True,
    duplicate_detection_history_time_window=timedelta(minutes=5),
    max_delivery_count=7,
    enable_batched_operations=False,
    auto_delete_on_idle=timedelta(hours=6),
    enable_partitioning=True,
    enable_express=True,
    forward_to="q2",
    forward_dead_lettered_messages_to="dlq/target",
    max_message_size_in_kilobytes=1024,
    status="SendDisabled",
    user_metadata="owner=<team & co>",
    support_ordering=False,
)

RUNTIME = EntityRuntime(
    counts=EntityCounts(active=5, dead_letter=3, scheduled=2, transfer=1, transfer_dead_letter=4, size_in_bytes=12345),
    created_at=CREATED,
    updated_at=UPDATED,
    accessed_at=ACCESSED,
)


def sdk_element(body: bytes) -> Any:
    """What the SDK's pipeline hands its deserializers for a response body (ContentDecodePolicy)."""
    return ContentDecodePolicy.deserialize_from_text(body.decode("utf-8"), "application/atom+xml")


def sdk_queue(body: bytes, name: str) -> tuple[SdkQueueProperties, SdkQueueRuntimeProperties]:
    """The get_queue / get_queue_runtime_properties path of ServiceBusAdministrationClient."""
    entry = QueueDescriptionEntry.deserialize(sdk_element(body))
    assert entry.content is not None
    description = entry.content.queue_description
    return (
        SdkQueueProperties._from_internal_entity(name, description),
        SdkQueueRuntimeProperties._from_internal_entity(name, description),
    )


def near(value: timedelta | None, expected: timedelta) -> bool:
    """The SDK reads TimeSpan.MaxValue through a float, landing a microsecond off."""
    return value is not None and abs(value - expected) <= timedelta(microseconds=1)


# --------------------------------------------------------------------------------------------------
# (1) The captured request body
# --------------------------------------------------------------------------------------------------


def test_the_captured_create_body_parses_into_every_field() -> None:
    parsed = atom.parse_queue_description(CAPTURED_CREATE_BODY)
    assert parsed == {
        "LockDuration": "PT45S",
        "MaxSizeInMegabytes": 1024,
        "RequiresDuplicateDetection": True,
        "RequiresSession": True,
        "DefaultMessageTimeToLive": "P1D",
        "DeadLetteringOnMessageExpiration": True,
        "DuplicateDetectionHistoryTimeWindow": "PT5M",
        "MaxDeliveryCount": 5,
        "EnablePartitioning": True,
        # Kept in the form given (Service Bus gives them back so).
        "ForwardTo": "sb://localhost:58443/q2",
        "ForwardDeadLetteredMessagesTo": "sb://localhost:58443/q3",
    }
    props = QueueProperties.from_json(parsed, path="QueueDescription")
    assert props == QueueProperties(
        lock_duration=timedelta(seconds=45),
        max_size_in_megabytes=1024,
        requires_duplicate_detection=True,
        requires_session=True,
        default_message_time_to_live=timedelta(days=1),
        dead_lettering_on_message_expiration=True,
        duplicate_detection_history_time_window=timedelta(minutes=5),
        max_delivery_count=5,
        enable_partitioning=True,
        forward_to="sb://localhost:58443/q2",
        forward_dead_lettered_messages_to="sb://localhost:58443/q3",
    )


def test_the_read_only_members_of_the_contract_example_response_are_ignored() -> None:
    # sdk-wire-contract.md 8.3, which is also what the SDK echoes back on update.
    body = (
        b'<entry xmlns="http://www.w3.org/2005/Atom"><id>https://host/q1?api-version=2021-05</id>'
        b'<title type="text">q1</title><published>2024-01-01T00:00:00Z</published>'
        b"<updated>2024-01-01T00:00:00Z</updated><author><name>host</name></author>"
        b'<link rel="self" href="https://host/q1?api-version=2021-05"/>'
        b'<content type="application/xml"><QueueDescription '
        b'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" '
        b'xmlns:i="http://www.w3.org/2001/XMLSchema-instance">'
        b"<LockDuration>PT1M</LockDuration><MaxSizeInMegabytes>1024</MaxSizeInMegabytes>"
        b"<RequiresDuplicateDetection>false</RequiresDuplicateDetection><RequiresSession>false</RequiresSession>"
        b"<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>"
        b"<DeadLetteringOnMessageExpiration>false</DeadLetteringOnMessageExpiration>"
        b"<DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>"
        b"<MaxDeliveryCount>10</MaxDeliveryCount><EnableBatchedOperations>true</EnableBatchedOperations>"
        b"<SizeInBytes>123</SizeInBytes><MessageCount>7</MessageCount>"
        b"<IsAnonymousAccessible>false</IsAnonymousAccessible><AuthorizationRules/><Status>Active</Status>"
        b"<CreatedAt>2024-01-01T00:00:00Z</CreatedAt><UpdatedAt>2024-01-01T00:00:00Z</UpdatedAt>"
        b"<AccessedAt>0001-01-01T00:00:00Z</AccessedAt><SupportOrdering>true</SupportOrdering>"
        b'<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus">'
        b"<d2p1:ActiveMessageCount>5</d2p1:ActiveMessageCount>"
        b"<d2p1:DeadLetterMessageCount>1</d2p1:DeadLetterMessageCount>"
        b"<d2p1:ScheduledMessageCount>1</d2p1:ScheduledMessageCount>"
        b"<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount>"
        b"<d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount></CountDetails>"
        b"<AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle><EnablePartitioning>false</EnablePartitioning>"
        b"<EntityAvailabilityStatus>Available</EntityAvailabilityStatus><EnableExpress>false</EnableExpress>"
        b"<MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes></QueueDescription></content></entry>"
    )
    parsed = atom.parse_queue_description(body)
    assert not set(parsed) & atom.READ_ONLY_QUEUE_MEMBERS
    assert parsed["Status"] == "Active" and parsed["MaxMessageSizeInKilobytes"] == 256
    assert QueueProperties.from_json(parsed) == QueueProperties(max_message_size_in_kilobytes=256)


def test_a_bare_unprefixed_description_nil_and_empty_members() -> None:
    body = (
        b'<QueueDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance">'
        b"<LockDuration> PT30S </LockDuration><RequiresSession>1</RequiresSession>"
        b'<MaxMessageSizeInKilobytes i:nil="true"/><ForwardTo/><UserMetadata>  keep  me </UserMetadata>'
        b"<ForwardDeadLetteredMessagesTo>plain-name</ForwardDeadLetteredMessagesTo>"
        b"<SomethingNewer>ignored</SomethingNewer><!-- a comment --></QueueDescription>"
    )
    assert atom.parse_queue_description(body) == {
        "LockDuration": "PT30S",
        "RequiresSession": True,
        "ForwardTo": None,
        "UserMetadata": "  keep  me ",
        "ForwardDeadLetteredMessagesTo": "plain-name",
    }


def test_the_sdks_echo_of_timespan_max_is_read_as_timespan_max() -> None:
    # avoid_timedelta_overflow turns the value the SDK read back into this
    body = b"<QueueDescription><DefaultMessageTimeToLive>P10675199DT2H48M5.477539S</DefaultMessageTimeToLive>" \
        b"<AutoDeleteOnIdle>P10675199DT2H48M5S</AutoDeleteOnIdle></QueueDescription>"
    parsed = atom.parse_queue_description(body)
    props = QueueProperties.from_json(parsed)
    assert props.default_message_time_to_live == TIMESPAN_MAX and props.auto_delete_on_idle == TIMESPAN_MAX


# --------------------------------------------------------------------------------------------------
# (2) The SDK reads what we write
# --------------------------------------------------------------------------------------------------


def test_the_sdk_reads_every_property_and_runtime_count_of_an_entry() -> None:
    body = atom.queue_entry("orders", EVERYTHING_SET, RUNTIME, BASE, NOW)
    sdk, runtime = sdk_queue(body, "orders")
    p = EVERYTHING_SET
    assert sdk.name == "orders"
    assert sdk.lock_duration == p.lock_duration
    assert sdk.max_size_in_megabytes == p.max_size_in_megabytes
    assert sdk.requires_duplicate_detection is True
    assert sdk.requires_session is True
    assert sdk.default_message_time_to_live == p.default_message_time_to_live
    assert sdk.dead_lettering_on_message_expiration is True
    assert sdk.duplicate_detection_history_time_window == p.duplicate_detection_history_time_window
    assert sdk.max_delivery_count == 7
    assert sdk.enable_batched_operations is False
    assert sdk.auto_delete_on_idle == p.auto_delete_on_idle
    assert sdk.enable_partitioning is True
    assert sdk.enable_express is True
    assert sdk.forward_to == "q2"  # in the form it was given
    assert sdk.forward_dead_lettered_messages_to == "dlq/target"
    assert sdk.max_message_size_in_kilobytes == 1024
    assert sdk.status == "SendDisabled"
    assert sdk.user_metadata == "owner=<team & co>"
    assert sdk.availability_status == "Available"
    assert sdk.authorization_rules is None

    assert runtime.name == "orders"
    assert runtime.active_message_count == 5
    assert runtime.dead_letter_message_count == 3
    assert runtime.scheduled_message_count == 2
    assert runtime.transfer_message_count == 1
    assert runtime.transfer_dead_letter_message_count == 4
    assert runtime.total_message_count == 15
    assert runtime.size_in_bytes == 12345
    assert runtime.created_at_utc == CREATED
    assert runtime.updated_at_utc == UPDATED
    assert runtime.accessed_at_utc == ACCESSED


def test_the_sdk_reads_the_defaults_and_a_never_accessed_queue() -> None:
    runtime = replace(RUNTIME, accessed_at=None, counts=EntityCounts())
    sdk, sdk_runtime = sdk_queue(atom.queue_entry("q1", QueueProperties(), runtime, BASE, NOW), "q1")
    assert near(sdk.default_message_time_to_live, TIMESPAN_MAX)
    assert near(sdk.auto_delete_on_idle, TIMESPAN_MAX)
    assert sdk.lock_duration == timedelta(minutes=1)
    assert sdk.duplicate_detection_history_time_window == timedelta(minutes=10)
    assert (sdk.max_delivery_count, sdk.max_size_in_megabytes, sdk.status) == (10, 1024, "Active")
    assert sdk.forward_to is None and sdk.forward_dead_lettered_messages_to is None
    assert sdk.user_metadata is None and sdk.max_message_size_in_kilobytes is None
    assert sdk_runtime.total_message_count == 0 and sdk_runtime.active_message_count == 0
    assert sdk_runtime.accessed_at_utc == datetime(1, 1, 1, tzinfo=UTC)


def test_an_entry_has_the_contract_shape_and_datacontract_order() -> None:
    body = atom.queue_entry("orders", EVERYTHING_SET, RUNTIME, BASE, NOW)
    assert b"<?xml" not in body and body.startswith(b'<entry xmlns="http://www.w3.org/2005/Atom">')
    root = ET.fromstring(body)
    atom_ns = "{http://www.w3.org/2005/Atom}"
    assert [child.tag.removeprefix(atom_ns) for child in root] == [
        "id", "title", "published", "updated", "author", "link", "content"]
    assert root.findtext(f"{atom_ns}id") == f"{BASE}/orders?api-version=2021-05"
    assert root.findtext(f"{atom_ns}title") == "orders"
    assert root.findtext(f"{atom_ns}published") == "2024-04-30T08:00:00Z"
    assert root.findtext(f"{atom_ns}updated") == "2024-05-01T12:30:15.25Z"
    link = root.find(f"{atom_ns}link")
    assert link is not None and link.attrib == {"rel": "self", "href": f"{BASE}/orders?api-version=2021-05"}
    content = root.find(f"{atom_ns}content")
    assert content is not None and content.get("type") == "application/xml"
    [description] = list(content)
    assert description.tag == f"{CONNECT}QueueDescription"
    assert b'xmlns:i="http://www.w3.org/2001/XMLSchema-instance"' in body
    assert [child.tag.removeprefix(CONNECT) for child in description] == [
        "LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
        "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
        "MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
        "AuthorizationRules", "Status", "ForwardTo", "UserMetadata", "CreatedAt", "UpdatedAt", "AccessedAt",
        "SupportOrdering", "CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
        "ForwardDeadLetteredMessagesTo", "EnableExpress", "MaxMessageSizeInKilobytes",
    ]
    counts = description.find(f"{CONNECT}CountDetails")
    assert counts is not None
    assert [(child.tag, child.text) for child in counts] == [
        (f"{COUNTS}ActiveMessageCount", "5"),
        (f"{COUNTS}DeadLetterMessageCount", "3"),
        (f"{COUNTS}ScheduledMessageCount", "2"),
        (f"{COUNTS}TransferMessageCount", "1"),
        (f"{COUNTS}TransferDeadLetterMessageCount", "4"),
    ]
    assert description.findtext(f"{CONNECT}RequiresSession") == "true"
    assert description.findtext(f"{CONNECT}EnableBatchedOperations") == "false"
    assert description.findtext(f"{CONNECT}MessageCount") == "15"
    default = ET.fromstring(atom.queue_entry("q", QueueProperties(), RUNTIME, BASE, NOW))
    assert default.findtext(f"{atom_ns}content/{CONNECT}QueueDescription/{CONNECT}DefaultMessageTimeToLive") == (
        "P10675199DT2H48M5.4775807S")


def _list_page(feed: bytes) -> tuple[str | None, list[tuple[str, SdkQueueProperties, SdkQueueRuntimeProperties]]]:
    """The list_queues / list_queues_runtime_properties path: extract_data_template over a feed."""
    def convert(entry: Any) -> tuple[str, SdkQueueProperties, SdkQueueRuntimeProperties]:
        description = entry.content.queue_description
        return (entry.title, SdkQueueProperties._from_internal_entity(entry.title, description),
                SdkQueueRuntimeProperties._from_internal_entity(entry.title, description))

    next_link, items = extract_data_template(QueueDescriptionFeed, convert, sdk_element(feed))
    return next_link, list(items)


def test_the_sdk_lists_a_feed_of_two_entries_and_follows_the_next_link() -> None:
    entries = [
        atom.queue_entry("alpha", EVERYTHING_SET, RUNTIME, BASE, NOW),
        atom.queue_entry("beta", QueueProperties(), replace(RUNTIME, counts=replace(RUNTIME.counts, active=9)), BASE,
                         NOW),
    ]
    next_href = f"{BASE}/$Resources/queues?$skip=2&$top=2"
    next_link, items = _list_page(atom.feed(entries, BASE, "Queues", next_href, now=NOW))
    assert next_link == next_href
    assert [name for name, _, _ in items] == ["alpha", "beta"]
    assert items[0][1].name == "alpha" and items[0][1].lock_duration == timedelta(seconds=45)
    assert items[0][1].forward_to == "q2"
    assert items[1][1].max_delivery_count == 10
    assert [runtime.active_message_count for _, _, runtime in items] == [5, 9]
    assert items[1][2].total_message_count == 19

    last_link, last = _list_page(atom.feed(entries[:1], BASE, "Queues", None))
    assert last_link is None and [name for name, _, _ in last] == ["alpha"]
    no_link, none = _list_page(atom.feed([], BASE, "Queues", None))
    assert no_link is None and none == []


def test_a_feed_embeds_entries_that_carry_an_xml_declaration() -> None:
    entry = b'<?xml version="1.0" encoding="utf-8"?>\n' + atom.queue_entry("q", QueueProperties(), RUNTIME, BASE, NOW)
    _, items = _list_page(atom.feed([entry], BASE, "Queues", None))
    assert [name for name, _, _ in items] == ["q"]


def test_the_empty_feed_is_what_get_queue_reports_as_missing() -> None:
    entry = QueueDescriptionEntry.deserialize(sdk_element(atom.empty_feed(BASE, now=NOW)))
    assert not entry.content  # get_queue then raises ResourceNotFoundError


def test_the_sdk_reads_the_namespace_info() -> None:
    for body in (atom.namespace_info_entry("sbemulatorns", NOW),
                 atom.namespace_info_entry("sbemulatorns", NOW, base_url=BASE, created_at=CREATED)):
        entry = NamespacePropertiesEntry.deserialize(sdk_element(body))
        props = SdkNamespaceProperties._from_internal_entity(entry.title, entry.content.namespace_properties)
        assert props.name == "sbemulatorns"
        assert props.namespace_type == "Messaging" and props.messaging_sku == "Standard"
        assert props.created_at_utc in (NOW, CREATED) and props.modified_at_utc == props.created_at_utc
        assert props.alias is None and props.messaging_units is None


def test_the_sdk_reads_the_error_body() -> None:
    body = atom.error_body(409, "The messaging entity 'q1' already exists. <&>")
    assert body == (
        b"<Error><Code>409</Code><Detail>The messaging entity 'q1' already exists. &lt;&amp;&gt;</Detail></Error>")
    error = ServiceBusManagementError.deserialize(
        ContentDecodePolicy.deserialize_from_text(body.decode(), "application/xml"))
    assert (error.code, error.detail) == (409, "The messaging entity 'q1' already exists. <&>")


def test_text_xml_cannot_carry_is_replaced_not_emitted() -> None:
    props = QueueProperties(user_metadata="bell\x07 nul\x00 ok")
    sdk, _ = sdk_queue(atom.queue_entry("q", props, RUNTIME, BASE, NOW), "q")
    assert sdk.user_metadata == "bell\ufffd nul\ufffd ok"


# --------------------------------------------------------------------------------------------------
# The whole client, over an in-process requests adapter
# --------------------------------------------------------------------------------------------------


@dataclass
class FakeManagementService:
    """Just enough of an HTTP layer to route the SDK's requests (contract 8.2) to the atom functions."""

    queues: dict[str, QueueProperties] = field(default_factory=dict)
    requests: list[tuple[str, str, Mapping[str, str]]] = field(default_factory=list)

    def runtime(self, name: str) -> EntityRuntime:
        return replace(RUNTIME, counts=replace(RUNTIME.counts, active=len(name)))

    def handle(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> tuple[int, bytes, str]:
        self.requests.append((method, url, headers))
        parts = urlsplit(url)
        path = unquote(parts.path).lstrip("/")
        query = parse_qs(parts.query)
        base = f"{parts.scheme}://{parts.netloc}"
        entry_type = "application/atom+xml;type=entry;charset=utf-8"
        feed_type = "application/atom+xml;type=feed;charset=utf-8"
        try:
            if method == "GET" and path == "$namespaceinfo":
                return 200, atom.namespace_info_entry("sbemulatorns", NOW, base_url=base), entry_type
            if method == "GET" and path == "$Resources/queues":
                skip, top = int(query["$skip"][0]), int(query["$top"][0])
                names = sorted(self.queues)
                entries = [atom.queue_entry(n, self.queues[n], self.runtime(n), base, NOW)
                           for n in names[skip:skip + top]]
                more = skip + top < len(names)
                next_link = f"{base}/$Resources/queues?$skip={skip + top}&$top={top}" if more else None
                return 200, atom.feed(entries, base, "Queues", next_link), feed_type
            if method == "GET":
                if path not in self.queues:
                    return 200, atom.empty_feed(base), feed_type
                return 200, atom.queue_entry(path, self.queues[path], self.runtime(path), base, NOW), entry_type
            if method == "PUT":
                assert headers["Content-Type"] == "application/atom+xml"
                props = QueueProperties.from_json(atom.parse_queue_description(body), path="QueueDescription")
                updating = headers.get("If-Match") == "*"
                if updating and path not in self.queues:
                    return 404, atom.error_body(404, f"queue {path} not found"), "application/xml"
                if not updating and path in self.queues:
                    detail = f"The messaging entity '{path}' already exists."
                    return 409, atom.error_body(409, detail), "application/xml"
                self.queues[path] = props
                entry = atom.queue_entry(path, props, self.runtime(path), base, NOW)
                return (200 if updating else 201), entry, entry_type
            if method == "DELETE":
                self.queues.pop(path, None)
                return 200, b"", "application/xml"
        except SodaliteError as exc:
            return exc.http_status, atom.error_body(exc.http_status, exc.description), "application/xml"
        return 405, atom.error_body(405, "method not allowed"), "application/xml"


class _Adapter(requests.adapters.BaseAdapter):
    def __init__(self, service: FakeManagementService) -> None:
        super().__init__()
        self.service = service

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        body = request.body or b""
        raw = body.encode() if isinstance(body, str) else bytes(body)
        status, payload, content_type = self.service.handle(
            str(request.method), str(request.url), dict(request.headers), raw)
        response = requests.Response()
        response.status_code = status
        response.headers["Content-Type"] = content_type
        response.headers["Content-Length"] = str(len(payload))
        response.raw = urllib3.HTTPResponse(body=io.BytesIO(payload), headers=dict(response.headers),
                                            status=status, preload_content=False)
        response.url = str(request.url)
        response.request = request
        response.encoding = "utf-8"
        return response

    def close(self) -> None:
        pass


@pytest.fixture
def admin() -> tuple[ServiceBusAdministrationClient, FakeManagementService]:
    service = FakeManagementService()
    session = requests.Session()
    session.mount("https://", _Adapter(service))
    client = ServiceBusAdministrationClient.from_connection_string(
        "Endpoint=sb://localhost:5300;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;",
        transport=RequestsTransport(session=session, session_owner=False))
    return client, service


def test_the_sdk_client_end_to_end(admin: tuple[ServiceBusAdministrationClient, FakeManagementService]) -> None:
    client, service = admin
    created = client.create_queue("q1", lock_duration=timedelta(seconds=45), max_delivery_count=5,
                                  forward_to="q2", user_metadata="m")
    assert created.name == "q1" and created.lock_duration == timedelta(seconds=45)
    assert service.queues["q1"].forward_to == "sb://localhost:5300/q2"  # as the SDK sent it
    assert service.queues["q1"].default_message_time_to_live == TIMESPAN_MAX

    got = client.get_queue("q1")
    assert (got.max_delivery_count, got.forward_to, got.user_metadata) == (5, "sb://localhost:5300/q2", "m")
    runtime = client.get_queue_runtime_properties("q1")
    assert (runtime.active_message_count, runtime.total_message_count) == (2, 12)

    # update re-sends everything the SDK read, read-only members and TimeSpan.MaxValue included
    got.max_delivery_count = 7
    client.update_queue(got)
    method, _, headers = service.requests[-1]
    assert method == "PUT" and headers["If-Match"] == "*"
    assert service.queues["q1"] == replace(service.queues["q1"], max_delivery_count=7)
    assert service.queues["q1"].default_message_time_to_live == TIMESPAN_MAX
    assert service.queues["q1"].auto_delete_on_idle == TIMESPAN_MAX
    assert service.queues["q1"].forward_to == "sb://localhost:5300/q2" and service.queues["q1"].max_delivery_count == 7
    assert client.get_queue("q1").max_delivery_count == 7

    with pytest.raises(ResourceExistsError, match="already exists"):
        client.create_queue("q1")
    with pytest.raises(ResourceNotFoundError):
        client.get_queue("missing")
    with pytest.raises(ResourceNotFoundError):
        client.get_queue_runtime_properties("missing")

    for name in ("q2", "q3", "q4", "q5"):
        client.create_queue(name)
    assert [q.name for q in client.list_queues(max_page_size=2)] == ["q1", "q2", "q3", "q4", "q5"]
    skips = [parse_qs(urlsplit(url).query)["$skip"][0] for m, url, _ in service.requests if "$Resources" in url]
    assert skips == ["0", "2", "4"]
    assert [r.active_message_count for r in client.list_queues_runtime_properties()] == [2] * 5

    assert client.get_namespace_properties().name == "sbemulatorns"
    client.delete_queue("q1")
    with pytest.raises(ResourceNotFoundError):
        client.get_queue("q1")


def test_the_sdk_client_sees_a_bad_value_as_an_http_error(
    admin: tuple[ServiceBusAdministrationClient, FakeManagementService],
) -> None:
    client, _ = admin
    with pytest.raises(HttpResponseError, match="LockDuration") as info:
        client.create_queue("bad", lock_duration=timedelta(minutes=10))
    assert info.value.status_code == 400


# --------------------------------------------------------------------------------------------------
# (3) Bad XML and bad values
# --------------------------------------------------------------------------------------------------


def _description(members: str) -> bytes:
    return (
        '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
        '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
        f"{members}</QueueDescription></content></entry>"
    ).encode()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", "empty"),
        (b"   ", "empty"),
        (b"<entry", "not well-formed"),
        (b"<entry><content></entry>", "not well-formed"),
        (b'<?xml version="1.0"?><!DOCTYPE entry [<!ENTITY a "aaaa">]><entry>&a;</entry>', "forbidden"),
        (b"<feed xmlns='http://www.w3.org/2005/Atom'/>", "root element 'feed'"),
        (b"<entry xmlns='http://www.w3.org/2005/Atom'><title>q</title></entry>", "entry: has no content"),
        (b"<entry><content/><content/></entry>", "more than one content"),
        (b"<entry><content><TopicDescription/></content></entry>", "expected a QueueDescription, got TopicDescription"),
        (b"<entry><content/></entry>", "got nothing"),
        (_description("<LockDuration>PT45</LockDuration>"), "QueueDescription.LockDuration"),
        (_description("<LockDuration>P1Y</LockDuration>"), "QueueDescription.LockDuration"),
        (_description("<DefaultMessageTimeToLive>P99999999D</DefaultMessageTimeToLive>"),
         "QueueDescription.DefaultMessageTimeToLive"),
        (_description("<LockDuration></LockDuration>"), "QueueDescription.LockDuration: must not be empty"),
        (_description("<MaxDeliveryCount>five</MaxDeliveryCount>"), "QueueDescription.MaxDeliveryCount"),
        (_description("<MaxSizeInMegabytes>1.5</MaxSizeInMegabytes>"), "QueueDescription.MaxSizeInMegabytes"),
        (_description("<MaxSizeInMegabytes>" + "9" * 30 + "</MaxSizeInMegabytes>"),
         "QueueDescription.MaxSizeInMegabytes"),
        (_description("<RequiresSession>yes</RequiresSession>"), "QueueDescription.RequiresSession"),
        (_description("<EnablePartitioning/>"), "QueueDescription.EnablePartitioning"),
        (_description("<Status> </Status>"), "QueueDescription.Status"),
        (_description("<ForwardTo>sb://localhost:5300/</ForwardTo>"), "QueueDescription.ForwardTo"),
        (_description("<ForwardTo>sb://[::1/q</ForwardTo>"), "QueueDescription.ForwardTo"),
        (_description("<LockDuration><Value>PT1M</Value></LockDuration>"), "QueueDescription.LockDuration"),
        (_description("<MaxDeliveryCount>1</MaxDeliveryCount><MaxDeliveryCount>2</MaxDeliveryCount>"),
         "QueueDescription.MaxDeliveryCount: appears more than once"),
    ],
)
def test_bad_xml_and_bad_values_raise_argument_error_naming_the_element(body: bytes, expected: str) -> None:
    with pytest.raises(ArgumentError, match=re.escape(expected)):
        atom.parse_queue_description(body)


def test_out_of_range_values_are_left_to_from_json_which_names_the_field() -> None:
    parsed = atom.parse_queue_description(_description("<LockDuration>PT10M</LockDuration>"))
    with pytest.raises(ConfigurationError, match=r"^QueueDescription\.LockDuration: must be between"):
        QueueProperties.from_json(parsed, path="QueueDescription")
    parsed = atom.parse_queue_description(_description("<Status>Sleeping</Status>"))
    with pytest.raises(ConfigurationError, match=r"^QueueDescription\.Status"):
        QueueProperties.from_json(parsed, path="QueueDescription")


# --------------------------------------------------------------------------------------------------
# (4) Round trip
# --------------------------------------------------------------------------------------------------


def _round_trip(props: QueueProperties) -> QueueProperties:
    return QueueProperties.from_json(atom.parse_queue_description(atom.queue_entry("q", props, RUNTIME, BASE, NOW)))


def test_parsing_an_entry_gives_back_the_properties() -> None:
    assert _round_trip(EVERYTHING_SET) == EVERYTHING_SET
    assert _round_trip(QueueProperties()) == QueueProperties()


_NAMES = st.sampled_from([None, "q2", "a/b", "x.y-z_1", "Orders"])
_METADATA = st.none() | st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cn")), min_size=1, max_size=40
).filter(str.strip)


@st.composite
def queue_properties(draw: st.DrawFn) -> QueueProperties:
    forever = st.just(TIMESPAN_MAX)
    return QueueProperties(
        lock_duration=draw(st.timedeltas(timedelta(seconds=5), timedelta(minutes=5))),
        max_size_in_megabytes=draw(st.integers(1, 2**31 - 1)),
        requires_duplicate_detection=draw(st.booleans()),
        requires_session=draw(st.booleans()),
        default_message_time_to_live=draw(forever | st.timedeltas(timedelta(seconds=1), timedelta(days=10**6))),
        dead_lettering_on_message_expiration=draw(st.booleans()),
        duplicate_detection_history_time_window=draw(st.timedeltas(timedelta(seconds=20), timedelta(days=7))),
        max_delivery_count=draw(st.integers(1, 2**31 - 1)),
        enable_batched_operations=draw(st.booleans()),
        auto_delete_on_idle=draw(forever | st.timedeltas(timedelta(minutes=5), timedelta(days=10**6))),
        enable_partitioning=draw(st.booleans()),
        enable_express=draw(st.booleans()),
        forward_to=draw(_NAMES),
        forward_dead_lettered_messages_to=draw(_NAMES),
        max_message_size_in_kilobytes=draw(st.none() | st.integers(1, 102_400)),
        status=draw(st.sampled_from(ENTITY_STATUSES)),
        user_metadata=draw(_METADATA),
        support_ordering=draw(st.booleans()),
    )


@settings(max_examples=150, deadline=None)
@given(queue_properties())
def test_any_properties_survive_the_round_trip(props: QueueProperties) -> None:
    assert _round_trip(props) == props


@settings(max_examples=40, deadline=None)
@given(queue_properties())
def test_the_sdk_reads_any_properties_as_written(props: QueueProperties) -> None:
    sdk, _ = sdk_queue(atom.queue_entry("q", props, RUNTIME, BASE, NOW), "q")
    assert sdk.lock_duration == props.lock_duration
    assert near(sdk.default_message_time_to_live, props.default_message_time_to_live)
    assert near(sdk.auto_delete_on_idle, props.auto_delete_on_idle)
    assert sdk.max_delivery_count == props.max_delivery_count
    assert sdk.user_metadata == props.user_metadata
    assert sdk.status == props.status
    assert sdk.max_message_size_in_kilobytes == props.max_message_size_in_kilobytes


# --------------------------------------------------------------------------------------------------
# (5) Topics, subscriptions and rules: the SDK reads what we write, we read what the SDK writes
# --------------------------------------------------------------------------------------------------

TOPIC_SET = TopicProperties(
    default_message_time_to_live=timedelta(hours=3),
    max_size_in_megabytes=4096,
    requires_duplicate_detection=True,
    duplicate_detection_history_time_window=timedelta(minutes=2),
    enable_batched_operations=False,
    auto_delete_on_idle=timedelta(hours=5),
    enable_partitioning=True,
    enable_express=True,
    support_ordering=False,
    max_message_size_in_kilobytes=2048,
    status="SendDisabled",
    user_metadata="topic <meta> & more",
)

TOPIC_RUNTIME = EntityRuntime(
    counts=EntityCounts(scheduled=3, size_in_bytes=9876), subscription_count=4, sql_filter_count=5,
    correlation_filter_count=2, created_at=CREATED, updated_at=UPDATED, accessed_at=ACCESSED)

SUBSCRIPTION_SET = SubscriptionProperties(
    lock_duration=timedelta(seconds=45),
    requires_session=True,
    default_message_time_to_live=timedelta(days=2),
    dead_lettering_on_message_expiration=True,
    dead_lettering_on_filter_evaluation_exceptions=False,
    max_delivery_count=4,
    enable_batched_operations=False,
    forward_to="q2",
    user_metadata="sub",
    forward_dead_lettered_messages_to="q3",
    auto_delete_on_idle=timedelta(hours=2),
    status="ReceiveDisabled",
)

RULES = [
    RuleDescription("sql", SqlFilter("color = @c AND n > @n AND big = @big AND ok = @ok AND r < @r",
                                     {"@c": "red", "@n": 5, "@big": 2**40, "@ok": True, "@r": 1.5}),
                    SqlRuleAction("SET seen = 1")),
    RuleDescription("sql-plain", SqlFilter("1=1")),
    RuleDescription("corr", CorrelationFilter(
        correlation_id="cid", message_id="mid", to="to", reply_to="rt", label="subject", session_id="sid",
        reply_to_session_id="rsid", content_type="text/plain",
        properties={"k": "v <&>", "n": -7, "big": -(2**40), "flag": False, "f": 2.25})),
    RuleDescription("corr-one", CorrelationFilter(label="only")),
    RuleDescription("always", TrueFilter()),
    RuleDescription("never", FalseFilter(), SqlRuleAction("SET x = 'y'")),
]


def sdk_topic(body: bytes, name: str) -> tuple[SdkTopicProperties, SdkTopicRuntimeProperties]:
    """The get_topic / get_topic_runtime_properties path."""
    entry = TopicDescriptionEntry.deserialize(sdk_element(body))
    assert entry.content is not None
    description = entry.content.topic_description
    return (SdkTopicProperties._from_internal_entity(name, description),
            SdkTopicRuntimeProperties._from_internal_entity(name, description))


def sdk_subscription(body: bytes, name: str) -> tuple[SdkSubscriptionProperties, SdkSubscriptionRuntimeProperties]:
    entry = SubscriptionDescriptionEntry.deserialize(sdk_element(body))
    assert entry.content is not None
    description = entry.content.subscription_description
    return (SdkSubscriptionProperties._from_internal_entity(name, description),
            SdkSubscriptionRuntimeProperties._from_internal_entity(name, description))


def sdk_rule(body: bytes, name: str) -> SdkRuleProperties:
    """The get_rule path, key values included (they are read from the raw element)."""
    element = sdk_element(body)
    entry = RuleDescriptionEntry.deserialize(element)
    assert entry.content is not None
    rule = SdkRuleProperties._from_internal_entity(name, entry.content.rule_description)
    deserialize_rule_key_values(element, rule)
    return rule


def _sdk_request(body_class: Any, content_class: Any, member: str, internal: Any) -> bytes:
    """A create/update request body as the SDK's generated serializer writes it."""
    element = body_class(content=content_class(**{member: internal})).serialize(is_xml=True)
    return bytes(ET.tostring(element, encoding="utf-8"))


def test_the_sdk_reads_every_topic_property_and_runtime_figure() -> None:
    sdk, runtime = sdk_topic(atom.entity_entry("orders", "orders", TOPIC_SET, TOPIC_RUNTIME, BASE, NOW), "orders")
    p = TOPIC_SET
    assert sdk.name == "orders"
    assert sdk.default_message_time_to_live == p.default_message_time_to_live
    assert sdk.max_size_in_megabytes == 4096
    assert sdk.requires_duplicate_detection is True
    assert sdk.duplicate_detection_history_time_window == p.duplicate_detection_history_time_window
    assert sdk.enable_batched_operations is False
    assert sdk.auto_delete_on_idle == p.auto_delete_on_idle
    assert (sdk.enable_partitioning, sdk.enable_express, sdk.support_ordering) == (True, True, False)
    assert sdk.max_message_size_in_kilobytes == 2048
    assert (sdk.status, sdk.user_metadata) == ("SendDisabled", "topic <meta> & more")
    assert sdk.availability_status == "Available" and sdk.filtering_messages_before_publishing is False
    assert sdk.authorization_rules is None

    assert runtime.name == "orders"
    assert (runtime.scheduled_message_count, runtime.size_in_bytes, runtime.subscription_count) == (3, 9876, 4)
    assert (runtime.sql_filter_count, runtime.correlation_filter_count) == (5, 2)
    assert (runtime.created_at_utc, runtime.updated_at_utc, runtime.accessed_at_utc) == (CREATED, UPDATED, ACCESSED)


def test_a_topic_entry_has_datacontract_order() -> None:
    root = ET.fromstring(atom.entity_entry("t", "t", TOPIC_SET, TOPIC_RUNTIME, BASE, NOW))
    [description] = list(root.find("{http://www.w3.org/2005/Atom}content") or [])
    assert [child.tag.removeprefix(CONNECT) for child in description] == [
        "DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
        "DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
        "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "CreatedAt",
        "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount", "SqlFilterCount",
        "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
        "EnableSubscriptionPartitioning", "EnableExpress", "UserMetadata", "MaxMessageSizeInKilobytes",
    ]


def test_the_sdk_reads_every_subscription_property_and_count() -> None:
    runtime = replace(RUNTIME, counts=replace(RUNTIME.counts, size_in_bytes=0))
    body = atom.entity_entry("t1/subscriptions/s1", "s1", SUBSCRIPTION_SET, runtime, BASE, NOW)
    assert ET.fromstring(body).findtext("{http://www.w3.org/2005/Atom}id") == (
        f"{BASE}/t1/subscriptions/s1?api-version=2021-05")
    sdk, sdk_runtime = sdk_subscription(body, "s1")
    p = SUBSCRIPTION_SET
    assert sdk.name == "s1"
    assert sdk.lock_duration == p.lock_duration
    assert sdk.requires_session is True
    assert sdk.default_message_time_to_live == p.default_message_time_to_live
    assert sdk.dead_lettering_on_message_expiration is True
    assert sdk.dead_lettering_on_filter_evaluation_exceptions is False
    assert (sdk.max_delivery_count, sdk.enable_batched_operations) == (4, False)
    assert sdk.forward_to == "q2"  # in the form it was given
    assert sdk.forward_dead_lettered_messages_to == "q3"
    assert (sdk.user_metadata, sdk.status, sdk.availability_status) == ("sub", "ReceiveDisabled", "Available")
    assert sdk.auto_delete_on_idle == p.auto_delete_on_idle

    assert sdk_runtime.name == "s1"
    assert (sdk_runtime.active_message_count, sdk_runtime.dead_letter_message_count) == (5, 3)
    assert (sdk_runtime.transfer_message_count, sdk_runtime.transfer_dead_letter_message_count) == (1, 4)
    assert sdk_runtime.total_message_count == 15
    assert sdk_runtime.created_at_utc == CREATED and sdk_runtime.accessed_at_utc == ACCESSED

    defaults, _ = sdk_subscription(atom.entity_entry("t/subscriptions/s", "s", SubscriptionProperties(), runtime,
                                                     BASE, NOW), "s")
    assert defaults.lock_duration == timedelta(minutes=1) and defaults.max_delivery_count == 10
    assert near(defaults.default_message_time_to_live, TIMESPAN_MAX) and near(defaults.auto_delete_on_idle,
                                                                               TIMESPAN_MAX)
    assert defaults.dead_lettering_on_filter_evaluation_exceptions is True
    assert defaults.forward_to is None and defaults.user_metadata is None


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_the_sdk_reads_every_kind_of_rule(rule: RuleDescription) -> None:
    runtime = EntityRuntime(created_at=CREATED)
    sdk = sdk_rule(atom.entity_entry(f"t/subscriptions/s/rules/{rule.name}", rule.name, rule, runtime, BASE, NOW),
                   rule.name)
    assert sdk.name == rule.name and sdk.created_at_utc == CREATED
    flt = rule.filter
    if isinstance(flt, SqlFilter):
        assert type(sdk.filter) is SdkSqlRuleFilter  # not one of its True/False subclasses
        assert sdk.filter.sql_expression == flt.expression
        assert dict(sdk.filter.parameters or {}) == flt.parameters
    elif isinstance(flt, CorrelationFilter):
        assert isinstance(sdk.filter, SdkCorrelationRuleFilter)
        for attr, _ in CORRELATION_FIELDS:
            assert getattr(sdk.filter, attr) == getattr(flt, attr)
        assert dict(sdk.filter.properties or {}) == flt.properties
        assert {k: type(v) for k, v in (sdk.filter.properties or {}).items()} == {
            k: type(v) for k, v in flt.properties.items()}
    elif isinstance(flt, TrueFilter):
        assert isinstance(sdk.filter, SdkTrueRuleFilter)
    else:
        assert isinstance(sdk.filter, SdkFalseRuleFilter)
    if rule.action is None:
        assert sdk.action is None
    else:
        assert isinstance(sdk.action, SdkSqlRuleAction) and sdk.action.sql_expression == rule.action.expression


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_every_kind_of_rule_survives_both_round_trips(rule: RuleDescription) -> None:
    runtime = EntityRuntime(created_at=CREATED)
    entry = atom.entity_entry(f"t/subscriptions/s/rules/{rule.name}", rule.name, rule, runtime, BASE, NOW)
    parsed = atom.parse_description(entry)
    assert parsed.kind == "RuleDescription" and parsed.description() == rule
    assert parsed.runtime is not None and parsed.runtime.created_at == CREATED
    assert atom.parse_description(atom.request_entry(rule)).description() == rule

    # what the SDK's update_rule sends back after reading the rule (its serializer, its key values)
    sdk = sdk_rule(entry, rule.name)
    element = CreateRuleBody(content=CreateRuleBodyContent(rule_description=sdk._to_internal_entity())).serialize(
        is_xml=True)
    serialize_rule_key_values(element, sdk)
    echoed = atom.parse_description(ET.tostring(element, encoding="utf-8"))
    assert echoed.description(rule.name) == rule


def test_the_sdk_create_rule_body_with_every_value_type() -> None:
    sdk = SdkRuleProperties("typed", filter=SdkCorrelationRuleFilter(properties={
        "s": "text", "i": 5, "l": 2**40, "b": True, "d": 0.5,
        "t": datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "span": timedelta(minutes=90)}),
        action=None, created_at_utc=None)
    element = CreateRuleBody(content=CreateRuleBodyContent(rule_description=sdk._to_internal_entity())).serialize(
        is_xml=True)
    serialize_rule_key_values(element, sdk)
    parsed = atom.parse_description(ET.tostring(element, encoding="utf-8"))
    assert parsed.properties["Properties"]["CorrelationFilter"]["Properties"] == {
        "s": "text", "i": 5, "l": 2**40, "b": True, "d": 0.5,
        "t": datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "span": timedelta(minutes=90)}
    # The model's filters hold every type the SDK sends, date-times and durations included (issue 13.7).
    rule = parsed.description("typed")
    assert isinstance(rule, RuleDescription) and isinstance(rule.filter, CorrelationFilter)
    assert rule.filter.properties["t"] == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert rule.filter.properties["span"] == timedelta(minutes=90)
    assert RuleDescription.from_json(rule.to_json()) == rule  # as stored and read back


def _as_the_sdk_sends(sub: SubscriptionProperties) -> SubscriptionProperties:
    def full(value: str | None) -> str | None:
        return value if value is None or "://" in value else f"sb://localhost:5300/{value}"

    return replace(sub, forward_to=full(sub.forward_to),
                   forward_dead_lettered_messages_to=full(sub.forward_dead_lettered_messages_to))


def test_topics_and_subscriptions_survive_both_round_trips() -> None:
    for props in (TOPIC_SET, TopicProperties()):
        parsed = atom.parse_description(atom.entity_entry("t", "t", props, TOPIC_RUNTIME, BASE, NOW))
        assert parsed.kind == "TopicDescription" and parsed.description() == props
        assert parsed.runtime == TOPIC_RUNTIME
        assert atom.parse_description(atom.request_entry(props)).description() == props
        sdk, _ = sdk_topic(atom.entity_entry("t", "t", props, TOPIC_RUNTIME, BASE, NOW), "t")
        body = _sdk_request(CreateTopicBody, CreateTopicBodyContent, "topic_description", sdk._to_internal_entity())
        assert atom.parse_description(body).description() == props  # update_topic's echo
    for sub in (SUBSCRIPTION_SET, SubscriptionProperties()):
        entry = atom.entity_entry("t/subscriptions/s", "s", sub, RUNTIME, BASE, NOW)
        parsed = atom.parse_description(entry)
        assert parsed.kind == "SubscriptionDescription" and parsed.description() == sub
        assert parsed.runtime == replace(RUNTIME, counts=replace(RUNTIME.counts, size_in_bytes=0))  # no SizeInBytes
        assert parsed.default_rule is None
        sdk_sub, _ = sdk_subscription(entry, "s")
        body = _sdk_request(CreateSubscriptionBody, CreateSubscriptionBodyContent, "subscription_description",
                            sdk_sub._to_internal_entity("localhost:5300"))
        # update_subscription's echo: the SDK sends bare forwarding targets as sb://<namespace>/<name>
        assert atom.parse_description(body).description() == _as_the_sdk_sends(sub)


def test_a_subscription_request_carries_its_default_rule() -> None:
    rule = RULES[0]
    parsed = atom.parse_description(atom.request_entry(SUBSCRIPTION_SET, default_rule=rule))
    assert parsed.description() == SUBSCRIPTION_SET
    assert parsed.default_rule_description() == rule
    unnamed = replace(rule, name="$Default")
    body = atom.request_entry(SUBSCRIPTION_SET, default_rule=unnamed).replace(b"<Name>$Default</Name>", b"")
    assert atom.parse_description(body).default_rule_description() == unnamed  # named $Default when unnamed
    assert atom.parse_description(atom.request_entry(SUBSCRIPTION_SET)).default_rule_description() is None


def test_the_sdk_lists_topics_subscriptions_and_rules_with_a_next_link() -> None:
    next_href = f"{BASE}/$Resources/topics?$skip=2&$top=2"
    topics = [atom.entity_entry(n, n, TOPIC_SET, TOPIC_RUNTIME, BASE, NOW) for n in ("t1", "t2")]
    next_link, items = extract_data_template(
        TopicDescriptionFeed, lambda e: SdkTopicProperties._from_internal_entity(e.title, e.content.topic_description),
        sdk_element(atom.feed(topics, BASE, "Topics", next_href, path="$Resources/topics", now=NOW)))
    assert next_link == next_href and [t.name for t in items] == ["t1", "t2"]

    subscriptions = [atom.entity_entry(f"t/subscriptions/{n}", n, SUBSCRIPTION_SET, RUNTIME, BASE, NOW)
                     for n in ("a", "b")]
    next_link, subs = extract_data_template(
        SubscriptionDescriptionFeed,
        lambda e: SdkSubscriptionRuntimeProperties._from_internal_entity(e.title, e.content.subscription_description),
        sdk_element(atom.feed(subscriptions, BASE, "Subscriptions", None, path="t/subscriptions")))
    assert next_link is None and [(s.name, s.active_message_count) for s in subs] == [("a", 5), ("b", 5)]

    rule_entries = [atom.entity_entry(f"t/subscriptions/s/rules/{r.name}", r.name, r, EntityRuntime(), BASE, NOW)
                    for r in RULES]

    def convert(element: Any, entry: Any) -> SdkRuleProperties:
        rule = SdkRuleProperties._from_internal_entity(entry.title, entry.content.rule_description)
        deserialize_rule_key_values(element, rule)
        return rule

    rules_next = f"{BASE}/t/subscriptions/s/rules?$skip=6&$top=6"
    next_link, rules = extract_rule_data_template(
        RuleDescriptionFeed, convert, sdk_element(atom.feed(rule_entries, BASE, "Rules", rules_next,
                                                            path="t/subscriptions/s/rules")))
    listed = list(rules)
    assert next_link == rules_next and [r.name for r in listed] == [r.name for r in RULES]
    assert isinstance(listed[2].filter, SdkCorrelationRuleFilter)
    assert dict(listed[2].filter.properties or {}) == {"k": "v <&>", "n": -7, "big": -(2**40), "flag": False,
                                                       "f": 2.25}


def _rule_body(inner: str) -> bytes:
    return (f'<RuleDescription xmlns="{atom.CONNECT_NS}" xmlns:i="{atom.XSI_NS}">{inner}</RuleDescription>').encode()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (_rule_body('<Filter i:type="BogusFilter"/><Name>r</Name>'), "RuleDescription.Filter: xsi:type"),
        (_rule_body('<Filter i:type="SqlFilter"/><Name>r</Name>'), "RuleDescription.Filter.SqlExpression: required"),
        (_rule_body('<Filter i:type="TrueFilter"/><Action i:type="Bogus"/>'), "RuleDescription.Action: xsi:type"),
        (_rule_body('<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters>'
                    '<KeyValueOfstringanyType><Key>@p</Key><Value i:type="d6p1:int" '
                    f'xmlns:d6p1="{atom.XSD_NS}">five</Value></KeyValueOfstringanyType></Parameters></Filter>'),
         "RuleDescription.Filter.Parameters['@p']: must be an integer"),
        (_rule_body('<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>k</Key>'
                    f'<Value i:type="d6p1:base64Binary" xmlns:d6p1="{atom.XSD_NS}">AA==</Value>'
                    "</KeyValueOfstringanyType></Properties></Filter>"),
         "RuleDescription.Filter.Properties['k']: unsupported value type 'base64Binary'"),
        (_rule_body('<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>k</Key>'
                    "</KeyValueOfstringanyType></Properties></Filter>"),
         "RuleDescription.Filter.Properties[0]: needs a Key and a Value"),
        (_rule_body('<Filter i:type="TrueFilter"/><Action i:type="SqlRuleAction"><SqlExpression>SET a = @a'
                    "</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@a</Key><Value i:type=\"d6p1:int\" "
                    f'xmlns:d6p1="{atom.XSD_NS}">five</Value></KeyValueOfstringanyType></Parameters></Action>'),
         "RuleDescription.Action.Parameters['@a']: must be an integer"),
        (b"<TopicDescription><MaxSizeInMegabytes>big</MaxSizeInMegabytes></TopicDescription>",
         "TopicDescription.MaxSizeInMegabytes: must be an integer"),
        (b"<SubscriptionDescription><DefaultRuleDescription><Filter i:type='Nope' "
         b"xmlns:i='http://www.w3.org/2001/XMLSchema-instance'/></DefaultRuleDescription></SubscriptionDescription>",
         "SubscriptionDescription.DefaultRuleDescription.Filter: xsi:type"),
    ],
)
def test_bad_rules_and_values_raise_argument_error_naming_the_element(body: bytes, expected: str) -> None:
    with pytest.raises(ArgumentError, match=re.escape(expected)):
        atom.parse_description(body)


def test_a_rule_without_a_name_takes_the_request_paths() -> None:
    parsed = atom.parse_description(_rule_body('<Filter i:type="FalseFilter"/>'))
    with pytest.raises(ArgumentError, match="needs a name"):
        parsed.description()
    assert parsed.description("from-path") == RuleDescription("from-path", FalseFilter())
    with pytest.raises(ConfigurationError, match="SqlFilter"):
        atom.parse_description(_rule_body(
            '<Filter i:type="SqlFilter"><SqlExpression> </SqlExpression></Filter>')).description("r")
