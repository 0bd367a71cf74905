"""Subscription rule filters and actions, compiled once and evaluated against each message. Pure.

Theory of operation: a rule's filter is compiled when the rule is loaded, into a
:class:`CompiledFilter` whose ``matches`` takes a :class:`MessageView` (the message's system
properties by their Service Bus names, and its application properties) and answers True or False.
True and False filters are constants; a correlation filter is a tuple of equality tests; a SQL
filter is tokenized and parsed once (recursive descent, one function per precedence level) into a
tree of closures, so evaluating a message never re-parses. A rule action compiles the same way into
a :class:`CompiledAction` whose ``apply`` returns a changed copy of the view. ``newid()`` calls the
``new_id`` factory given at compile time, so tests can pin it.

The language is the one Microsoft documents in "Subscription Rule SQL Filter Syntax" and
"Subscription Rule SQL Action Syntax" (learn.microsoft.com, service-bus-messaging-sql-filter and
-sql-rule-action); where those pages are silent the choice made here is marked *choice*.

- Properties: ``[sys.|user.]name``; no scope means user. A name is a regular identifier (a letter,
  then letters, digits, underscores; not a keyword), a ``[delimited identifier]`` (``]]`` escapes
  ``]``) or a ``"quoted identifier"`` (``""`` escapes ``"``). Property names are case-insensitive
  (docs): an exact match wins, then a case-insensitive one. System names are the message's broker
  properties (BrokeredMessage names, plus the ServiceBusMessage aliases the filter-examples page
  says to use: Subject = Label, ScheduledEnqueueTime, EnqueuedTime, ExpiresAt, LockedUntil,
  TransactionPartitionKey). The docs say a non-existent system property is an error; since the set
  is fixed, an unknown ``sys.`` name is rejected at compile time (*choice*), except through
  ``property('sys.X')``, which fails at evaluation. A known system property the view lacks is NULL.
- Constants: integers are Int64 (out of range is a syntax error), decimals and exponent numbers are
  doubles, strings use single quotes with ``''``, TRUE, FALSE, NULL. ``@name`` parameters come from
  the filter's parameter map (with or without the leading ``@``) and are bound at compile time; an
  unknown one is a syntax error.
- NULL and unknown are one value (Python ``None``); a missing user property is unknown (docs).
  Arithmetic, comparison and LIKE with an unknown operand are unknown; IN is unknown when its left
  side is (docs), and, as in SQL-92, when no item matches and an item is NULL (*choice*). AND, OR
  and NOT follow the documented three-valued tables; a filter matches only when it is TRUE.
  ``IS [NOT] NULL`` is TRUE for a missing or null property (docs). ``EXISTS(p)`` is TRUE when a
  user property is present, even with a null value, or when a system property is set (*choice*).
- Types follow C# operator binding (docs): integers and doubles compare and combine numerically
  (long promoted to double); strings compare ordinally (case-sensitive, as correlation filters
  are); booleans, GUIDs and the like support only = and <>; DateTime and TimeSpan compare and
  support DateTime - DateTime, DateTime +/- TimeSpan and TimeSpan +/- TimeSpan (the docs'
  ``DateTimeMp2-DateTimeMp1 <= @timespan`` example). C# has no implicit conversion between strings
  and numbers, so comparing a string with a number (or any two unrelated types) raises
  ``FilterEvaluationError``, as does arithmetic on non-numbers (strings do not concatenate) --
  Service Bus raises a FilterException for an operator that cannot bind (*choice*, from the
  binding rule). Values of types the language has no notion of (bytes, ...) are opaque: they are
  equal only to an equal value of the same type, never ordered. Integer division truncates and
  ``%`` takes the dividend's sign (C#); division or modulo by zero, and Int64 overflow, raise
  ``FilterEvaluationError`` (*choice*: C# would give Infinity for doubles and wrap for longs).
- ``LIKE`` is case-sensitive (*choice*), with ``%`` and ``_`` and an optional one-character
  ``ESCAPE``; a string operand is required. ``newid()`` returns a ``uuid.UUID``; ``property(x)``
  and ``p(x)`` look up the property named by the string ``x`` (``'sys.Label'`` and ``'user.a'``
  scopes allowed).
- Precedence, tightest first: unary + -; * / %; binary + -; comparisons, LIKE, IN, IS (not
  chainable); NOT; AND; OR. The grammar's split between predicates and expressions is checked only
  where it is certain at compile time: AND/OR/NOT operands and a whole filter must not be a number
  or string expression. Anything else (a bare boolean property, say) is checked when evaluated.
- Actions: one or more ``SET property = expression`` and ``REMOVE property`` statements, each
  optionally followed by ``;`` (docs). Statements run in order, each seeing the previous ones'
  effects (*choice*). SET on an existing user property whose value is a double converts an integer
  result to double (the docs' "implicit conversion if possible"); otherwise the value is stored as
  is. REMOVE of a missing user property is a no-op (docs). System properties that may be set or
  removed: MessageId, CorrelationId, To, ReplyTo, Label/Subject, SessionId, ReplyToSessionId,
  ContentType (*choice*: the properties-section fields a copy can carry); their values must be
  strings (a GUID from ``newid()`` is converted) or NULL. Others are a syntax error.

Errors: malformed text raises ``FilterSyntaxError`` naming the character offset and the token
(``Syntax error at position 12 near 'AND': ...``); a failure while evaluating raises
``FilterEvaluationError``. Nothing else escapes ``compile_*``, ``matches`` or ``apply``.
"""

