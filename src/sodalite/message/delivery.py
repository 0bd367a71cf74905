"""A stored message as a receiver gets it, and the lock token as a delivery tag.

The delivery is a fresh header (carrying the delivery count, which the SDK reads raw: 0 on first
delivery, sdk-wire-contract.md 4.4), the delivery-annotations (the lock token of a PeekLock
delivery, ``x-opt-lock-token``, in front of the client's), the broker's message annotations spliced
in front of the client's, then the rest of the stored tail unchanged. The common case (no client
delivery-annotations) is built from pre-encoded pieces, without the encoder.

The Python SDK (7.x) cannot read a decimal128 as AMQP encodes it; a receiver whose connection says
it is that SDK is given each decimal application property in the layout its decoder reads
(:func:`python_sdk_decimals`).
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Mapping
from typing import Final, Protocol

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, skip_value
from sodalite.amqp.types import AmqpMap, AmqpValue, Decimal32, Decimal64, Decimal128, Int, Symbol
from sodalite.message.edits import DELIVERY_ANNOTATIONS_PREFIX, replace_application_properties
from sodalite.message.names import ENQUEUED_TIME, LOCK_TOKEN, LOCKED_UNTIL, MESSAGE_STATE, SEQUENCE_NUMBER


class Stored(Protocol):
    """The parts of a stored message a delivery is built from (the model's ``MessageRecord``)."""

    @property
    def sequence_number(self) -> int: ...
    @property
    def enqueued_time(self) -> int: ...
    @property
    def delivery_count(self) -> int: ...
    @property
    def state(self) -> int: ...
    @property
    def durable(self) -> bool | None: ...
    @property
    def priority(self) -> int | None: ...
    @property
    def time_to_live(self) -> int | None: ...
    @property
    def annotations(self) -> bytes: ...
    @property
    def annotation_count(self) -> int: ...
    @property
    def tail(self) -> bytes: ...


_SEQUENCE_NUMBER: Final = SEQUENCE_NUMBER.encode()
_ENQUEUED_TIME: Final = ENQUEUED_TIME.encode()
_LOCKED_UNTIL: Final = LOCKED_UNTIL.encode()


def _split_delivery_annotations(tail: bytes) -> tuple[AmqpMap, bytes]:
    """The client's delivery-annotations kept at the front of a tail, and the rest of the tail."""
    if not tail.startswith(DELIVERY_ANNOTATIONS_PREFIX):
        return {}, tail
    end = skip_value(tail, 3)
    value = decode(tail[3:end])
    return (dict(value) if isinstance(value, dict) else {}), tail[end:]


def _lock_token_section_prefix() -> bytes:
    """The delivery-annotations section holding only the lock token, less the token's 16 bytes: the
    same for every PeekLock delivery, so it is encoded once (the encoder puts the uuid last)."""
    section = amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, {Symbol(LOCK_TOKEN): uuid.UUID(int=0)})
    assert section.endswith(bytes(16))
    return section[:-16]


_LOCK_TOKEN_SECTION_PREFIX: Final = _lock_token_section_prefix()
_EMPTY_DELIVERY_ANNOTATIONS: Final = amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, {})


def _delivery_annotations_section(lock_token: uuid.UUID | None, tail: bytes,
                                  always: bool = False) -> tuple[bytes, bytes]:
    """The delivery-annotations section to send (lock token first) and the tail without the stored one;
    ``always``: an empty section rather than none when there is nothing to put in it."""
    if not tail.startswith(DELIVERY_ANNOTATIONS_PREFIX):
        if lock_token is None:
            return (_EMPTY_DELIVERY_ANNOTATIONS if always else b""), tail
        return _LOCK_TOKEN_SECTION_PREFIX + lock_token.bytes, tail  # the common case, without the encoder
    client, rest = _split_delivery_annotations(tail)
    values: AmqpMap = {} if lock_token is None else {Symbol(LOCK_TOKEN): lock_token}
    values.update(client)
    return amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, values), rest


def delivery_payload(record: Stored, locked_until: int | None, with_state: bool = False,
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
        entries.append(amqp_message.annotation_entry(MESSAGE_STATE, Int(int(record.state))))
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


def lock_token_tag(token: uuid.UUID) -> bytes:
    """The delivery tag is the lock token in .NET Guid byte order (sdk-wire-contract.md 4.2)."""
    return token.bytes_le


def tag_lock_token(tag: bytes) -> uuid.UUID | None:
    if len(tag) != 16:
        return None
    return uuid.UUID(bytes_le=tag)


PYTHON_SDK_PRODUCT: Final = "azsdk-python-servicebus"


def python_sdk_decimals(open_properties: Mapping[AmqpValue, AmqpValue] | None) -> bool:
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
