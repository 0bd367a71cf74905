"""Service Bus messages on the wire: from a received transfer to drafts, from a record to a delivery.

Inbound, only header, delivery- and message-annotations and properties are decoded;
application-properties, body and footer are sliced verbatim into the record's tail. A client's
delivery-annotations are kept, re-encoded as the first section of the tail (Service Bus delivers
them with the message). Annotations that only the service may set are stripped on input, as the
protocol guide says of ``x-opt-enqueued-time`` ("Ignored on input").

Outbound, the delivery is a fresh header (carrying the delivery count, which the SDK reads raw:
0 on first delivery, sdk-wire-contract.md 4.4), the delivery-annotations (the lock token of a
PeekLock delivery, ``x-opt-lock-token``, in front of the client's), the broker's message
annotations spliced in front of the client's, then the rest of the tail unchanged.
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import AmqpMap, AmqpValue, Decimal32, Decimal64, Decimal128, Int, Symbol
from sodalite.errors import ArgumentError, MessageSizeExceeded
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import PING_CONTENT_TYPE, MessageDraft

SERVICE_OWNED_ANNOTATIONS = frozenset({
    "x-opt-sequence-number", "x-opt-enqueued-time", "x-opt-locked-until", "x-opt-lock-token",
    "x-opt-deadletter-source", "x-opt-enqueue-sequence-number", "x-opt-message-state",
    "x-opt-partition-id",
})
SCHEDULED_ENQUEUE_TIME = "x-opt-scheduled-enqueue-time"
# A JMS message with a delivery delay (Apache Qpid JMS: milliseconds since the epoch, a long) is a
# scheduled message, as Service Bus treats it.
JMS_DELIVERY_TIME = "x-opt-delivery-time"
PARTITION_KEY = "x-opt-partition-key"

_SEQUENCE_NUMBER = b"x-opt-sequence-number"
_ENQUEUED_TIME = b"x-opt-enqueued-time"
_LOCKED_UNTIL = b"x-opt-locked-until"
_MESSAGE_STATE = "x-opt-message-state"
_LOCK_TOKEN = b"x-opt-lock-token"
_DELIVERY_ANNOTATIONS_PREFIX = b"\x00\x53\x71"  # how the tail of a record with them begins
_UBYTE_MAX = 0xFF
_UINT_MAX = 0xFFFF_FFFF
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def message_id_text(value: AmqpValue) -> str | None:
    """Service Bus message ids are strings; other AMQP id types are rendered canonically."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _ranged(value: AmqpValue, high: int, what: str, low: int = 0) -> int | None:
    """An integer field as an int; None if it is absent or not an integer.

    A value outside the field's AMQP range (a long where a uint belongs) is refused: it could be
    neither written back on delivery nor kept by a store, and would fail everyone's group commit.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not low <= value <= high:
        raise ArgumentError(f"{what} {value} is out of range")
    return int(value)


def parse_transfer(payload: bytes, message_format: int, max_message_size: int) -> list[MessageDraft]:
    """Drafts for every message in a transfer: one, or each inner message of a batch."""
    try:
        if message_format == amqp_message.BATCH_MESSAGE_FORMAT:
            envelope = amqp_message.split_sections(payload)
            inner = [amqp_message.binary_value(payload, s) for s in envelope if s.code == amqp_message.DATA]
            if not inner:
                raise ArgumentError("a batch transfer holds no messages")
            return [parse_message(m, max_message_size) for m in inner]
        return [parse_message(payload, max_message_size)]
    except DecodeError as exc:
        raise ArgumentError(f"the message is not valid AMQP: {exc.description}") from None


def parse_message(payload: bytes, max_message_size: int) -> MessageDraft:
    if len(payload) > max_message_size:
        raise MessageSizeExceeded(
            f"the message is {len(payload)} bytes; the entity allows {max_message_size}")
    sections = amqp_message.split_sections(payload)
    durable: bool | None = None
    priority: int | None = None
    ttl: int | None = None
    message_id: str | None = None
    session_id: str | None = None
    annotations = b""
    annotation_count = 0
    scheduled: int | None = None
    partition_key: str | None = None
    delivery_annotations: AmqpMap = {}
    tail: list[bytes] = []
    ping = False
    for s in sections:
        code = s.code
        if code == amqp_message.HEADER:
            fields = amqp_message.section_value(payload, s)
            if not isinstance(fields, list):
                raise ArgumentError("the message header is not a list")
            fields = fields + [None] * (5 - len(fields))
            durable = fields[0] if isinstance(fields[0], bool) else None
            priority = _ranged(fields[1], _UBYTE_MAX, "header priority")
            ttl = _ranged(fields[2], _UINT_MAX, "header ttl")
        elif code == amqp_message.MESSAGE_ANNOTATIONS:
            value = amqp_message.section_value(payload, s)
            if not isinstance(value, dict):
                raise ArgumentError("message-annotations is not a map")
            kept = {k: v for k, v in value.items() if str(k) not in SERVICE_OWNED_ANNOTATIONS}
            when = kept.get(SCHEDULED_ENQUEUE_TIME)
            scheduled = _ranged(when, _INT64_MAX, SCHEDULED_ENQUEUE_TIME, _INT64_MIN)
            if scheduled is None:
                scheduled = _ranged(kept.get(JMS_DELIVERY_TIME), _INT64_MAX, JMS_DELIVERY_TIME, _INT64_MIN)
            key = kept.get(PARTITION_KEY)
            partition_key = key if isinstance(key, str) else None
            annotations = amqp_message.map_entries(kept)
            annotation_count = len(kept)
        elif code == amqp_message.PROPERTIES:
            fields = amqp_message.section_value(payload, s)
            if not isinstance(fields, list):
                raise ArgumentError("message properties is not a list")
            fields = fields + [None] * (13 - len(fields))
            message_id = message_id_text(fields[0])
            session_id = fields[10] if isinstance(fields[10], str) else None
            ping = fields[6] == PING_CONTENT_TYPE
            tail.append(payload[s.start : s.end])
        elif code == amqp_message.DELIVERY_ANNOTATIONS:
            value = amqp_message.section_value(payload, s)
            if not isinstance(value, dict):
                raise ArgumentError("delivery-annotations is not a map")
            delivery_annotations.update(
                (k, v) for k, v in value.items() if str(k) not in SERVICE_OWNED_ANNOTATIONS)
        else:
            tail.append(payload[s.start : s.end])
    if delivery_annotations:
        tail.insert(0, amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, delivery_annotations))
    return MessageDraft(message_id, session_id, partition_key, ttl, scheduled, durable, priority, annotations,
                        annotation_count, b"".join(tail), ping)


def with_message_id(draft: MessageDraft) -> MessageDraft:
    """The draft itself if it has a MessageId; else the draft given a fresh one.

    Service Bus gives every message a MessageId (the JS SDK refuses to settle a message without
    one). Only the properties section is re-encoded; the body is untouched.
    """
    if draft.message_id is not None:
        return draft
    message_id = uuid.uuid4().hex
    tail = draft.tail
    existing = next((s for s in amqp_message.split_sections(tail) if s.code == amqp_message.PROPERTIES), None)
    if existing is None:
        at = properties_position(tail)
        tail = tail[:at] + amqp_message.encode_section(amqp_message.PROPERTIES, [message_id]) + tail[at:]
    else:
        fields = amqp_message.section_value(tail, existing)
        fields = [message_id, *(fields[1:] if isinstance(fields, list) else [])]
        tail = tail[: existing.start] + amqp_message.encode_section(amqp_message.PROPERTIES, fields) \
            + tail[existing.end :]
    return replace(draft, message_id=message_id, tail=tail)


def received_messages(payload: bytes, message_format: int, max_message_size: int) -> list[MessageDraft]:
    """What a client sent, as the drafts to store: :func:`parse_transfer`, each given a MessageId."""
    return [with_message_id(d) for d in parse_transfer(payload, message_format, max_message_size)]


def _split_delivery_annotations(tail: bytes) -> tuple[AmqpMap, bytes]:
    """The client's delivery-annotations kept at the front of a tail, and the rest of the tail."""
    if not tail.startswith(_DELIVERY_ANNOTATIONS_PREFIX):
        return {}, tail
    end = skip_value(tail, 3)
    value = decode(tail[3:end])
    return (dict(value) if isinstance(value, dict) else {}), tail[end:]