from __future__ import annotations

import math
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final

from sodalite.errors import FilterEvaluationError, FilterSyntaxError
from sodalite.model.entities import (
    CORRELATION_FIELDS,
    CorrelationFilter,
    FalseFilter,
    Filter,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)

NewId = Callable[[], uuid.UUID]


@dataclass(frozen=True, slots=True)
class MessageView:
    """What a filter sees of a message: system properties by Service Bus name, and application properties."""

    system: Mapping[str, object]
    user: Mapping[str, object]


# --------------------------------------------------------------------------------------------------
# System properties
# --------------------------------------------------------------------------------------------------

_SYSTEM_NAMES: Final = (
    "MessageId", "CorrelationId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId", "ContentType",
    "PartitionKey", "ViaPartitionKey", "Size", "DeliveryCount", "SequenceNumber", "EnqueuedSequenceNumber",
    "EnqueuedTimeUtc", "ScheduledEnqueueTimeUtc", "TimeToLive", "ExpiresAtUtc", "LockedUntilUtc", "LockToken",
    "DeadLetterSource", "State", "ForcePersistence",
)
_SYSTEM_ALIASES: Final = {
    "Subject": "Label",
    "ScheduledEnqueueTime": "ScheduledEnqueueTimeUtc",
    "EnqueuedTime": "EnqueuedTimeUtc",
    "ExpiresAt": "ExpiresAtUtc",
    "LockedUntil": "LockedUntilUtc",
    "TransactionPartitionKey": "ViaPartitionKey",
}
#: Lower-cased system property name (or alias) -> canonical name.
SYSTEM_PROPERTIES: Final[Mapping[str, str]] = {
    **{name.lower(): name for name in _SYSTEM_NAMES},
    **{alias.lower(): name for alias, name in _SYSTEM_ALIASES.items()},
}
#: System properties a rule action may SET or REMOVE.
SETTABLE_SYSTEM_PROPERTIES: Final = frozenset(
    {"MessageId", "CorrelationId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId", "ContentType"}
)
_ID_PROPERTIES: Final = frozenset({"MessageId", "CorrelationId"})

_MISSING: Final[object] = object()


def _id_text(value: object) -> object:
    """A non-string AMQP message-id or correlation-id as the string Service Bus shows for it."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _system_value(system: Mapping[str, object], name: str) -> object:
    value = system.get(name)
    if value is None and name == "Label":
        value = system.get("Subject")
    if value is not None and name in _ID_PROPERTIES and not isinstance(value, str):
        value = _id_text(value)
    return value


def _user_key(user: Mapping[str, object], name: str, lower: str) -> str | None:
    """The key under which ``user`` holds the property ``name`` (exact, then case-insensitive), or None."""
    if name in user:
        return name
    for key in user:
        if isinstance(key, str) and key.lower() == lower:
            return key
    return None


def _user_value(user: Mapping[str, object], name: str, lower: str) -> object:
    value = user.get(name, _MISSING)
    if value is not _MISSING:
        return value
    for key, value in user.items():
        if isinstance(key, str) and key.lower() == lower:
            return value
    return None


def _named_property(view: MessageView, name: str) -> object:
    """The value of the property ``property(name)`` names: ``sys.X``, ``user.X`` or ``X``."""
    lower = name.lower()
    if lower.startswith("sys."):
        canonical = SYSTEM_PROPERTIES.get(lower[4:])
        if canonical is None:
            raise FilterEvaluationError(f"{name!r} is not a system property")
        return _system_value(view.system, canonical)
    if lower.startswith("user."):
        name, lower = name[5:], lower[5:]
    return _user_value(view.user, name, lower)


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_ORDERED_KINDS: Final = frozenset({"number", "string", "datetime", "timespan"})


_KINDS: Final[dict[type, str]] = {
    bool: "boolean", int: "number", float: "number", str: "string",
    datetime: "datetime", timedelta: "timespan", uuid.UUID: "guid",
}


def _kind(value: object) -> str:
    """The language type of a non-null value: its type's, or its nearest base type's, else opaque."""
    for cls in type(value).__mro__:
        kind = _KINDS.get(cls)
        if kind is not None:
            return kind
    return "opaque"


def _show(value: object) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{_kind(value)} {text}"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _bound(value: object) -> object:
    """A parameter's value as an expression uses it: a date-time without a zone is UTC."""
    return _utc(value) if isinstance(value, datetime) else value


