"""AMQP 1.0 performatives, SASL frames, terminus, error and delivery-state types.

Each type is a dataclass with a ``CODE`` (its small-ulong descriptor) and a ``FIELDS`` schema that
names the AMQP type of every field. Encoding always writes the full field list with explicit
nulls, because SDKs older than azure-servicebus 7.15 index trailing fields without a length check
(sdk-wire-contract.md section 10, pitfall 14). Decoding is lenient about trailing fields (ignored)
and integer widths, fills spec defaults, and checks the type of every field it keeps (InvalidField).
Transfer, disposition and flow are on the hot path and have hand-written encoders in
:mod:`sodalite.amqp.framing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar, TypeVar, cast, dataclass_transform, get_args

from sodalite.amqp.codec import encode_value
from sodalite.amqp.errors import DecodeError, InvalidField
from sodalite.amqp.types import (
    AmqpMap,
    Array,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
)

# ---- field codecs: turn a Python value into the declared AMQP type on encode -------------------

FieldEncoder = Callable[[object, bytearray], None]


def _f_any(value: object, out: bytearray) -> None:
    if isinstance(value, Composite):
        value.encode_into(out)
    else:
        encode_value(value, out)


def _typed(wrap: Callable[..., object]) -> FieldEncoder:  # wrap: the field's AMQP type
    def enc(value: object, out: bytearray) -> None:
        encode_value(None if value is None else wrap(value), out)

    return enc


def _f_symbols(value: object, out: bytearray) -> None:
    """A ``symbol multiple=true`` field: one symbol, or an array of them."""
    if value is None or isinstance(value, Array):
        encode_value(value, out)
    elif isinstance(value, str):
        encode_value(Symbol(value), out)
    else:
        encode_value(Array("symbol", tuple(Symbol(v) for v in cast("Iterable[str]", value))), out)


def _f_map(value: object, out: bytearray) -> None:
    """``fields`` maps have symbol keys; plain str keys are promoted."""
    if value is None:
        out.append(0x40)
        return
    items = cast("Mapping[object, object]", value).items()
    encode_value({(Symbol(k) if type(k) is str else k): v for k, v in items}, out)


def _f_composite() -> FieldEncoder:
    """An ``F_ANY`` that is a distinct schema entry, so decoding can check the composite's type."""

    def enc(value: object, out: bytearray) -> None:
        _f_any(value, out)

    return enc


F_ANY = _f_any
F_ERROR = _f_composite()  # an Error
F_SOURCE = _f_composite()  # a Source
F_TARGET = _f_composite()  # a Target or a Coordinator
F_STATE = _f_composite()  # a delivery state or outcome
F_STRING = _typed(str)
F_SYMBOL = _typed(Symbol)
F_SYMBOLS = _f_symbols
F_UBYTE = _typed(UByte)
F_USHORT = _typed(UShort)
F_UINT = _typed(UInt)
F_ULONG = _typed(ULong)
F_BOOL = _typed(bool)
F_BINARY = _typed(bytes)
F_MAP = _f_map


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _defaults(cls: type) -> tuple[tuple[int, object], ...]:
    """The position and value of each field whose declared default is not null."""
    return tuple((i, f.default) for i, f in enumerate(fields(cls)) if f.default not in (MISSING, None))


# ---- field checks: what a decoded value must be to fill a field ----------------------------------
#
# A check is (types accepted at a glance, fallback predicate). Decoded values of the declared type
# pass on the first test, so the hot-path performatives pay one set lookup per present field.
# Integer fields accept any integer width whose value fits (the SDK's widths vary, contract pitfall
# 12), symbol fields any ASCII string; every other field must hold its own kind of value. So a
# malformed performative fails here with InvalidField, not later in the owner's code with a
# TypeError, and whatever passes re-encodes when the owner echoes it (a terminus in an attach).

FieldCheck = tuple[frozenset[type], Callable[[object], bool]]
_NONE = type(None)


