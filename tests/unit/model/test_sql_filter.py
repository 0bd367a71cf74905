"""SQL filters, correlation filters, boolean filters and rule actions (sodalite.model.filters)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sodalite import errors
from sodalite.errors import FilterEvaluationError, FilterSyntaxError
from sodalite.model.entities import CorrelationFilter, FalseFilter, SqlFilter, SqlRuleAction, TrueFilter
from sodalite.model.filters import (
    MessageView,
    compile_action,
    compile_filter,
    compile_sql_action,
    compile_sql_filter,
)

SYNTAX = "SyntaxError"
EVAL = "EvaluationError"
Expected = bool | str

USER: dict[str, Any] = {
    "color": "red",
    "quantity": 10,
    "price": 2.5,
    "flag": True,
    "off": False,
    "nothing": None,
    "name": "O'Brien",
    "Mixed": "Case",
    "with space": "x",
    "when": datetime(2024, 1, 1, tzinfo=UTC),
    "id": uuid.UUID(int=7),
    "blob": b"\x01",
    "big": 2**62,
}
SYS: dict[str, Any] = {
    "MessageId": "m-1",
    "CorrelationId": "corr-9",
    "To": "store5",
    "ReplyTo": "replies",
    "Label": "hello bus",
    "SessionId": None,
    "ContentType": "application/json",
    "SequenceNumber": 42,
    "DeliveryCount": 0,
    "Size": 256,
    "EnqueuedTimeUtc": datetime(2024, 6, 1, 12, 0, tzinfo=UTC),
    "TimeToLive": timedelta(minutes=5),
}


def counter_ids() -> Callable[[], uuid.UUID]:
    numbers = itertools.count(1)
    return lambda: uuid.UUID(int=next(numbers))


def case(expression: str, expected: Expected, user: Mapping[str, Any] | None = None,
         sys: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None) -> Any:
    """One row: the expression, the message's user and system properties (default: USER, SYS), the outcome."""
    return pytest.param(expression, USER if user is None else user, SYS if sys is None else sys, params or {},
                        expected, id=expression[:60])


def deep(n: int) -> str:
    return "(" * n + "1 = 1" + ")" * n