def _lock_token_section_prefix() -> bytes:
    """The delivery-annotations section holding only the lock token, less the token's 16 bytes: the
    same for every PeekLock delivery, so it is encoded once (the encoder puts the uuid last)."""
    section = amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS,
                                          {Symbol(_LOCK_TOKEN.decode()): uuid.UUID(int=0)})
    assert section.endswith(bytes(16))
    return section[:-16]


_LOCK_TOKEN_SECTION_PREFIX = _lock_token_section_prefix()
_EMPTY_DELIVERY_ANNOTATIONS: Final = amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, {})


def _delivery_annotations_section(lock_token: uuid.UUID | None, tail: bytes,
                                  always: bool = False) -> tuple[bytes, bytes]:
    """The delivery-annotations section to send (lock token first) and the tail without the stored one;
    ``always``: an empty section rather than none when there is nothing to put in it."""
    if not tail.startswith(_DELIVERY_ANNOTATIONS_PREFIX):
        if lock_token is None:
            return (_EMPTY_DELIVERY_ANNOTATIONS if always else b""), tail
        return _LOCK_TOKEN_SECTION_PREFIX + lock_token.bytes, tail  # the common case, without the encoder
    client, rest = _split_delivery_annotations(tail)
    values: AmqpMap = {} if lock_token is None else {Symbol(_LOCK_TOKEN.decode()): lock_token}
    values.update(client)
    return amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, values), rest