def _never(value: object) -> bool:
    return False


def _always(value: object) -> bool:
    return True


def _int_check(fast: tuple[type, ...], top: int) -> FieldCheck:
    def fits(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top

    return frozenset((_NONE, *fast)), fits


def _string(value: object) -> bool:
    return isinstance(value, str)


def _binary(value: object) -> bool:
    return isinstance(value, bytes)


def _symbol(value: object) -> bool:
    return isinstance(value, str) and value.isascii()  # a string where a symbol belongs: lenient


def _symbols(value: object) -> bool:
    return _symbol(value) or (isinstance(value, Array | list | tuple) and all(map(_symbol, value)))


_FIELD_CHECKS: dict[FieldEncoder, FieldCheck] = {
    F_ANY: (frozenset((_NONE,)), _always),
    F_STRING: (frozenset((_NONE, str, Symbol)), _string),
    F_SYMBOL: (frozenset((_NONE, Symbol)), _symbol),
    F_SYMBOLS: (frozenset((_NONE, Symbol)), _symbols),
    F_UBYTE: _int_check((UByte,), 0xFF),
    F_USHORT: _int_check((UShort, UByte), 0xFFFF),
    F_UINT: _int_check((UInt, UShort, UByte), 0xFFFFFFFF),
    F_ULONG: _int_check((ULong, UInt, UShort, UByte), 0xFFFFFFFFFFFFFFFF),
    F_BOOL: (frozenset((_NONE, bool)), _never),
    F_BINARY: (frozenset((_NONE, bytes)), _binary),
    F_MAP: (frozenset((_NONE, dict)), _never),
}  # the composite kinds are added below their classes
_CHECKS: dict[type, tuple[FieldCheck, ...]] = {}
_FAST: dict[type, tuple[frozenset[type], ...]] = {}


def _field_checks(cls: type[Composite]) -> tuple[FieldCheck, ...]:
    checks = _CHECKS.get(cls)
    if checks is None:
        checks = _CHECKS[cls] = tuple(_FIELD_CHECKS[enc] for enc in cls.FIELDS)
        _FAST[cls] = tuple(fast for fast, _ in checks)
    return checks


def _check_fields(cls: type[Composite], values: list[object]) -> None:
    """Raise InvalidField unless every value fits its field's declared type (None always does)."""
    fasts = _FAST.get(cls)
    if fasts is None:
        _field_checks(cls)
        fasts = _FAST[cls]
    for value, fast in zip(values, fasts, strict=False):
        if type(value) not in fast:
            error = _invalid(cls, values)
            if error is not None:
                raise error
            return


def _invalid(cls: type[Composite], values: list[object]) -> InvalidField | None:
    """The error naming the first of ``values`` that does not fit its field, if any."""
    for name, value, (fast, fallback) in zip(_field_names(cls), values, _field_checks(cls), strict=False):
        if type(value) not in fast and not fallback(value):
            return _field_error(cls, name, value)
    return None


def _field_error(cls: type[Composite], name: str, value: object) -> InvalidField:
    return InvalidField(f"{cls.__name__}.{name}: {type(value).__name__} {value!r:.40} is not allowed")


_C = TypeVar("_C", bound="Composite")


@dataclass_transform(frozen_default=True)
def composite(code: int, *fields: FieldEncoder) -> Callable[[type[_C]], type[_C]]:
    """Declare a described-list type: its descriptor (a small ulong) and its fields' AMQP types, in
    order; the class becomes a frozen dataclass with slots."""

    def declare(cls: type[_C]) -> type[_C]:
        cls.CODE = code
        cls.FIELDS = fields
        made = dataclass(frozen=True, slots=True)(cls)
        made.DEFAULTS = _defaults(made)
        return made

    return declare


class Composite:
    """Base of the described-list types, declared with :func:`composite` (their CODE and FIELDS)."""

    CODE: ClassVar[int]
    FIELDS: ClassVar[tuple[FieldEncoder, ...]]
    DEFAULTS: ClassVar[tuple[tuple[int, object], ...]]  # (position, value) of the defaults that are not null

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x53"
        out.append(self.CODE)
        body = bytearray()
        values = [getattr(self, name) for name in _field_names(type(self))]
        for enc, value in zip(self.FIELDS, values, strict=True):
            enc(value, body)
        count = len(values)
        if len(body) + 1 <= 0xFF:
            out.append(0xC0)
            out.append(len(body) + 1)
            out.append(count)
        else:
            out.append(0xD0)
            out += (len(body) + 4).to_bytes(4, "big")
            out += count.to_bytes(4, "big")
        out += body

    def encode(self) -> bytes:
        out = bytearray()
        self.encode_into(out)
        return bytes(out)

    @classmethod
    def from_fields(cls, values: list[object]) -> Composite:
        kwargs: dict[str, object] = {}
        for name, value, (fast, fallback) in zip(_field_names(cls), values, _field_checks(cls), strict=False):
            if value is not None:
                if type(value) not in fast and not fallback(value):
                    raise _field_error(cls, name, value)
                kwargs[name] = value
        try:
            make: Callable[..., Composite] = cls  # the checks above stand for the fields' types
            return make(**kwargs)
        except TypeError as exc:
            raise InvalidField(f"{cls.__name__}: mandatory field missing ({exc})") from None


# ---- terminus, error, delivery states -----------------------------------------------------------


@composite(0x1D, F_SYMBOL, F_STRING, F_MAP)
class Error(Composite):
    condition: str
    description: str | None = None
    info: AmqpMap | None = None


# A terminus's fields, which a source and a target share (AMQP 1.0 part 3 3.5.3, 3.5.4).
_TERMINUS_FIELDS = (F_ANY, F_UINT, F_SYMBOL, F_UINT, F_BOOL, F_MAP)


@dataclass(frozen=True, slots=True)
class _Terminus(Composite):
    address: object = None
    durable: int | None = None
    expiry_policy: str | None = None
    timeout: int | None = None
    dynamic: bool | None = None
    dynamic_node_properties: AmqpMap | None = None


@composite(0x28, *_TERMINUS_FIELDS, F_SYMBOL, F_MAP, F_STATE, F_SYMBOLS, F_SYMBOLS)
class Source(_Terminus):
    distribution_mode: str | None = None
    filter: AmqpMap | None = None
    default_outcome: object = None
    outcomes: object = None
    capabilities: object = None


@composite(0x29, *_TERMINUS_FIELDS, F_SYMBOLS)
class Target(_Terminus):
    capabilities: object = None


@composite(0x30, F_SYMBOLS)
class Coordinator(Composite):
    capabilities: object = None


@composite(0x23, F_UINT, F_ULONG)
class Received(Composite):
    section_number: int = 0
    section_offset: int = 0


@composite(0x24)
class Accepted(Composite):
    """The accepted outcome (no fields)."""


@composite(0x25, F_ERROR)
class Rejected(Composite):
    error: Error | None = None


@composite(0x26)
class Released(Composite):
    """The released outcome (no fields)."""


@composite(0x27, F_BOOL, F_BOOL, F_MAP)
class Modified(Composite):
    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: AmqpMap | None = None


@composite(0x31, F_ANY)
class Declare(Composite):
    global_id: object = None


@composite(0x32, F_BINARY, F_BOOL)
class Discharge(Composite):
    txn_id: bytes
    fail: bool | None = None


@composite(0x33, F_BINARY)
class Declared(Composite):
    txn_id: bytes


@composite(0x34, F_BINARY, F_STATE)
class TransactionalState(Composite):
    txn_id: bytes
    outcome: object = None


DeliveryState = Received | Accepted | Rejected | Released | Modified | Declared | TransactionalState

# ---- performatives ------------------------------------------------------------------------------


@composite(0x10, F_STRING, F_STRING, F_UINT, F_USHORT, F_UINT, F_SYMBOLS, F_SYMBOLS, F_SYMBOLS, F_SYMBOLS, F_MAP)
class Open(Composite):
    container_id: str
    hostname: str | None = None
    max_frame_size: int = 0xFFFFFFFF
    channel_max: int = 0xFFFF
    idle_time_out: int | None = None
    outgoing_locales: object = None
    incoming_locales: object = None
    offered_capabilities: object = None
    desired_capabilities: object = None
    properties: AmqpMap | None = None


@dataclass(frozen=True, slots=True)
class _LeadingOptional(Composite):
    """Begin and Flow: read in position, because the first field is optional and the next three are
    mandatory; every field is checked, and an absent one takes its declared default."""

    @classmethod
    def from_fields(cls, values: list[object]) -> Composite:
        count = len(cls.FIELDS)
        values = values[:count] + [None] * (count - len(values))
        _check_fields(cls, values)
        if values[1] is None or values[2] is None or values[3] is None:
            raise InvalidField(f"{cls.__name__}: mandatory field missing")
        for index, default in cls.DEFAULTS:
            if values[index] is None:
                values[index] = default
        make: Callable[..., Composite] = cls  # _check_fields stands for the fields' types
        return make(*values)


@composite(0x11, F_USHORT, F_UINT, F_UINT, F_UINT, F_UINT, F_SYMBOLS, F_SYMBOLS, F_MAP)
class Begin(_LeadingOptional):
    remote_channel: int | None
    next_outgoing_id: int
    incoming_window: int
    outgoing_window: int
    handle_max: int = 0xFFFFFFFF
    offered_capabilities: object = None
    desired_capabilities: object = None
    properties: AmqpMap | None = None


@composite(0x12, F_STRING, F_UINT, F_BOOL, F_UBYTE, F_UBYTE, F_SOURCE, F_TARGET, F_MAP, F_BOOL, F_UINT, F_ULONG,
           F_SYMBOLS, F_SYMBOLS, F_MAP)
class Attach(Composite):
    name: str
    handle: int
    role: bool  # False = sender, True = receiver
    snd_settle_mode: int = 2  # mixed
    rcv_settle_mode: int = 0  # first
    source: Source | None = None
    target: Target | Coordinator | None = None
    unsettled: AmqpMap | None = None
    incomplete_unsettled: bool = False
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: object = None
    desired_capabilities: object = None
    properties: AmqpMap | None = None


@composite(0x13, F_UINT, F_UINT, F_UINT, F_UINT, F_UINT, F_UINT, F_UINT, F_UINT, F_BOOL, F_BOOL, F_MAP)
class Flow(_LeadingOptional):
    next_incoming_id: int | None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool = False
    echo: bool = False
    properties: AmqpMap | None = None


@composite(0x14, F_UINT, F_UINT, F_BINARY, F_UINT, F_BOOL, F_BOOL, F_UBYTE, F_STATE, F_BOOL, F_BOOL, F_BOOL)
class Transfer(Composite):
    handle: int
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool = False
    rcv_settle_mode: int | None = None
    state: object = None
    resume: bool = False
    aborted: bool = False
    batchable: bool = False


@composite(0x15, F_BOOL, F_UINT, F_UINT, F_BOOL, F_STATE, F_BOOL)
class Disposition(Composite):
    role: bool
    first: int
    last: int | None = None
    settled: bool = False
    state: object = None
    batchable: bool = False


@composite(0x16, F_UINT, F_BOOL, F_ERROR)
class Detach(Composite):
    handle: int
    closed: bool = False
    error: Error | None = None


@composite(0x17, F_ERROR)
class End(Composite):
    error: Error | None = None


@composite(0x18, F_ERROR)
class Close(Composite):
    error: Error | None = None


# ---- SASL ---------------------------------------------------------------------------------------


@composite(0x40, F_SYMBOLS)
class SaslMechanisms(Composite):
    sasl_server_mechanisms: object


@composite(0x41, F_SYMBOL, F_BINARY, F_STRING)
class SaslInit(Composite):
    mechanism: str
    initial_response: bytes | None = None
    hostname: str | None = None


@composite(0x42, F_BINARY)
class SaslChallenge(Composite):
    challenge: bytes


@composite(0x43, F_BINARY)
class SaslResponse(Composite):
    response: bytes


@composite(0x44, F_UBYTE, F_BINARY)
class SaslOutcome(Composite):
    code: int
    additional_data: bytes | None = None


Performative = Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
SaslFrame = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome

_COMPOSITES: dict[int, type[Composite]] = {
    cls.CODE: cls
    for cls in (
        Error, Source, Target, Coordinator, Received, Accepted, Rejected, Released, Modified, Declare,
        Discharge, Declared, TransactionalState, Open, Begin, Attach, Flow, Transfer, Disposition, Detach,
        End, Close, SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome,
    )
}
_SYMBOLIC: dict[str, int] = {
    "amqp:error:list": 0x1D, "amqp:source:list": 0x28, "amqp:target:list": 0x29,
    "amqp:coordinator:list": 0x30, "amqp:received:list": 0x23, "amqp:accepted:list": 0x24,
    "amqp:rejected:list": 0x25, "amqp:released:list": 0x26, "amqp:modified:list": 0x27,
    "amqp:declare:list": 0x31, "amqp:discharge:list": 0x32, "amqp:declared:list": 0x33,
    "amqp:transactional-state:list": 0x34,
}
_FIELD_CHECKS[F_ERROR] = (frozenset((_NONE, Error)), _never)
_FIELD_CHECKS[F_SOURCE] = (frozenset((_NONE, Source)), _never)
_FIELD_CHECKS[F_TARGET] = (frozenset((_NONE, Target, Coordinator)), _never)
_FIELD_CHECKS[F_STATE] = (frozenset((_NONE, *get_args(DeliveryState))), _never)

PERFORMATIVE_CODES = frozenset(range(0x10, 0x19))
SASL_CODES = frozenset(range(0x40, 0x45))


def _code_of(descriptor: object) -> int | None:
    if isinstance(descriptor, str):
        return _SYMBOLIC.get(descriptor)
    if isinstance(descriptor, int) and descriptor <= 0xFFFFFFFF:
        # Descriptors are domain id 0 (AMQP) in the upper 32 bits.
        return int(descriptor)
    return None


def lift(value: object) -> object:
    """Turn a decoded Described AMQP composite into its dataclass, recursively for nested ones."""
    if not isinstance(value, Described):
        return value
    code = _code_of(value.descriptor)
    cls = _COMPOSITES.get(code) if code is not None else None
    if cls is None or not isinstance(value.value, list):
        return value
    return _lift_fields(cls, value.value)


def _lift_fields(cls: type[Composite], items: list[object]) -> Composite:
    if len(items) > len(cls.FIELDS):
        items = items[: len(cls.FIELDS)]  # trailing fields are ignored, not lifted
    return cls.from_fields([lift(v) if isinstance(v, Described) else v for v in items])


def lift_performative(value: object, allowed: frozenset[int]) -> Composite:
    """Lift a frame body's described value into a performative of one of the ``allowed`` codes."""
    if not isinstance(value, Described) or not isinstance(value.value, list):
        raise DecodeError("frame body is not a described list")
    code = _code_of(value.descriptor)
    if code is None or code not in allowed:
        raise DecodeError(f"unexpected performative descriptor {value.descriptor!r}")
    return _lift_fields(_COMPOSITES[code], value.value)


def encode_delivery_state(state: Composite | None, out: bytearray) -> None:
    if state is None:
        out.append(0x40)
    else:
        state.encode_into(out)
