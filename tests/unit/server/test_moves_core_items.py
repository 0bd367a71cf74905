"""What a row becomes in a move's target when the source queue runs on the version-2 core
(server/moves.py ``_core_move_item``): the version-1 path's edits, as replacement bytes for the
store's fenced MoveMessages, plus the copy's new enqueued time and the expiry the target gives."""

from __future__ import annotations

from sodalite.amqp import message as amqp_message
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import LAST_INSTANT_MS
from sodalite.server import wire
from sodalite.server.moves import _core_move_item, moved_draft

NOW = 1_700_000_000_000


def record(ttl: int | None, tail: bytes) -> MessageRecord:
    return MessageRecord(7, NOW - 5_000, "m-7", None, None, ttl, None, None, 3, MessageState.DEFERRED, True, None,
                         b"", 0, tail)


def application_properties(tail: bytes) -> object:
    section = next(s for s in amqp_message.split_sections(tail) if s.code == amqp_message.APPLICATION_PROPERTIES)
    return amqp_message.section_value(tail, section)


def test_a_dead_lettered_row_loses_its_reason_keeps_its_properties_and_gets_new_times() -> None:
    plain = amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, {"color": "red"})
    dead = wire.dead_letter_tail(plain, "Poison", "tested")
    item = _core_move_item(record(60_000, dead), NOW, None)
    assert item.sequence_number == 7 and item.reset_delivery_count
    assert item.tail is not None and application_properties(item.tail) == {"color": "red"}
    assert item.tail == moved_draft(record(60_000, dead)).tail
    assert item.annotations is None  # unchanged: not sent, the row's are kept
    assert (item.enqueued_time, item.expires_at) == (NOW, NOW + 60_000)


def test_an_unchanged_row_sends_no_bytes_and_the_target_default_caps_its_expiry() -> None:
    plain = amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, {"color": "red"})
    item = _core_move_item(record(60_000, plain), NOW, 10_000)
    assert (item.tail, item.annotations) == (None, None)
    assert item.expires_at == NOW + 10_000
    assert _core_move_item(record(None, plain), NOW, 10_000).expires_at == NOW + 10_000
    assert _core_move_item(record(None, plain), NOW, None).expires_at is None
    assert _core_move_item(record(LAST_INSTANT_MS, plain), NOW, None).expires_at == LAST_INSTANT_MS