CASES = [
    # equality, strings, identifiers
    case("color = 'red'", True),
    case("color = 'Red'", False),
    case("color <> 'blue'", True),
    case("color != 'red'", False),
    case("user.color = 'red'", True),
    case("USER.color = 'red'", True),
    case("COLOR = 'red'", True),
    case("Mixed = 'Case'", True),
    case("mixed = 'Case'", True),
    case("[with space] = 'x'", True),
    case("user.[with space] = 'x'", True),
    case('"with space" = \'x\'', True),
    case("name = 'O''Brien'", True),
    case("'' = ''", True),
    case("'a' < 'b'", True),
    case("'B' < 'a'", True),
    case("color = 'red' AND quantity = 10", True),
    case("color = 'blue' OR quantity = 10", True),
    case("color = 'blue' OR quantity = 11", False),
    case("color='red'AND quantity>=10", True),
    case("quantity<>11", True),
    case("größe = 5", True, user={"größe": 5}),
    case("sys = 1", True, user={"sys": 1}),
    # numbers and coercion
    case("quantity = 10", True),
    case("quantity = 10.0", True),
    case("1 = 1.0", True),
    case("quantity > 9.5", True),
    case("quantity >= 10", True),
    case("quantity < 10", False),
    case("quantity <= 10", True),
    case("price = 2.5", True),
    case("price > 2", True),
    case("price * 2 = 5", True),
    case("price = 25E-1", True),
    case("1.5e2 = 150", True),
    case(".5 = 0.5", True),
    case("9223372036854775807 > 0", True),
    case("-9223372036854775808 < 0", True),
    case("9223372036854775808 > 0", SYNTAX),
    case("huge > 1.5", True, user={"huge": 10**30}),
    case("huge + 0.5 > 0", True, user={"huge": 10**30}),
    case("huge + 0.5 > 0", EVAL, user={"huge": 10**400}),
    case("fnan <> fnan", True, user={"fnan": float("nan")}),
    case("quantity = '10'", EVAL),
    case("color > 5", EVAL),
    # arithmetic and precedence
    case("quantity + 5 = 15", True),
    case("quantity - 15 = -5", True),
    case("quantity * quantity = 100", True),
    case("quantity / 4 = 2", True),
    case("quantity / 4.0 = 2.5", True),
    case("quantity % 4 = 2", True),
    case("-7 / 2 = -3", True),
    case("-7 % 3 = -1", True),
    case("7 % -3 = 1", True),
    case("price % 1 = 0.5", True),
    case("quantity / 0 = 1", EVAL),
    case("price / 0 > 1", EVAL),
    case("quantity % 0 = 0", EVAL),
    case("big + big > 0", EVAL),
    case("color + 1 = 2", EVAL),
    case("color + 'x' = 'redx'", EVAL),
    case("flag + 1 = 2", EVAL),
    case("-color = 1", EVAL),
    case("-quantity = -10", True),
    case("- -quantity = 10", True),
    case("+quantity = 10", True),
    case("missing + 1 = 2", False),
    case("missing + 1 IS NULL", True),
    case("NOT (missing + 1 = 2)", False),
    case("1 + 2 * 3 = 7", True),
    case("(1 + 2) * 3 = 9", True),
    case("10 - 2 - 3 = 5", True),
    case("100 / 10 / 5 = 2", True),
    case("2 * 3 % 4 = 2", True),
    case("-2 * -3 = 6", True),
    case("1 = 1 OR 1 = 0 AND 1 = 0", True),
    case("NOT 1 = 0 AND 1 = 1", True),
    case("NOT (1 = 1 AND 1 = 0)", True),
    case("NOT 1 = 1 OR 1 = 1", True),
    # NULL and three-valued logic
    case("NULL = NULL", False),
    case("NOT (NULL = NULL)", False),
    case("NULL IS NULL", True),
    case("missing = 1", False),
    case("NOT missing = 1", False),
    case("missing <> 1", False),
    case("missing IS NULL", True),
    case("missing IS NOT NULL", False),
    case("nothing IS NULL", True),
    case("color IS NOT NULL", True),
    case("NOT (missing = 1 AND 1 = 0)", True),  # unknown AND FALSE = FALSE
    case("NOT (missing = 1 AND 1 = 1)", False),  # unknown AND TRUE = unknown
    case("missing = 1 OR 1 = 1", True),  # unknown OR TRUE = TRUE
    case("NOT (missing = 1 OR 1 = 0)", False),  # unknown OR FALSE = unknown
    case("NOT NOT color = 'red'", True),
    case("NOT NOT missing = 1", False),
    case("NOT (NOT missing = 1)", False),
    case("missing = missing", False),
    case("NULL", False),
    case("NOT NULL", False),
    case("TRUE", True),
    case("FALSE", False),
    case("NOT FALSE", True),
    # booleans
    case("flag", True),
    case("off", False),
    case("NOT off", True),
    case("flag = TRUE", True),
    case("off = FALSE", True),
    case("flag <> off", True),
    case("flag > off", EVAL),
    case("flag = 1", EVAL),
    case("color AND flag", EVAL),
    case("quantity", EVAL),
    case("1 AND flag", SYNTAX),
    case("NOT 'a'", SYNTAX),
    case("'abc'", SYNTAX),
    case("1 + 1", SYNTAX),
    # LIKE
    case("color LIKE 'r%'", True),
    case("color LIKE 'R%'", False),
    case("color LIKE '%e%'", True),
    case("color LIKE '%d'", True),
    case("color LIKE 'r_d'", True),
    case("color LIKE 'r_'", False),
    case("color LIKE '___'", True),
    case("color LIKE '%'", True),
    case("color LIKE 'red'", True),
    case("color LIKE '%%%d'", True),
    case("color NOT LIKE 'b%'", True),
    case("color NOT LIKE 'r%'", False),
    case("sys.Label LIKE '%bus%'", True),
    case("pct LIKE 'ABC\\%' ESCAPE '\\'", True, user={"pct": "ABC%"}),
    case("pct LIKE 'ABC\\%' ESCAPE '\\'", False, user={"pct": "ABCD"}),
    case("pct LIKE 'a!_c' ESCAPE '!'", True, user={"pct": "a_c"}),
    case("pct LIKE 'a!_c' ESCAPE '!'", False, user={"pct": "abc"}),
    case("pct LIKE '%!%%' ESCAPE '!'", True, user={"pct": "50% off"}),
    case("pct LIKE 'a_b'", True, user={"pct": "a\nb"}),
    case("multi LIKE '%a%a%a%b'", False, user={"multi": "a" * 300}),
    case("multi LIKE '%a%a%a%b'", True, user={"multi": "xaxaxaxb"}),
    case("multi LIKE 'x%a_a%b'", True, user={"multi": "xaaqab"}),
    case("missing LIKE 'a%'", False),
    case("NOT (missing LIKE 'a%')", False),
    case("color LIKE NULL", False),
    case("NOT (color LIKE NULL)", False),
    case("color LIKE 'r%' ESCAPE esc", False),
    case("color LIKE pat", True, user={"color": "red", "pat": "r%"}),
    case("color LIKE pat", EVAL, user={"color": "red", "pat": 5}),
    case("color LIKE pat ESCAPE '!'", EVAL, user={"color": "red", "pat": "r!"}),
    case("quantity LIKE '1%'", EVAL),
    case("color LIKE 5", SYNTAX),
    case("color LIKE 'a' ESCAPE 'xy'", SYNTAX),
    case("color LIKE 'ab!' ESCAPE '!'", SYNTAX),
    # IN
    case("color IN ('red', 'blue')", True),
    case("color IN ('blue', 'green')", False),
    case("color NOT IN ('blue', 'green')", True),
    case("color NOT IN ('red')", False),
    case("quantity IN (1, 10.0)", True),
    case("quantity IN (5 + 5)", True),
    case("quantity IN (1, 2, NULL)", False),
    case("NOT (quantity IN (1, 2, NULL))", False),
    case("quantity NOT IN (1, NULL)", False),
    case("quantity IN (10, NULL)", True),
    case("missing IN (1, 2)", False),
    case("missing NOT IN (1, 2)", False),
    case("quantity IN ('10')", EVAL),
    case("sys.To IN ('Store5', 'store5')", True),
    case("StoreId IN('Store1', 'Store2', 'Store3')", True, user={"StoreId": "Store2"}),
    case("color IN ()", SYNTAX),
    case("color IN 'red'", SYNTAX),
    # EXISTS
    case("EXISTS(color)", True),
    case("EXISTS(missing)", False),
    case("NOT EXISTS(missing)", True),
    case("EXISTS(nothing)", True),
    case("EXISTS(user.COLOR)", True),
    case("EXISTS([with space])", True),
    case("EXISTS(sys.Label)", True),
    case("EXISTS(sys.SessionId)", False),
    case("EXISTS(sys.ReplyToSessionId)", False),
    case("EXISTS(1)", SYNTAX),
    case("EXISTS color", SYNTAX),
    # system properties
    case("sys.Label = 'hello bus'", True),
    case("sys.label = 'hello bus'", True),
    case("SYS.LABEL = 'hello bus'", True),
    case("sys.Subject = 'hello bus'", True),
    case("sys.Label = 'x'", True, sys={"Subject": "x"}),
    case("sys.MessageId = 'm-1'", True),
    case("sys.messageid = 'M-1'", False),
    case("sys.MessageId = '00000000-0000-0000-0000-000000000007'", True, sys={"MessageId": uuid.UUID(int=7)}),
    case("sys.CorrelationId LIKE 'corr-%'", True),
    case("sys.To = 'store5'", True),
    case("sys.ReplyTo = 'replies'", True),
    case("sys.ContentType = 'application/json'", True),
    case("sys.SequenceNumber = 42", True),
    case("sys.SequenceNumber > 41.5", True),
    case("sys.DeliveryCount = 0", True),
    case("sys.Size >= 256", True),
    case("sys.EnqueuedTimeUtc > when", True),
    case("sys.EnqueuedTimeUtc - when > sys.TimeToLive", True),
    case("sys.TimeToLive + sys.TimeToLive > sys.TimeToLive", True),
    case("-sys.TimeToLive < sys.TimeToLive", True),
    case("when = naive", True, user={"when": datetime(2024, 1, 1, tzinfo=UTC), "naive": datetime(2024, 1, 1)}),
    case("sys.EnqueuedTimeUtc = 'x'", EVAL),
    case("sys.EnqueuedTimeUtc + 1 > 0", EVAL),
    case("sys.SessionId IS NULL", True),
    case("sys.SessionId = 'a'", False),
    case("sys.ReplyToSessionId IS NULL", True),
    case("sys.ScheduledEnqueueTime IS NULL", True),
    case("sys.Nonexistent = 1", SYNTAX),
    # parameters
    case("color = @c", True, params={"@c": "red"}),
    case("color = @c", True, params={"c": "red"}),
    case("color = @C", True, params={"@c": "red"}),
    case("quantity > @n", True, params={"@n": 5}),
    case("flag = @b", True, params={"@b": True}),
    case("price = @p", True, params={"@p": 2.5}),
    case("color = @missing", SYNTAX),
    # functions
    case("newid() = newid()", False),
    case("newid() IS NOT NULL", True),
    case("newid() = 'x'", EVAL),
    case("property('color') = 'red'", True),
    case("p('color') = 'red'", True),
    case("PROPERTY('sys.Label') = 'hello bus'", True),
    case("property('user.color') = 'red'", True),
    case("property(fieldname) = 'red'", True, user={"fieldname": "color", "color": "red"}),
    case("property('sys.Nope') = 1", EVAL),
    case("property(5) = 1", EVAL),
    case("property(NULL) IS NULL", True),
    case("nosuch() = 1", SYNTAX),
    case("newid(1) IS NULL", SYNTAX),
    # GUIDs and opaque values
    case("id = id", True),
    case("id > id", EVAL),
    case("id = 'x'", EVAL),
    case("blob = blob", True),
    case("blob = 'x'", False),
    case("blob <> 'x'", True),
    case("blob > 1", EVAL),
    # keywords in any case
    case("color = 'red' and quantity = 10", True),
    case("color like 'r%' oR false", True),
    case("missing is null", True),
    case("color not in ('x') AnD exists(color)", True),
    case("true", True),
    case("not FaLsE", True),
    case("missing iS nOt NuLl", False),
    # syntax errors
    case("", SYNTAX),
    case("color =", SYNTAX),
    case("color = 'red", SYNTAX),
    case("(color = 'red'", SYNTAX),
    case("color = 'red')", SYNTAX),
    case("color == 'red'", SYNTAX),
    case("a = 1 = 1", SYNTAX),
    case("color = 'red' AND", SYNTAX),
    case("AND color = 'red'", SYNTAX),
    case("[unterminated = 1", SYNTAX),
    case("[] = 1", SYNTAX),
    case("_x = 1", SYNTAX),
    case("1abc = 1", SYNTAX),
    case("color = 'red' # comment", SYNTAX),
    case("a IS 5", SYNTAX),
    case("a NOT 5", SYNTAX),
    case("sys. = 1", SYNTAX),
    case("x.y = 1", SYNTAX),
    case("@ = 1", SYNTAX),
    case("1e999 = 1", SYNTAX),
    case("color = 'red';", SYNTAX),
    case(deep(10), True),
    case(deep(40), SYNTAX),
]