def properties_position(tail: bytes) -> int:
    """Where a properties section goes in a tail that has none: after the kept delivery-annotations."""
    if not tail.startswith(_DELIVERY_ANNOTATIONS_PREFIX):
        return 0
    return skip_value(tail, 3)


def delivery_payload(record: MessageRecord, locked_until: int | None, with_state: bool = False,
                     lock_token: uuid.UUID | None = None, python_sdk_decimals: bool = False,
                     delivery_annotations: bool = False) -> bytes:
    """The message as a receiver gets it; ``with_state`` adds ``x-opt-message-state`` (peek, deferred).

    ``lock_token`` (a PeekLock delivery) goes into the delivery-annotations as ``x-opt-lock-token``;
    ``delivery_annotations`` sends that section even when it is empty (a ReceiveAndDelete transfer).
    ``python_sdk_decimals`` is for receivers that cannot read decimal128 (:func:`python_sdk_decimals`).
    """
    entries = [
        amqp_message.annotation_entry_long(_SEQUENCE_NUMBER, record.sequence_number),
        amqp_message.annotation_entry_timestamp(_ENQUEUED_TIME, record.enqueued_time),
    ]
    if locked_until is not None:
        entries.append(amqp_message.annotation_entry_timestamp(_LOCKED_UNTIL, locked_until))
    if with_state:
        entries.append(amqp_message.annotation_entry(_MESSAGE_STATE, Int(int(record.state))))
    entries.append(record.annotations)
    delivery_annotations_section, tail = _delivery_annotations_section(lock_token, record.tail, delivery_annotations)
    if python_sdk_decimals:
        tail = decimal_properties_for_python_sdk(tail)
    return b"".join((
        amqp_message.encode_header(record.durable, record.priority, record.time_to_live, None,
                                   record.delivery_count),
        delivery_annotations_section,
        amqp_message.encode_annotations(b"".join(entries), len(entries) - 1 + record.annotation_count),
        tail,
    ))


PYTHON_SDK_PRODUCT = "azsdk-python-servicebus"


