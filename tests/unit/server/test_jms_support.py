"""The pure parts of JMS support: a delayed message's time, selectors, topic consumers' subscription names."""

from __future__ import annotations

from typing import Any

import pytest

from sodalite.amqp.codec import encode
from sodalite.amqp.performatives import Source
from sodalite.amqp.types import Array, Described, Long, Symbol, Timestamp, ULong
from sodalite.errors import FilterSyntaxError
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.server import selectors, topic_consumers, wire

SELECTOR_CODE = ULong(0x0000468C00000004)
T0 = 1_700_000_000_000


def section(code: int, value: Any) -> bytes:
    return encode(Described(ULong(code), value))


def msg_annotations(entries: dict[Any, Any]) -> bytes:
    return section(0x72, entries)


def properties(message_id: str, subject: str | None = None) -> bytes:
    return section(0x73, [message_id, None, None, subject])


def app_properties(values: dict[str, Any]) -> bytes:
    return section(0x74, values)


def data(body: bytes) -> bytes:
    return section(0x75, body)


def parse_one(payload: bytes) -> MessageDraft:
    [draft] = wire.parse_transfer(payload, 0, 256 * 1024)
    return draft


def record_from(payload: bytes) -> MessageRecord:
    d = parse_one(payload)
    return MessageRecord(7, T0, d.message_id, d.session_id, d.partition_key, d.time_to_live, None,
                         d.scheduled_enqueue_time, 0, MessageState.ACTIVE, d.durable, d.priority,
                         d.annotations, d.annotation_count, d.tail)


def test_a_jms_delivery_time_schedules_the_message_and_a_service_bus_one_wins() -> None:
    jms = parse_one(msg_annotations({Symbol("x-opt-delivery-time"): Long(T0 + 5000)}) + data(b"x"))
    assert jms.scheduled_enqueue_time == T0 + 5000
    both = parse_one(msg_annotations({Symbol("x-opt-delivery-time"): Long(T0 + 5000),
                                      Symbol("x-opt-scheduled-enqueue-time"): Timestamp(T0 + 9000)}) + data(b"x"))
    assert both.scheduled_enqueue_time == T0 + 9000


def test_the_selector_is_read_from_the_source_filter_in_either_form() -> None:
    described = Source("q", filter={Symbol("jms-selector"): Described(SELECTOR_CODE, "color = 'red'")})
    assert selectors.selector_of(described) == "color = 'red'"
    plain = Source("q", filter={Symbol("jms-selector"): "n > 1"})
    assert selectors.selector_of(plain) == "n > 1"
    assert selectors.selector_of(Source("q")) is None
    assert selectors.selector_of(Source("q", filter={Symbol("jms-selector"): "  "})) is None


def test_a_selector_selects_stored_messages_as_a_sql_filter_does() -> None:
    red = record_from(properties("m-1", subject="greeting") + app_properties({"color": "red", "n": 3}) + data(b"x"))
    blue = record_from(properties("m-2") + app_properties({"color": "blue", "n": 1}) + data(b"x"))
    selector = selectors.Selector("color = 'red' AND n > 2")
    assert selector.matches(red) and not selector.matches(blue)
    assert selectors.Selector("sys.MessageId = 'm-2'").matches(blue)
    assert selectors.Selector("sys.Label = 'greeting'").matches(red)
    assert not selectors.Selector("n / 0 = 1").matches(red)  # an evaluation error selects nothing
    with pytest.raises(FilterSyntaxError):
        selectors.Selector("color = ")


def _topic_source(*capabilities: str, durable: bool = False) -> Source:
    return Source("news", durable=2 if durable else 0, expiry_policy=Symbol("never" if durable else "link-detach"),
                  capabilities=Array("symbol", tuple(Symbol(c) for c in capabilities)))


def test_subscription_names_by_kind_of_jms_subscription() -> None:
    assert topic_consumers.subscription_name("orders", _topic_source("topic", durable=True)) == ("orders", True)
    assert topic_consumers.subscription_name("orders|global", _topic_source("topic", "shared", "global",
                                                                             durable=True)) == ("orders", True)
    assert topic_consumers.subscription_name("audit|volatile1", _topic_source("topic", "shared")) == (
        "jms-volatile-audit", False)
    name, durable = topic_consumers.subscription_name("qpid-jms:receiver:ID:1:2:3", _topic_source("topic"))
    assert name.startswith("jms-volatile-") and len(name) <= 50 and not durable
    long_name, _ = topic_consumers.subscription_name("a$b" + "x" * 80, _topic_source("topic", durable=True))
    assert long_name == ("a-b" + "x" * 80)[:50]