def evaluate(expression: str, user: Mapping[str, Any], sys: Mapping[str, Any], params: Mapping[str, Any]) -> Expected:
    try:
        compiled = compile_sql_filter(expression, params, new_id=counter_ids())
    except FilterSyntaxError:
        return SYNTAX
    try:
        return compiled.matches(MessageView(sys, user))
    except FilterEvaluationError:
        return EVAL


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 120


@pytest.mark.parametrize(("expression", "user", "sys", "params", "expected"), CASES)
def test_sql_filter(expression: str, user: Mapping[str, Any], sys: Mapping[str, Any], params: Mapping[str, Any],
                    expected: Expected) -> None:
    assert evaluate(expression, user, sys, params) == expected


@pytest.mark.parametrize(("expression", "position", "near"), [
    ("a = 1 AND AND b", 10, "AND"),
    ("color = 'red", 8, "'red"),
    ("", 0, None),
    ("color IN ()", 10, ")"),
    ("color = 'red' AND", 17, None),
    ("sys.Nope = 1", 4, "Nope"),
    ("a = 1 b", 6, "b"),
    ("color = @missing", 8, "@missing"),
    ("9223372036854775808 > 0", 0, "9223372036854775808"),
])
def test_syntax_errors_name_the_position_and_token(expression: str, position: int, near: str | None) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql_filter(expression)
    assert info.value.position == position
    assert info.value.near == near
    shown = "end of input" if near is None else repr(near)
    assert str(info.value).startswith(f"Syntax error at position {position} near {shown}")