def python_sdk_decimals(open_properties: AmqpMap | None) -> bool:
    """Whether the client that opened a connection with these properties reads decimals its own way.

    The Python SDK (7.x, ``product`` in its open frame) encodes a ``decimal.Decimal`` application
    property as AMQP decimal128 (IEEE BID), but its decoder reads the layout Service Bus (.NET) writes:
    the biased exponent as ``(byte0 & 0x7F) << 9 | byte1 >> 1`` and the significand as three 32-bit
    words whose decimal digits it joins, 8 to a word. It fails on every non-zero BID decimal128,
    taking the receive call down with it. Such a receiver is given each decimal in the layout it
    reads (:func:`decimal_properties_for_python_sdk`), so it reads ``Decimal('1.2345')`` as Service
    Bus gives it; every other client gets the decimal128 as it was sent.
    """
    product = {str(k): v for k, v in (open_properties or {}).items()}.get("product")
    return product == PYTHON_SDK_PRODUCT


_DECIMALS = (Decimal32, Decimal64, Decimal128)
_DECIMAL_CODES = (b"\x74", b"\x84", b"\x94")  # their AMQP constructors (the SDK has no decimal32/64 decoder at all)


_WORD: Final = 10**8  # the Python SDK's decoder joins each 32-bit word's digits as 8 decimal places
_PY_BIAS: Final = 6176  # its decimal128 exponent bias


def python_sdk_decimal128(value: decimal.Decimal) -> Decimal128 | str:
    """``value`` as the Python SDK's decoder reads a decimal128 back exactly, or its decimal text
    where no such bytes exist (more than 24 digits, NaN or infinity, or an exponent its reading
    cannot hold: it takes 7 bits of byte 1 and 7 of byte 0 shifted by 9, so exponents -32 to 95).
    A zero keeps its sign and exponent (its digits are none, which the decoder reads as 0)."""
    if not value.is_finite():
        return str(value)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    significand = int("".join(map(str, digits)) or "0")
    biased = exponent + _PY_BIAS
    if significand >= _WORD**3 or not 0 <= biased < 0x3000 or biased & 0x180:
        return str(value)
    words = (significand // _WORD**2, significand // _WORD % _WORD, significand % _WORD)
    head = bytes([(0x80 if sign else 0) | (biased >> 9), (biased & 0x7F) << 1, 0, 0])
    return Decimal128(head + b"".join(word.to_bytes(4, "big") for word in words))


def decimal_properties_for_python_sdk(tail: bytes) -> bytes:
    """The tail with each decimal application property in the layout the Python SDK reads
    (:func:`python_sdk_decimal128`), so it decodes the value that was sent."""
    if not any(code in tail for code in _DECIMAL_CODES):  # no decimal constructor byte anywhere: none
        return tail
    section = next((s for s in amqp_message.split_sections(tail) if s.code == amqp_message.APPLICATION_PROPERTIES),
                   None)
    if section is None or not any(code in tail[section.value_start : section.end] for code in _DECIMAL_CODES):
        return tail
    values = amqp_message.section_value(tail, section)
    if not isinstance(values, dict) or not any(isinstance(v, _DECIMALS) for v in values.values()):
        return tail
    return replace_application_properties(
        tail, {k: python_sdk_decimal128(v.to_decimal()) if isinstance(v, _DECIMALS) else v for k, v in values.items()})


def lock_token_tag(token: uuid.UUID) -> bytes:
    """The delivery tag is the lock token in .NET Guid byte order (sdk-wire-contract.md 4.2)."""
    return token.bytes_le


def tag_lock_token(tag: bytes) -> uuid.UUID | None:
    if len(tag) != 16:
        return None
    return uuid.UUID(bytes_le=tag)



DEAD_LETTER_REASON = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION = "DeadLetterErrorDescription"


def with_application_properties(tail: bytes, updates: Mapping[str, AmqpValue]) -> bytes:
    """The tail with ``updates`` merged into its application-properties."""
    return replace_application_properties(tail, {**application_properties(tail), **updates})


def application_properties(tail: bytes) -> dict[str, AmqpValue]:
    """The tail's application-properties: a map with string keys (AMQP 1.0 part 3, 3.2.5), taken as
    decoded (symbol keys stay symbols, which are strings too)."""
    for s in amqp_message.split_sections(tail):
        if s.code == amqp_message.APPLICATION_PROPERTIES:
            value = amqp_message.section_value(tail, s)
            return dict(value) if isinstance(value, dict) else {}
    return {}


def replace_application_properties(tail: bytes, values: Mapping[str, AmqpValue]) -> bytes:
    """The tail with its application-properties set to ``values``; only that section is re-encoded.

    If the message has no application-properties section, one is placed where AMQP puts it: after
    the properties section, before the body.
    """
    sections = amqp_message.split_sections(tail)
    encoded = amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, dict(values))
    existing = next((s for s in sections if s.code == amqp_message.APPLICATION_PROPERTIES), None)
    if existing is not None:
        return tail[: existing.start] + encoded + tail[existing.end :]
    after = next((s.end for s in sections if s.code == amqp_message.PROPERTIES), properties_position(tail))
    return tail[:after] + encoded + tail[after:]