def _truth(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise FilterEvaluationError(f"expected a boolean, got {_show(value)}")


def _same_opaque(left: object, right: object) -> bool:
    if type(left) is not type(right):
        return False
    try:
        return bool(left == right)
    except Exception:
        return False


def _compare(op: str, left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    lk, rk = _kind(left), _kind(right)
    equality = op in ("=", "<>", "!=")
    if lk == "opaque" or rk == "opaque":
        if not equality:
            raise FilterEvaluationError(f"operator {op} cannot order {_show(left)} and {_show(right)}")
        same = _same_opaque(left, right)
        return same if op == "=" else not same
    if lk != rk:
        raise FilterEvaluationError(f"cannot compare {_show(left)} with {_show(right)}")
    if isinstance(left, datetime) and isinstance(right, datetime):
        left, right = _utc(left), _utc(right)
    if op == "=":
        return bool(left == right)
    if equality:
        return bool(left != right)
    if lk not in _ORDERED_KINDS:
        raise FilterEvaluationError(f"operator {op} does not apply to {lk} values")
    return _order(op, left, right)


def _order(op: str, left: Any, right: Any) -> bool:
    """``left op right`` for two values of one ordered kind (number, string, datetime, timespan)."""
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _int_result(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise FilterEvaluationError("arithmetic overflow: the result is outside the Int64 range")
    return value


def _int_arith(op: str, left: int, right: int) -> int:
    if op == "+":
        return _int_result(left + right)
    if op == "-":
        return _int_result(left - right)
    if op == "*":
        return _int_result(left * right)
    if right == 0:
        raise FilterEvaluationError("division by zero")
    quotient = abs(left) // abs(right)
    if (left < 0) != (right < 0):
        quotient = -quotient
    return _int_result(quotient if op == "/" else left - right * quotient)


def _float_arith(op: str, left: float, right: float) -> float:
    try:
        x, y = float(left), float(right)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0:
            raise FilterEvaluationError("division by zero")
        if op == "/":
            return x / y
        return math.fmod(x, y)
    except OverflowError:
        raise FilterEvaluationError("arithmetic overflow") from None
    except ValueError:  # fmod of an infinity: C# gives NaN
        return math.nan


def _time_arith(op: str, left: object, right: object) -> object:
    try:
        if isinstance(left, datetime) and isinstance(right, datetime) and op == "-":
            return _utc(left) - _utc(right)
        if isinstance(left, datetime) and isinstance(right, timedelta) and op in ("+", "-"):
            return left + right if op == "+" else left - right
        if isinstance(left, timedelta) and isinstance(right, timedelta) and op in ("+", "-"):
            return left + right if op == "+" else left - right
    except OverflowError:
        raise FilterEvaluationError("date/time arithmetic overflow") from None
    raise FilterEvaluationError(f"operator {op} does not apply to {_show(left)} and {_show(right)}")


def _arith(op: str, left: object, right: object) -> object:
    if left is None or right is None:
        return None
    lk, rk = _kind(left), _kind(right)
    if lk == "number" and rk == "number" and isinstance(left, int | float) and isinstance(right, int | float):
        if isinstance(left, int) and isinstance(right, int):
            return _int_arith(op, left, right)
        return _float_arith(op, left, right)
    if lk in ("datetime", "timespan") and rk in ("datetime", "timespan"):
        return _time_arith(op, left, right)
    raise FilterEvaluationError(f"operator {op} needs numbers, got {_show(left)} and {_show(right)}")


def _sign(value: object, negate: bool) -> object:
    if value is None:
        return None
    kind = _kind(value)
    if kind not in ("number", "timespan"):
        raise FilterEvaluationError(f"unary {'-' if negate else '+'} needs a number, got {_show(value)}")
    if not negate:
        return value
    if isinstance(value, int):
        return _int_result(-value)
    try:
        return -value if isinstance(value, float | timedelta) else value
    except OverflowError:
        raise FilterEvaluationError("arithmetic overflow") from None


# --------------------------------------------------------------------------------------------------
# LIKE
# --------------------------------------------------------------------------------------------------

_ONE: Final = object()  # '_' in a pattern
_ANY: Final = object()  # '%' in a pattern


@dataclass(frozen=True, slots=True)
class _LikePattern:
    """A LIKE pattern as literal characters and wildcards, with fast paths for the usual shapes."""

    items: tuple[object, ...]
    shape: str  # "exact", "prefix", "suffix", "contains" or "general"
    text: str  # the literal part, for the fast paths

    def matches(self, value: str) -> bool:
        if self.shape == "exact":
            return value == self.text
        if self.shape == "prefix":
            return value.startswith(self.text)
        if self.shape == "suffix":
            return value.endswith(self.text)
        if self.shape == "contains":
            return self.text in value
        return _wildcard_match(value, self.items)


def _wildcard_match(value: str, items: tuple[object, ...]) -> bool:
    """Wildcard matching with backtracking to the last '%' only: O(len(value) * len(items))."""
    i = j = 0
    star = -1
    mark = 0
    n, m = len(value), len(items)
    while i < n:
        if j < m and (items[j] is _ONE or items[j] == value[i]):
            i += 1
            j += 1
        elif j < m and items[j] is _ANY:
            star, mark = j, i
            j += 1
        elif star >= 0:
            mark += 1
            i, j = mark, star + 1
        else:
            return False
    while j < m and items[j] is _ANY:
        j += 1
    return j == m


@lru_cache(maxsize=512)
def _like_pattern(pattern: str, escape: str | None) -> _LikePattern:
    """Compile a LIKE pattern; ``ValueError`` says why it is invalid."""
    if escape is not None and len(escape) != 1:
        raise ValueError(f"the ESCAPE character must be a string of length 1, got {escape!r}")
    items: list[object] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape:
            if i + 1 == len(pattern):
                raise ValueError(f"the pattern {pattern!r} ends with its escape character")
            items.append(pattern[i + 1])
            i += 2
            continue
        items.append(_ONE if ch == "_" else _ANY if ch == "%" else ch)
        i += 1
    wild = [k for k, item in enumerate(items) if not isinstance(item, str)]
    literal = "".join(item for item in items if isinstance(item, str))
    shape = "general"
    if not wild:
        shape = "exact"
    elif all(items[k] is _ANY for k in wild):
        last = len(items) - 1
        if wild == [last]:
            shape = "prefix"
        elif wild == [0]:
            shape = "suffix"
        elif wild == [0, last] and last > 0:
            shape = "contains"
    return _LikePattern(tuple(items), shape, literal)


def _like(value: object, pattern: object, escape: object, has_escape: bool) -> bool | None:
    if value is None or pattern is None or (has_escape and escape is None):
        return None
    if not isinstance(value, str):
        raise FilterEvaluationError(f"LIKE needs a string, got {_show(value)}")
    if not isinstance(pattern, str):
        raise FilterEvaluationError(f"the LIKE pattern must be a string, got {_show(pattern)}")
    if has_escape and not isinstance(escape, str):
        raise FilterEvaluationError(f"the ESCAPE character must be a string, got {_show(escape)}")
    try:
        compiled = _like_pattern(pattern, escape if has_escape else None)
    except ValueError as exc:
        raise FilterEvaluationError(str(exc)) from None
    return compiled.matches(value)


# --------------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------------

_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"})
_COMPARISONS: Final = frozenset({"=", "<>", "!=", ">", ">=", "<", "<="})
_TWO_CHAR_OPS: Final = frozenset({"<>", "!=", ">=", "<="})
_ONE_CHAR_OPS: Final = frozenset("=<>+-*/%(),.;")
_NUMBER_RE: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_MAX_INTEGER_DIGITS: Final = 30
_MAX_NESTING: Final = 32


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "int", "float", "str", "ident", "name" (delimited/quoted), "param", "op", "end"
    text: str  # as written
    value: str  # decoded: the string, the identifier, the name, the parameter name, the operator
    pos: int
    number: int | float = 0  # an "int" or "float" token's value


def _syntax_error(pos: int, near: str | None, detail: str) -> FilterSyntaxError:
    shown = "end of input" if near is None else repr(near if len(near) <= 30 else near[:27] + "...")
    return FilterSyntaxError(f"Syntax error at position {pos} near {shown}: {detail}", position=pos, near=near)


def _is_word_char(ch: str) -> bool:
    return ch.isalpha() or ch.isdecimal() or ch == "_"


def _scan_quoted(text: str, start: int, close: str, what: str) -> tuple[str, int]:
    """The content of a quoted token opening at ``start`` (doubled ``close`` escapes it), and its end."""
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find(close, i)
        if end < 0:
            raise _syntax_error(start, text[start : start + 20], f"unterminated {what}")
        parts.append(text[i:end])
        if text.startswith(close, end + 1):
            parts.append(close)
            i = end + 2
            continue
        return "".join(parts), end + 1


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        if ch == "'":
            value, i = _scan_quoted(text, start, "'", "string constant")
            tokens.append(_Token("str", text[start:i], value, start))
        elif ch in "[\"":
            value, i = _scan_quoted(text, start, "]" if ch == "[" else '"', "identifier")
            if not value:
                raise _syntax_error(start, text[start:i], "empty identifier")
            tokens.append(_Token("name", text[start:i], value, start))
        elif ch == "@":
            i += 1
            while i < n and _is_word_char(text[i]):
                i += 1
            if i == start + 1:
                raise _syntax_error(start, "@", "expected a parameter name after '@'")
            tokens.append(_Token("param", text[start:i], text[start + 1 : i], start))
        elif ch.isalpha():
            while i < n and _is_word_char(text[i]):
                i += 1
            tokens.append(_Token("ident", text[start:i], text[start:i], start))
        elif (match := _NUMBER_RE.match(text, i)) is not None:
            i = match.end()
            if i < n and _is_word_char(text[i]):
                raise _syntax_error(start, text[start : i + 1], "invalid number")
            tokens.append(_number_token(match.group(), start))
        elif text[i : i + 2] in _TWO_CHAR_OPS:
            i += 2
            tokens.append(_Token("op", text[start:i], text[start:i], start))
        elif ch in _ONE_CHAR_OPS:
            i += 1
            tokens.append(_Token("op", ch, ch, start))
        else:
            raise _syntax_error(start, ch, "unexpected character")
    tokens.append(_Token("end", "", "", n))
    return tokens


def _number_token(text: str, pos: int) -> _Token:
    if "." in text or "e" in text or "E" in text:
        value = float(text)
        if not math.isfinite(value):
            raise _syntax_error(pos, text, "number out of range")
        return _Token("float", text, "", pos, value)
    if len(text.lstrip("0")) > _MAX_INTEGER_DIGITS:
        raise _syntax_error(pos, text, "integer constant out of the Int64 range")
    return _Token("int", text, "", pos, int(text.lstrip("0") or "0"))


# --------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------

Evaluator = Callable[[MessageView], object]


@dataclass(frozen=True, slots=True)
class _Expr:
    """A compiled sub-expression: its evaluator, its static type where known, where it starts."""

    fn: Evaluator
    kind: str  # "boolean", "number", "string", "null" or "any" (known only at evaluation)
    pos: int
    const: bool = False
    value: object = None


@dataclass(frozen=True, slots=True)
class _PropertyRef:
    scope: str  # "sys" or "user"
    name: str  # canonical for sys
    pos: int


def _constant(value: object, pos: int) -> _Expr:
    kind = "null" if value is None else _kind(value)
    if kind not in ("boolean", "number", "string", "null"):
        kind = "any"
    return _Expr(lambda view: value, kind, pos, const=True, value=value)


class _Parser:
    """Recursive descent over the token list; each ``_parse_*`` returns a compiled :class:`_Expr`."""

    def __init__(self, text: str, parameters: Mapping[str, object], new_id: NewId) -> None:
        self.tokens = _tokenize(text)
        self.i = 0
        self.parameters = parameters
        self.new_id = new_id
        self.depth = 0

    # -- token helpers --------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def error(self, tok: _Token, detail: str) -> FilterSyntaxError:
        return _syntax_error(tok.pos, None if tok.kind == "end" else tok.text, detail)

    def error_at(self, pos: int, detail: str) -> FilterSyntaxError:
        tok = next(t for t in self.tokens if t.pos >= pos)
        return self.error(tok, detail)

    def is_op(self, op: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "op" and tok.value == op

    def is_keyword(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "ident" and tok.value.upper() == word

    def expect_op(self, op: str, detail: str) -> _Token:
        if not self.is_op(op):
            raise self.error(self.peek(), detail)
        return self.advance()

    def expect_end(self) -> None:
        tok = self.peek()
        if tok.kind != "end":
            raise self.error(tok, "unexpected token")

    def require_condition(self, expr: _Expr, what: str) -> None:
        if expr.kind in ("number", "string"):
            raise self.error_at(expr.pos, f"{what} needs a condition, got a {expr.kind} expression")

    def nest(self, tok: _Token) -> None:
        self.depth += 1
        if self.depth > _MAX_NESTING:
            raise self.error(tok, f"expression nested more than {_MAX_NESTING} levels deep")

    # -- predicates -----------------------------------------------------------------------------

    def parse_filter(self) -> _Expr:
        expr = self.parse_or()
        self.expect_end()
        self.require_condition(expr, "a filter")
        return expr

    def parse_or(self) -> _Expr:
        return self.parse_junction("OR", self.parse_and, True)

    def parse_and(self) -> _Expr:
        return self.parse_junction("AND", self.parse_not, False)

    def parse_junction(self, keyword: str, parse_operand: Callable[[], _Expr], decisive: bool) -> _Expr:
        """Operands joined by ``keyword`` (OR, AND), in the three-valued tables: one operand that is
        ``decisive`` (TRUE for OR, FALSE for AND) decides; else unknown if one is; else the other value."""
        first = parse_operand()
        if not self.is_keyword(keyword):
            return first
        items = [first]
        while self.is_keyword(keyword):
            self.advance()
            items.append(parse_operand())
        for item in items:
            self.require_condition(item, keyword)
        fns = tuple(item.fn for item in items)
        otherwise = not decisive

        def junction(view: MessageView) -> bool | None:
            result: bool | None = otherwise
            for fn in fns:
                value = _truth(fn(view))
                if value is decisive:
                    return decisive
                if value is None:
                    result = None
            return result

        return _Expr(junction, "boolean", first.pos)

    def parse_not(self) -> _Expr:
        start = self.peek()
        count = 0
        while self.is_keyword("NOT"):
            self.advance()
            count += 1
        expr = self.parse_predicate()
        if not count:
            return expr
        self.require_condition(expr, "NOT")
        fn, invert = expr.fn, count % 2 == 1

        def negated(view: MessageView) -> bool | None:
            value = _truth(fn(view))
            return value if value is None or not invert else not value

        return _Expr(negated, "boolean", start.pos)

    def parse_predicate(self) -> _Expr:
        start = self.peek()
        if self.is_keyword("EXISTS"):
            self.advance()
            self.expect_op("(", "expected '(' after EXISTS")
            ref = self.parse_property()
            self.expect_op(")", "expected ')' after the EXISTS property")
            return _Expr(_exists(ref), "boolean", start.pos)
        left = self.parse_additive()
        tok = self.peek()
        if tok.kind == "op" and tok.value in _COMPARISONS:
            self.advance()
            right = self.parse_additive()
            return _comparison(tok.value, left, right)
        if self.is_keyword("IS"):
            self.advance()
            negate = self.is_keyword("NOT")
            if negate:
                self.advance()
            if not self.is_keyword("NULL"):
                raise self.error(self.peek(), "expected NULL after IS")
            self.advance()
            fn = left.fn
            return _Expr((lambda view: fn(view) is not None) if negate else (lambda view: fn(view) is None),
                         "boolean", left.pos)
        negate = False
        if self.is_keyword("NOT") and (self.is_keyword("LIKE", 1) or self.is_keyword("IN", 1)):
            self.advance()
            negate = True
        if self.is_keyword("LIKE"):
            self.advance()
            return self.finish_like(left, negate)
        if self.is_keyword("IN"):
            self.advance()
            return self.finish_in(left, negate)
        return left

    def finish_like(self, left: _Expr, negate: bool) -> _Expr:
        pattern_tok = self.peek()
        pattern = self.parse_additive()
        escape: _Expr | None = None
        escape_tok = self.peek()
        if self.is_keyword("ESCAPE"):
            self.advance()
            escape_tok = self.peek()
            escape = self.parse_additive()
        value_fn = left.fn
        has_escape = escape is not None
        if pattern.const and (escape is None or escape.const):
            fixed = self.constant_pattern(pattern, pattern_tok, escape, escape_tok)
            if fixed is not None:

                def like_fixed(view: MessageView) -> bool | None:
                    value = value_fn(view)
                    if value is None:
                        return None
                    if not isinstance(value, str):
                        raise FilterEvaluationError(f"LIKE needs a string, got {_show(value)}")
                    return fixed.matches(value) != negate

                return _Expr(like_fixed, "boolean", left.pos)
        pattern_fn = pattern.fn
        escape_fn: Evaluator = escape.fn if escape is not None else (lambda view: None)

        def like(view: MessageView) -> bool | None:
            result = _like(value_fn(view), pattern_fn(view), escape_fn(view), has_escape)
            return result if result is None else result != negate

        return _Expr(like, "boolean", left.pos)

    def constant_pattern(self, pattern: _Expr, pattern_tok: _Token, escape: _Expr | None,
                         escape_tok: _Token) -> _LikePattern | None:
        """Compile a constant LIKE pattern now; None when it is NULL (the result is then unknown)."""
        if pattern.value is None or (escape is not None and escape.value is None):
            return None
        if not isinstance(pattern.value, str):
            raise self.error(pattern_tok, "the LIKE pattern must be a string")
        esc = None
        if escape is not None:
            if not isinstance(escape.value, str) or len(escape.value) != 1:
                raise self.error(escape_tok, "the ESCAPE character must be a string of length 1")
            esc = escape.value
        try:
            return _like_pattern(pattern.value, esc)
        except ValueError as exc:
            raise self.error(pattern_tok, str(exc)) from None

    def finish_in(self, left: _Expr, negate: bool) -> _Expr:
        open_tok = self.expect_op("(", "expected '(' after IN")
        self.nest(open_tok)
        items = [self.parse_additive()]
        while self.is_op(","):
            self.advance()
            items.append(self.parse_additive())
        self.expect_op(")", "expected ',' or ')' in the IN list")
        self.depth -= 1
        value_fn = left.fn
        fns = tuple(item.fn for item in items)

        def member(view: MessageView) -> bool | None:
            value = value_fn(view)
            if value is None:
                return None
            result: bool | None = False
            for fn in fns:
                candidate = fn(view)
                if candidate is None:
                    result = None
                elif _compare("=", value, candidate):
                    return not negate
            return result if result is None else negate

        return _Expr(member, "boolean", left.pos)

    # -- expressions ----------------------------------------------------------------------------

    def parse_additive(self) -> _Expr:
        return self.parse_chain(("+", "-"), self.parse_multiplicative)

    def parse_multiplicative(self) -> _Expr:
        return self.parse_chain(("*", "/", "%"), self.parse_unary)

    def parse_chain(self, ops: tuple[str, ...], operand: Callable[[], _Expr]) -> _Expr:
        first = operand()
        rest: list[tuple[str, Evaluator]] = []
        kinds = {first.kind}
        while self.peek().kind == "op" and self.peek().value in ops:
            op = self.advance().value
            item = operand()
            rest.append((op, item.fn))
            kinds.add(item.kind)
        if not rest:
            return first
        first_fn, steps = first.fn, tuple(rest)

        def chain(view: MessageView) -> object:
            acc = first_fn(view)
            for op, fn in steps:
                if acc is None:
                    return None
                acc = _arith(op, acc, fn(view))
            return acc

        return _Expr(chain, "number" if kinds == {"number"} else "any", first.pos)

    def parse_unary(self) -> _Expr:
        start = self.peek()
        signs = 0
        negate = False
        while self.is_op("+") or self.is_op("-"):
            negate ^= self.advance().value == "-"
            signs += 1
        if signs and self.peek().kind in ("int", "float"):
            tok = self.advance()
            return self.number(tok, -tok.number if negate else tok.number, start.pos)
        expr = self.parse_primary()
        if not signs:
            return expr
        fn = expr.fn
        return _Expr(lambda view: _sign(fn(view), negate), "number" if expr.kind == "number" else "any", start.pos)

    def number(self, tok: _Token, value: int | float, pos: int) -> _Expr:
        if tok.kind == "int" and not _INT64_MIN <= value <= _INT64_MAX:
            raise self.error(tok, "integer constant out of the Int64 range")
        return _constant(value, pos)

    def parse_primary(self) -> _Expr:
        tok = self.peek()
        if tok.kind in ("int", "float"):
            self.advance()
            return self.number(tok, tok.number, tok.pos)
        if tok.kind == "str":
            self.advance()
            return _constant(tok.value, tok.pos)
        if tok.kind == "param":
            self.advance()
            return _constant(self.parameter(tok), tok.pos)
        if self.is_op("("):
            self.advance()
            self.nest(tok)
            inner = self.parse_or()
            self.expect_op(")", "expected ')'")
            self.depth -= 1
            return _Expr(inner.fn, inner.kind, tok.pos, inner.const, inner.value)
        if tok.kind == "ident":
            word = tok.value.upper()
            if word in ("TRUE", "FALSE", "NULL"):
                self.advance()
                return _constant(None if word == "NULL" else word == "TRUE", tok.pos)
            if word in _KEYWORDS:
                raise self.error(tok, "expected an expression")
            if self.is_op("(", 1):
                return self.parse_function()
        if tok.kind in ("ident", "name"):
            return _property_expr(self.parse_property())
        raise self.error(tok, "expected an expression")

    def parse_function(self) -> _Expr:
        tok = self.advance()
        name = tok.value.lower()
        open_tok = self.advance()
        if name == "newid":
            self.expect_op(")", "newid() takes no arguments")
            new_id = self.new_id
            return _Expr(lambda view: new_id(), "any", tok.pos)
        if name in ("property", "p"):
            self.nest(open_tok)
            arg = self.parse_additive()
            self.expect_op(")", f"expected ')' after the {tok.value}() argument")
            self.depth -= 1
            return _Expr(_dynamic_property(arg.fn), "any", tok.pos)
        raise self.error(tok, f"unknown function {tok.value!r} (known: newid, property, p)")

    def parse_property(self) -> _PropertyRef:
        tok = self.peek()
        if tok.kind == "ident" and tok.value.lower() in ("sys", "user") and self.is_op(".", 1):
            self.advance()
            self.advance()
            name_tok = self.peek()
            if name_tok.kind not in ("ident", "name"):
                raise self.error(name_tok, "expected a property name")
            self.advance()
            if tok.value.lower() == "user":
                return _PropertyRef("user", name_tok.value, tok.pos)
            canonical = SYSTEM_PROPERTIES.get(name_tok.value.lower())
            if canonical is None:
                raise self.error(name_tok, f"{name_tok.value!r} is not a system property")
            return _PropertyRef("sys", canonical, tok.pos)
        if tok.kind == "name" or (tok.kind == "ident" and tok.value.upper() not in _KEYWORDS):
            self.advance()
            return _PropertyRef("user", tok.value, tok.pos)
        raise self.error(tok, "expected a property name")

    def parameter(self, tok: _Token) -> object:
        name: str = tok.value
        for key in ("@" + name, name):
            if key in self.parameters:
                return _bound(self.parameters[key])
        lower = name.lower()
        for key, value in self.parameters.items():
            if isinstance(key, str) and key.removeprefix("@").lower() == lower:
                return _bound(value)
        raise self.error(tok, f"no value for parameter {tok.text!r}")

    # -- actions --------------------------------------------------------------------------------

    def parse_action(self) -> tuple[_Statement, ...]:
        statements: list[_Statement] = []
        while True:
            while self.is_op(";"):
                self.advance()
            tok = self.peek()
            if tok.kind == "end" and statements:
                return tuple(statements)
            if self.is_keyword("SET"):
                self.advance()
                ref = self.action_target()
                self.expect_op("=", "expected '=' after the SET property")
                statements.append(_Statement(ref.scope, ref.name, self.parse_or().fn))
            elif self.is_keyword("REMOVE"):
                self.advance()
                ref = self.action_target()
                statements.append(_Statement(ref.scope, ref.name, None))
            else:
                raise self.error(tok, "expected SET or REMOVE")

    def action_target(self) -> _PropertyRef:
        tok = self.peek()
        ref = self.parse_property()
        if ref.scope == "sys" and ref.name not in SETTABLE_SYSTEM_PROPERTIES:
            raise self.error(self.tokens[self.i - 1], f"system property {ref.name} cannot be set or removed by an"
                             f" action (settable: {', '.join(sorted(SETTABLE_SYSTEM_PROPERTIES))})")
        return _PropertyRef(ref.scope, ref.name, tok.pos)


def _comparison(op: str, left: _Expr, right: _Expr) -> _Expr:
    lf, rf = left.fn, right.fn
    return _Expr(lambda view: _compare(op, lf(view), rf(view)), "boolean", left.pos)


def _property_expr(ref: _PropertyRef) -> _Expr:
    name = ref.name
    if ref.scope == "sys":
        return _Expr(lambda view: _system_value(view.system, name), "any", ref.pos)
    lower = name.lower()
    return _Expr(lambda view: _user_value(view.user, name, lower), "any", ref.pos)


def _exists(ref: _PropertyRef) -> Evaluator:
    name = ref.name
    if ref.scope == "sys":
        return lambda view: _system_value(view.system, name) is not None
    lower = name.lower()
    return lambda view: _user_key(view.user, name, lower) is not None


def _dynamic_property(arg: Evaluator) -> Evaluator:
    def lookup(view: MessageView) -> object:
        name = arg(view)
        if name is None:
            return None
        if not isinstance(name, str):
            raise FilterEvaluationError(f"property() needs a string name, got {_show(name)}")
        return _named_property(view, name)

    return lookup


# --------------------------------------------------------------------------------------------------
# Compiled filters
# --------------------------------------------------------------------------------------------------


class CompiledFilter(ABC):
    """A filter ready to evaluate: ``matches(view)`` is True when the rule selects the message."""

    __slots__ = ()

    @abstractmethod
    def matches(self, view: MessageView) -> bool: ...


@dataclass(frozen=True, slots=True)
class _ConstantFilter(CompiledFilter):
    result: bool

    def matches(self, view: MessageView) -> bool:
        return self.result


@dataclass(frozen=True, slots=True)
class _CorrelationMatcher(CompiledFilter):
    system: tuple[tuple[str, str], ...]  # (canonical system name, expected string)
    user: tuple[tuple[str, str, object], ...]  # (name, lower-cased name, expected scalar)

    def matches(self, view: MessageView) -> bool:
        for name, expected in self.system:
            actual = _system_value(view.system, name)
            if not isinstance(actual, str) or actual != expected:
                return False
        return all(_correlation_equal(_user_value(view.user, name, lower), wanted)
                   for name, lower, wanted in self.user)


def _correlation_equal(actual: object, expected: object) -> bool:
    if actual is None:
        return False
    kind = _kind(actual)
    if kind != _kind(expected) or kind not in ("boolean", "number", "string"):
        return False
    return bool(actual == expected)


@dataclass(frozen=True, slots=True)
class _SqlMatcher(CompiledFilter):
    expression: str
    fn: Evaluator = field(repr=False)

    def matches(self, view: MessageView) -> bool:
        return _truth(self.fn(view)) is True


def compile_correlation_filter(f: CorrelationFilter) -> CompiledFilter:
    """Every set field must equal the message's (exact, case-sensitive); every property must equal."""
    system = tuple(
        (name, value) for attr, name in CORRELATION_FIELDS if (value := getattr(f, attr)) is not None
    )
    user = tuple((name, name.lower(), value) for name, value in f.properties.items())
    return _CorrelationMatcher(system, user)


def compile_sql_filter(expression: str, parameters: Mapping[str, object] | None = None, *,
                       new_id: NewId = uuid.uuid4) -> CompiledFilter:
    """Parse a SQL filter expression; ``FilterSyntaxError`` if it is malformed."""
    parser = _Parser(expression, parameters or {}, new_id)
    return _SqlMatcher(expression, parser.parse_filter().fn)


def compile_filter(f: Filter, *, new_id: NewId = uuid.uuid4) -> CompiledFilter:
    """Compile any rule filter; ``FilterSyntaxError`` if a SQL filter is malformed."""
    if isinstance(f, TrueFilter):
        return _ConstantFilter(True)
    if isinstance(f, FalseFilter):
        return _ConstantFilter(False)
    if isinstance(f, CorrelationFilter):
        return compile_correlation_filter(f)
    if isinstance(f, SqlFilter):
        return compile_sql_filter(f.expression, f.parameters, new_id=new_id)
    raise TypeError(f"not a filter: {type(f).__name__}")


# --------------------------------------------------------------------------------------------------
# Compiled actions
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Statement:
    scope: str  # "sys" or "user"
    name: str
    fn: Evaluator | None  # None: REMOVE


def _system_assignment(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise FilterEvaluationError(f"sys.{name} must be set to a string, got {_show(value)}")


def _converted(existing: object, value: object) -> object:
    """SET's implicit conversion: an integer stored over a double becomes a double."""
    if isinstance(existing, float) and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise FilterEvaluationError(f"cannot convert {value} to a double") from None
    return value


@dataclass(frozen=True, slots=True)
class CompiledAction:
    """A rule action ready to apply: ``apply(view)`` returns the changed copy, leaving ``view`` alone."""

    expression: str
    statements: tuple[_Statement, ...] = field(repr=False)

    def apply(self, view: MessageView) -> MessageView:
        system = dict(view.system)
        user = dict(view.user)
        current = MessageView(system, user)
        for statement in self.statements:
            name = statement.name
            if statement.scope == "sys":
                value = None if statement.fn is None else _system_assignment(name, statement.fn(current))
                system[name] = value
                if name == "Label" and "Subject" in system:
                    system["Subject"] = value
                continue
            key = _user_key(user, name, name.lower())
            if statement.fn is None:
                if key is not None:
                    del user[key]
                continue
            assigned = statement.fn(current)
            if key is None:
                user[name] = assigned
            else:
                user[key] = _converted(user[key], assigned)
        return current


def compile_sql_action(expression: str, parameters: Mapping[str, object] | None = None, *,
                       new_id: NewId = uuid.uuid4) -> CompiledAction:
    """Parse a rule action (SET/REMOVE statements); ``FilterSyntaxError`` if it is malformed."""
    parser = _Parser(expression, parameters or {}, new_id)
    return CompiledAction(expression, parser.parse_action())


def compile_action(a: SqlRuleAction | None, *, new_id: NewId = uuid.uuid4) -> CompiledAction | None:
    """Compile a rule's action, or None when the rule has none."""
    if a is None:
        return None
    return compile_sql_action(a.expression, a.parameters, new_id=new_id)