def test_syntax_error_message_format() -> None:
    with pytest.raises(FilterSyntaxError, match=r"^Syntax error at position 10 near 'AND': expected an expression$"):
        compile_sql_filter("a = 1 AND AND b")


def test_error_classes() -> None:
    assert issubclass(FilterSyntaxError, errors.ArgumentError)
    assert FilterSyntaxError.condition == "com.microsoft:argument-error"
    assert FilterSyntaxError.http_status == 400 and not FilterSyntaxError.retryable
    assert issubclass(FilterEvaluationError, errors.SodaliteError)
    assert not issubclass(FilterEvaluationError, errors.ArgumentError)
    assert FilterEvaluationError.condition == "amqp:internal-error"
    assert FilterEvaluationError.http_status == 500


def test_newid_uses_the_factory() -> None:
    compiled = compile_sql_filter("newid() = @first", {"first": "unused"}, new_id=lambda: uuid.UUID(int=1))
    with pytest.raises(FilterEvaluationError):
        compiled.matches(MessageView({}, {}))
    fixed = compile_sql_filter("newid() = newid()", new_id=lambda: uuid.UUID(int=1))
    assert fixed.matches(MessageView({}, {}))


def test_compiled_filter_is_reusable_and_does_not_touch_the_view() -> None:
    compiled = compile_sql_filter("color = 'red' AND quantity > 5")
    user = {"color": "red", "quantity": 10}
    view = MessageView({}, user)
    assert all(compiled.matches(view) for _ in range(3))
    assert not compiled.matches(MessageView({}, {"color": "red", "quantity": 1}))
    assert user == {"color": "red", "quantity": 10}


