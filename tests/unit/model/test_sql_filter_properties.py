"""Property tests: whatever the expression and the message, the filter engine raises only its own errors.

Compiling raises nothing but FilterSyntaxError; evaluating returns a bool (a view, for actions) or
raises FilterEvaluationError. Expressions are random trees written out as text, mixing predicates
and expressions freely so that many are ill-typed; messages carry every kind of value a view can hold.
"""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sodalite.errors import FilterEvaluationError, FilterSyntaxError
from sodalite.model.filters import MessageView, compile_sql_action, compile_sql_filter

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

USER_NAMES = ["a", "b", "color", "Color", "with space", "q\"uote", "n"]
PROPERTIES = [
    "a", "b", "color", "COLOR", "n", "missing", "user.a", "USER.b", "[with space]", '"q""uote"', "[a]",
    "sys.Label", "sys.subject", "sys.MessageId", "sys.CorrelationId", "sys.To", "sys.Size", "sys.SequenceNumber",
    "sys.DeliveryCount", "sys.EnqueuedTimeUtc", "sys.TimeToLive", "sys.SessionId", "sys.ContentType",
]
PARAMETERS: dict[str, Any] = {"@s": "red", "@i": 7, "@f": 2.5, "@b": True}


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def literals() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(min_value=-(2**64), max_value=2**64).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.text(max_size=6).map(sql_string),
        st.sampled_from(["TRUE", "FALSE", "NULL", "true", "null", "0", "0.0", "1e308", ".5", "'%'", "'_'", "''"]),
        st.sampled_from(["@s", "@i", "@f", "@b", "@nope"]),
    )


def atoms() -> st.SearchStrategy[str]:
    return st.one_of(
        literals(),
        st.sampled_from(PROPERTIES),
        st.sampled_from(["newid()", "property('a')", "p('sys.Label')", "property('sys.Nope')", "p(5)", "p(NULL)"]),
    )


def maybe_paren(text: str, wrap: bool) -> str:
    return f"({text})" if wrap else text


def combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Operands are parenthesized at random: with parentheses the tree's shape is kept, without them
    # precedence decides (and a predicate where an expression belongs is a syntax error).
    operand = st.tuples(children, st.booleans()).map(lambda t: maybe_paren(*t))
    binary = st.tuples(
        operand,
        st.sampled_from(["+", "-", "*", "/", "%", "=", "<>", "!=", "<", "<=", ">", ">=", "AND", "OR", "and", "or"]),
        operand,
    ).map(lambda t: f"{t[0]} {t[1]} {t[2]}")
    unary = st.tuples(st.sampled_from(["-", "+", "NOT ", "not "]), operand).map(lambda t: f"{t[0]}{t[1]}")
    like = st.tuples(
        operand, st.booleans(), st.one_of(operand, st.text(max_size=6).map(sql_string)),
        st.one_of(st.none(), st.sampled_from(["'!'", "'\\'", "'ab'", "NULL", "a", "5"])),
    ).map(lambda t: f"{t[0]} {'NOT ' if t[1] else ''}LIKE {t[2]}" + (f" ESCAPE {t[3]}" if t[3] else ""))
    member = st.tuples(operand, st.booleans(), st.lists(operand, min_size=1, max_size=4)).map(
        lambda t: f"{t[0]} {'NOT ' if t[1] else ''}IN ({', '.join(t[2])})"
    )
    null_test = st.tuples(operand, st.booleans()).map(lambda t: f"{t[0]} IS {'NOT ' if t[1] else ''}NULL")
    exists = st.sampled_from(PROPERTIES).map(lambda p: f"EXISTS({p})")
    function = operand.map(lambda c: f"property({c})")
    return st.one_of(binary, unary, like, member, null_test, exists, function)


EXPRESSIONS = st.recursive(atoms(), combine, max_leaves=12)
# Filters: mostly a comparison or a test at the top, so that most of them get past the parser.
FILTERS = st.one_of(
    EXPRESSIONS,
    st.tuples(EXPRESSIONS, st.sampled_from(["=", "<>", "<", ">=", "IS NULL AND", "OR"]), EXPRESSIONS).map(
        lambda t: f"({t[0]}) {t[1]} ({t[2]}) OR NOT EXISTS(a)" if t[1] == "OR" else f"({t[0]}) {t[1]} ({t[2]})"
    ),
)

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.text(max_size=8),
    st.datetimes(timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=5))])),
    st.timedeltas(),
    st.uuids(),
    st.binary(max_size=4),
    st.builds(object),
    st.sampled_from([["list"], {"a": 1}, (1, 2)]),
)


@st.composite
def views(draw: st.DrawFn) -> MessageView:
    user = draw(st.dictionaries(st.sampled_from(USER_NAMES), VALUES, max_size=6))
    system = draw(st.dictionaries(
        st.sampled_from(["Label", "Subject", "MessageId", "CorrelationId", "To", "Size", "SequenceNumber",
                         "DeliveryCount", "EnqueuedTimeUtc", "TimeToLive", "SessionId", "ContentType"]),
        VALUES, max_size=6,
    ))
    return MessageView(system, user)


def ids() -> uuid.UUID:
    return uuid.UUID(int=3)


@SETTINGS
@given(expression=FILTERS, view=views())
def test_random_filters_raise_only_filter_errors(expression: str, view: MessageView) -> None:
    try:
        compiled = compile_sql_filter(expression, PARAMETERS, new_id=ids)
    except FilterSyntaxError:
        return
    try:
        result = compiled.matches(view)
    except FilterEvaluationError:
        return
    assert isinstance(result, bool)


@SETTINGS
@given(expression=EXPRESSIONS, target=st.sampled_from(["x", "color", "sys.Label", "sys.MessageId", "[a]"]),
       view=views())
def test_random_actions_raise_only_filter_errors(expression: str, target: str, view: MessageView) -> None:
    before_user, before_system = dict(view.user), dict(view.system)
    try:
        action = compile_sql_action(f"SET {target} = {expression}; REMOVE b", new_id=ids)
    except FilterSyntaxError:
        return
    try:
        after = action.apply(view)
    except FilterEvaluationError:
        return
    assert isinstance(after, MessageView)
    assert "b" not in after.user
    assert dict(view.user) == before_user  # the input view is untouched (same objects, so NaN is fine)
    assert dict(view.system) == before_system


TOKENS = [
    "a", "sys", "user", ".", "Label", "[x y]", '"q"', "'s'", "'", "''", "1", "2.5", "1e3", "@s", "@",
    "(", ")", ",", ";", "=", "<>", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "[", "]",
    "AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE", "SET", "REMOVE",
    "newid", "property", "p", "!", "#", "é", "_",
]


@SETTINGS
@given(parts=st.lists(st.sampled_from(TOKENS), max_size=14), glue=st.sampled_from([" ", ""]), view=views())
def test_random_token_soup(parts: list[str], glue: str, view: MessageView) -> None:
    text = glue.join(parts)
    for compile_ in (lambda: compile_sql_filter(text, PARAMETERS, new_id=ids).matches(view),
                     lambda: compile_sql_action(text, new_id=ids).apply(view)):
        try:
            compile_()
        except (FilterSyntaxError, FilterEvaluationError):
            pass


@SETTINGS
@given(text=st.text(max_size=40))
def test_random_text_raises_only_syntax_errors(text: str) -> None:
    for compile_ in (lambda: compile_sql_filter(text, PARAMETERS), lambda: compile_sql_action(text)):
        try:
            compile_()
        except FilterSyntaxError as exc:
            assert exc.position is not None and 0 <= exc.position <= len(text)