def dead_lettered(record: MessageRecord, reason: str | None, description: str | None) -> MessageRecord:
    """The record as it enters a dead-letter sub-queue: reason and description set, no expiry.

    Time-to-live is not observed in a dead-letter queue (Service Bus DLQ overview).
    """
    return replace(record, tail=dead_letter_tail(record.tail, reason, description), expires_at=None,
                   state=MessageState.ACTIVE)


def dead_letter_tail(tail: bytes, reason: str | None, description: str | None) -> bytes:
    """The tail with ``DeadLetterReason`` and ``DeadLetterErrorDescription`` set as application
    properties (each only when given; the tail itself when neither is)."""
    updates: dict[str, AmqpValue] = {}
    if reason is not None:
        updates[DEAD_LETTER_REASON] = reason
    if description is not None:
        updates[DEAD_LETTER_DESCRIPTION] = description
    return with_application_properties(tail, updates) if updates else tail


DEAD_LETTER_SOURCE = "x-opt-deadletter-source"


def forwarded_draft(record: MessageRecord, dead_letter_source: str | None = None) -> MessageDraft:
    """A stored message as a draft for another entity, keeping every property (auto-forwarding)."""
    annotations, count = record.annotations, record.annotation_count
    if dead_letter_source is not None:
        annotations += amqp_message.annotation_entry(DEAD_LETTER_SOURCE, dead_letter_source)
        count += 1
    return MessageDraft(record.message_id, record.session_id, record.partition_key, record.time_to_live, None,
                        record.durable, record.priority, annotations, count, record.tail)


def with_dead_letter_source(entries: bytes, count: int, source: str) -> tuple[bytes, int]:
    """Encoded annotation ``entries`` with ``x-opt-deadletter-source`` set to ``source`` (replacing one
    an earlier forwarding wrote)."""
    if count and DEAD_LETTER_SOURCE.encode() in entries:
        current = decode(amqp_message.encode_annotations(entries, count)[3:])
        if isinstance(current, dict):
            kept = {k: v for k, v in current.items() if str(k) != DEAD_LETTER_SOURCE}
            entries, count = amqp_message.map_entries(kept), len(kept)
    return entries + amqp_message.annotation_entry(DEAD_LETTER_SOURCE, source), count + 1


def merged_annotations(record: MessageRecord, updates: Mapping[str, object]) -> tuple[bytes, int]:
    """The record's annotation entries with ``updates`` merged in (keys as symbols), and their count.

    Service-owned annotations cannot be set this way, as on input.
    """
    return merged_annotation_entries(record.annotations, record.annotation_count, updates)


def merged_annotation_entries(entries: bytes, count: int, updates: Mapping[str, object]) -> tuple[bytes, int]:
    """Encoded annotation ``entries`` (``count`` of them) with ``updates`` merged in, as for
    :func:`merged_annotations`. The values are as the core's edits carry them (``object``: any value
    the AMQP encoder takes)."""
    # Decode the stored entries as the map they are (past the section's 00 53 72 descriptor).
    current = decode(amqp_message.encode_annotations(entries, count)[3:]) if count else {}
    merged = dict(current) if isinstance(current, dict) else {}
    for key, value in updates.items():
        if str(key) not in SERVICE_OWNED_ANNOTATIONS:
            merged[Symbol(str(key))] = value
    return amqp_message.map_entries(merged), len(merged)