# --------------------------------------------------------------------------------------------------
# compile_filter over every filter kind
# --------------------------------------------------------------------------------------------------

VIEW = MessageView(SYS, USER)


def test_true_and_false_filters() -> None:
    assert compile_filter(TrueFilter()).matches(VIEW)
    assert compile_filter(TrueFilter()).matches(MessageView({}, {}))
    assert not compile_filter(FalseFilter()).matches(VIEW)


def test_sql_filter_entity_with_parameters() -> None:
    flt = SqlFilter("source = @stringParam", {"@stringParam": "orders"})
    assert compile_filter(flt).matches(MessageView({}, {"source": "orders"}))
    assert not compile_filter(flt).matches(MessageView({}, {"source": "other"}))


def test_sql_filter_entity_syntax_error() -> None:
    with pytest.raises(FilterSyntaxError):
        compile_filter(SqlFilter("color = = 'red'"))


@pytest.mark.parametrize(("flt", "expected"), [
    (CorrelationFilter(correlation_id="corr-9"), True),
    (CorrelationFilter(correlation_id="CORR-9"), False),
    (CorrelationFilter(correlation_id="other"), False),
    (CorrelationFilter(message_id="m-1"), True),
    (CorrelationFilter(to="store5"), True),
    (CorrelationFilter(reply_to="replies"), True),
    (CorrelationFilter(label="hello bus"), True),
    (CorrelationFilter(label="hello"), False),
    (CorrelationFilter(content_type="application/json"), True),
    (CorrelationFilter(session_id="s"), False),
    (CorrelationFilter(reply_to_session_id="s"), False),
    (CorrelationFilter(label="hello bus", reply_to="replies", properties={"color": "red"}), True),
    (CorrelationFilter(label="hello bus", reply_to="nope", properties={"color": "red"}), False),
    (CorrelationFilter(properties={"color": "red", "quantity": 10}), True),
    (CorrelationFilter(properties={"color": "Red"}), False),
    (CorrelationFilter(properties={"quantity": 10.0}), True),
    (CorrelationFilter(properties={"quantity": "10"}), False),
    (CorrelationFilter(properties={"price": 2.5}), True),
    (CorrelationFilter(properties={"flag": True}), True),
    (CorrelationFilter(properties={"flag": 1}), False),
    (CorrelationFilter(properties={"off": False}), True),
    (CorrelationFilter(properties={"missing": "x"}), False),
    (CorrelationFilter(properties={"nothing": "x"}), False),
    (CorrelationFilter(properties={"COLOR": "red"}), True),
])
def test_correlation_filter(flt: CorrelationFilter, expected: bool) -> None:
    assert compile_filter(flt).matches(VIEW) is expected


def test_correlation_filter_reads_subject_and_non_string_ids() -> None:
    view = MessageView({"Subject": "s", "MessageId": uuid.UUID(int=1), "CorrelationId": 42}, {})
    assert compile_filter(CorrelationFilter(label="s")).matches(view)
    assert compile_filter(CorrelationFilter(message_id=str(uuid.UUID(int=1)))).matches(view)
    assert compile_filter(CorrelationFilter(correlation_id="42")).matches(view)


# --------------------------------------------------------------------------------------------------
# Actions
# --------------------------------------------------------------------------------------------------


def act(expression: str, user: Mapping[str, Any] | None = None,
        sys: Mapping[str, Any] | None = None) -> MessageView:
    action = compile_sql_action(expression, new_id=counter_ids())
    return action.apply(MessageView(dict(SYS if sys is None else sys), dict(USER if user is None else user)))


def test_compile_action_none() -> None:
    assert compile_action(None) is None


def test_action_entity() -> None:
    action = compile_action(SqlRuleAction("SET quantity = quantity / 2;"))
    assert action is not None
    assert action.apply(VIEW).user["quantity"] == 5


def test_set_user_property_from_expression_does_not_mutate() -> None:
    user = dict(USER)
    system = dict(SYS)
    view = MessageView(system, user)
    after = compile_sql_action("SET quantity = quantity * 3 + 1").apply(view)
    assert after.user["quantity"] == 31
    assert view.user["quantity"] == 10 and user == USER and system == SYS
    assert after.system == SYS


def test_set_new_property_and_null() -> None:
    after = act("SET fresh = 'yes'; SET empty = missing")
    assert after.user["fresh"] == "yes"
    assert "empty" in after.user and after.user["empty"] is None


def test_set_is_case_insensitive_and_converts_to_existing_double() -> None:
    after = act("SET QUANTITY = 1; SET price = 3")
    assert after.user["quantity"] == 1 and "QUANTITY" not in after.user
    assert after.user["price"] == 3.0 and isinstance(after.user["price"], float)


def test_set_system_properties() -> None:
    after = act("SET sys.Label = 'relabelled'; SET sys.To = sys.ReplyTo; SET sys.ContentType = NULL")
    assert after.system["Label"] == "relabelled"
    assert after.system["To"] == "replies"
    assert after.system["ContentType"] is None
    assert act("SET sys.Subject = 'x'").system["Label"] == "x"
    assert act("set SYS.correlationid = 'low'").system["CorrelationId"] == "low"


def test_set_message_id_from_newid() -> None:
    assert act("SET sys.MessageId = newid()").system["MessageId"] == str(uuid.UUID(int=1))
    assert act("SET token = newid()").user["token"] == uuid.UUID(int=1)


def test_remove() -> None:
    after = act("REMOVE color; REMOVE MIXED; REMOVE missing; REMOVE sys.CorrelationId")
    assert "color" not in after.user and "Mixed" not in after.user
    assert after.system["CorrelationId"] is None
    assert set(after.user) == set(USER) - {"color", "Mixed"}


def test_statements_run_in_order_with_or_without_semicolons() -> None:
    after = act("SET a = 1 SET b = a + 1; SET a = b * 10;; REMOVE b;")
    assert after.user["a"] == 20 and "b" not in after.user


def test_documented_example() -> None:
    after = act("SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
                user={"color": "red", "quantity": 10, "priority": "high"})
    assert after.user == {"color": "red", "quantity": 5}
    assert after.system["CorrelationId"] == "low"


def test_set_to_a_condition() -> None:
    after = act("SET big_order = quantity > 5 AND color = 'red'")
    assert after.user["big_order"] is True


@pytest.mark.parametrize("expression", [
    "SET sys.Label = 5",
    "SET sys.To = quantity",
    "SET x = 1 / 0",
    "SET x = color + 1",
    "SET x = property(5)",
])
def test_action_evaluation_errors(expression: str) -> None:
    with pytest.raises(FilterEvaluationError):
        act(expression)


@pytest.mark.parametrize("expression", [
    "",
    ";",
    "SET",
    "SET a",
    "SET a =",
    "SET a = 1 b",
    "UPDATE a = 1",
    "REMOVE 1",
    "REMOVE",
    "SET sys.Nope = 1",
    "SET sys.SequenceNumber = 1",
    "REMOVE sys.Size",
    "SET sys.EnqueuedTimeUtc = NULL",
    "SET a = = 1",
    "SET a = 1, SET b = 2",
])
def test_action_syntax_errors(expression: str) -> None:
    with pytest.raises(FilterSyntaxError):
        compile_sql_action(expression)


def test_action_syntax_error_position() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql_action("SET a = 1; SET sys.Size = 2")
    assert info.value.position == 19 and info.value.near == "Size"
