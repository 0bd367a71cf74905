from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sodalite.errors import ConfigurationError
from sodalite.model.entities import (
    DEFAULT_RULE_NAME,
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
    entity_name_problem,
    format_duration,
    parse_duration,
    validate_entity_name,
)

# --------------------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT1M", timedelta(minutes=1)),
        ("PT45S", timedelta(seconds=45)),
        ("P1D", timedelta(days=1)),
        ("P10675199DT2H48M5.4775807S", TIMESPAN_MAX),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("PT1H", timedelta(hours=1)),
        ("PT20S", timedelta(seconds=20)),
        ("PT0S", timedelta(0)),
        ("P0D", timedelta(0)),
        ("PT90M", timedelta(minutes=90)),
        ("P7D", timedelta(days=7)),
        ("P1DT2H3M4.000005S", timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5)),
        ("PT0.0000019S", timedelta(microseconds=1)),  # 19 ticks, truncated to microseconds
        ("PT1.123456789S", timedelta(seconds=1, microseconds=123456)),
    ],
)
def test_parse_duration_accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "P",
        "PT",
        "P1DT",
        "1M",
        "PT1",
        "P1Y",
        "P1M",
        "P1W",
        "P1Y2M",
        "-PT1M",
        "+PT1M",
        "pt1m",
        "PT1m",
        "PT1.5M",
        "PT0.5H",
        "PT.5S",
        "PT5.S",
        "PT0,5S",
        " PT1M",
        "PT1M ",
        "PT1H1H",
        "PT1S1M",
        "PT\uff11M",  # fullwidth digit
        "00:01:00",
        "60",
        "1 day",
        "P10675199DT2H48M6S",  # beyond TimeSpan.MaxValue
        "P10675199DT2H48M5.4775808S",
        "P99999999999999999999999D",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_duration(text)


def test_parse_duration_rejects_non_string() -> None:
    with pytest.raises(ConfigurationError, match="duration string"):
        parse_duration(60)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(minutes=1), "PT1M"),
        (timedelta(seconds=45), "PT45S"),
        (timedelta(days=1), "P1D"),
        (timedelta(days=1, hours=2), "P1DT2H"),
        (timedelta(milliseconds=500), "PT0.5S"),
        (timedelta(0), "PT0S"),
        (timedelta(hours=25), "P1DT1H"),
        (timedelta(minutes=1, seconds=30), "PT1M30S"),
        (timedelta(microseconds=1), "PT0.000001S"),
        (TIMESPAN_MAX, "P10675199DT2H48M5.4775807S"),
        (TIMESPAN_MAX - timedelta(microseconds=1), "P10675199DT2H48M5.477579S"),
    ],
)
def test_format_duration(value: timedelta, expected: str) -> None:
    assert format_duration(value) == expected


@pytest.mark.parametrize("value", [timedelta(seconds=-1), TIMESPAN_MAX + timedelta(microseconds=1)])
def test_format_duration_rejects_unrepresentable(value: timedelta) -> None:
    with pytest.raises(ConfigurationError):
        format_duration(value)


def test_timespan_max_is_dotnet_max_value_truncated() -> None:
    ticks = 9_223_372_036_854_775_807
    assert timedelta(microseconds=ticks // 10) == TIMESPAN_MAX


@given(st.timedeltas(min_value=timedelta(0), max_value=TIMESPAN_MAX))
def test_duration_round_trip(value: timedelta) -> None:
    text = format_duration(value)
    assert re.fullmatch(r"P[0-9DTHMS.]+", text)
    assert parse_duration(text) == value


# --------------------------------------------------------------------------------------------------
# Defaults and JSON names
# --------------------------------------------------------------------------------------------------


def test_queue_defaults() -> None:
    q = QueueProperties()
    assert q.lock_duration == timedelta(minutes=1)
    assert q.max_size_in_megabytes == 1024
    assert q.requires_duplicate_detection is False
    assert q.requires_session is False
    assert q.default_message_time_to_live == TIMESPAN_MAX
    assert q.dead_lettering_on_message_expiration is False
    assert q.duplicate_detection_history_time_window == timedelta(minutes=10)
    assert q.max_delivery_count == 10
    assert q.enable_batched_operations is True
    assert q.auto_delete_on_idle == TIMESPAN_MAX
    assert q.enable_partitioning is False
    assert q.enable_express is False
    assert q.forward_to is None
    assert q.forward_dead_lettered_messages_to is None
    assert q.max_message_size_in_kilobytes is None
    assert q.status == "Active"
    assert q.user_metadata is None
    assert q.support_ordering is True


def test_topic_defaults() -> None:
    t = TopicProperties()
    assert t.default_message_time_to_live == TIMESPAN_MAX
    assert t.max_size_in_megabytes == 1024
    assert t.requires_duplicate_detection is False
    assert t.duplicate_detection_history_time_window == timedelta(minutes=10)
    assert t.enable_batched_operations is True
    assert t.auto_delete_on_idle == TIMESPAN_MAX
    assert t.enable_partitioning is False
    assert t.enable_express is False
    assert t.support_ordering is True
    assert t.max_message_size_in_kilobytes is None
    assert t.status == "Active"
    assert t.user_metadata is None


def test_subscription_defaults() -> None:
    s = SubscriptionProperties()
    assert s.lock_duration == timedelta(minutes=1)
    assert s.requires_session is False
    assert s.default_message_time_to_live == TIMESPAN_MAX
    assert s.dead_lettering_on_message_expiration is False
    assert s.dead_lettering_on_filter_evaluation_exceptions is True
    assert s.max_delivery_count == 10
    assert s.enable_batched_operations is True
    assert s.auto_delete_on_idle == TIMESPAN_MAX
    assert s.forward_to is None
    assert s.forward_dead_lettered_messages_to is None
    assert s.status == "Active"
    assert s.user_metadata is None


def test_queue_to_json_defaults() -> None:
    assert QueueProperties().to_json() == {
        "LockDuration": "PT1M",
        "MaxSizeInMegabytes": 1024,
        "RequiresDuplicateDetection": False,
        "RequiresSession": False,
        "DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S",
        "DeadLetteringOnMessageExpiration": False,
        "DuplicateDetectionHistoryTimeWindow": "PT10M",
        "MaxDeliveryCount": 10,
        "EnableBatchedOperations": True,
        "AutoDeleteOnIdle": "P10675199DT2H48M5.4775807S",
        "EnablePartitioning": False,
        "EnableExpress": False,
        "ForwardTo": None,
        "ForwardDeadLetteredMessagesTo": None,
        "MaxMessageSizeInKilobytes": None,
        "Status": "Active",
        "UserMetadata": None,
        "SupportOrdering": True,
    }


def test_topic_to_json_keys() -> None:
    assert set(TopicProperties().to_json()) == {
        "DefaultMessageTimeToLive",
        "MaxSizeInMegabytes",
        "RequiresDuplicateDetection",
        "DuplicateDetectionHistoryTimeWindow",
        "EnableBatchedOperations",
        "AutoDeleteOnIdle",
        "EnablePartitioning",
        "EnableExpress",
        "SupportOrdering",
        "MaxMessageSizeInKilobytes",
        "Status",
        "UserMetadata",
    }


def test_subscription_to_json_keys() -> None:
    assert set(SubscriptionProperties().to_json()) == {
        "LockDuration",
        "RequiresSession",
        "DefaultMessageTimeToLive",
        "DeadLetteringOnMessageExpiration",
        "DeadLetteringOnFilterEvaluationExceptions",
        "MaxDeliveryCount",
        "EnableBatchedOperations",
        "AutoDeleteOnIdle",
        "ForwardTo",
        "ForwardDeadLetteredMessagesTo",
        "Status",
        "UserMetadata",
    }


PROPERTY_CLASSES = [QueueProperties, TopicProperties, SubscriptionProperties]


@pytest.mark.parametrize("cls", PROPERTY_CLASSES)
def test_properties_are_frozen_and_slotted(cls: type[Any]) -> None:
    obj = cls()
    assert not hasattr(obj, "__dict__")
    with pytest.raises(AttributeError):
        obj.status = "Disabled"


@pytest.mark.parametrize("cls", PROPERTY_CLASSES)
def test_from_json_empty_gives_defaults(cls: type[Any]) -> None:
    assert cls.from_json({}) == cls()


@pytest.mark.parametrize("cls", PROPERTY_CLASSES)
def test_to_json_is_json_able(cls: type[Any]) -> None:
    import json

    data = cls().to_json()
    assert json.loads(json.dumps(data)) == data


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"lock_duration": timedelta(minutes=5, microseconds=1)}, "lock_duration"),
        ({"lock_duration": timedelta(seconds=4)}, "lock_duration"),
        ({"max_delivery_count": 0}, "max_delivery_count"),
        ({"max_delivery_count": True}, "max_delivery_count"),
        ({"max_size_in_megabytes": 0}, "max_size_in_megabytes"),
        ({"duplicate_detection_history_time_window": timedelta(seconds=19)}, "duplicate_detection"),
        ({"duplicate_detection_history_time_window": timedelta(days=7, seconds=1)}, "duplicate_detection"),
        ({"auto_delete_on_idle": timedelta(minutes=4)}, "auto_delete_on_idle"),
        ({"default_message_time_to_live": timedelta(0)}, "default_message_time_to_live"),
        ({"default_message_time_to_live": TIMESPAN_MAX + timedelta(days=1)}, "default_message_time"),
        ({"status": "active"}, "status"),
        ({"status": "Paused"}, "status"),
        ({"forward_to": ""}, "forward_to"),
        ({"forward_to": "-bad"}, "forward_to"),
        ({"forward_dead_lettered_messages_to": "a b"}, "forward_dead_lettered_messages_to"),
        ({"max_message_size_in_kilobytes": 0}, "max_message_size_in_kilobytes"),
        ({"max_message_size_in_kilobytes": 102401}, "max_message_size_in_kilobytes"),
        ({"user_metadata": "x" * 1025}, "user_metadata"),
        ({"requires_session": 1}, "requires_session"),
        ({"lock_duration": 60}, "lock_duration"),
    ],
)
def test_queue_properties_validate(kwargs: dict[str, Any], field_name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"QueueProperties.{field_name}"):
        QueueProperties(**kwargs)


def test_boundaries_are_inclusive() -> None:
    QueueProperties(lock_duration=timedelta(seconds=5))
    QueueProperties(lock_duration=timedelta(minutes=5))
    QueueProperties(duplicate_detection_history_time_window=timedelta(seconds=20))
    QueueProperties(duplicate_detection_history_time_window=timedelta(days=7))
    QueueProperties(auto_delete_on_idle=timedelta(minutes=5))
    QueueProperties(max_delivery_count=1, max_message_size_in_kilobytes=102400)
    SubscriptionProperties(lock_duration=timedelta(seconds=5), max_delivery_count=1)


def test_from_json_names_the_field_with_path_prefix() -> None:
    with pytest.raises(ConfigurationError) as info:
        QueueProperties.from_json({"LockDuration": "PT10M"}, path="a.b[1].Properties")
    assert str(info.value).startswith("a.b[1].Properties.LockDuration: ")
    assert "PT5M" in str(info.value)


def test_from_json_without_path_names_the_key() -> None:
    with pytest.raises(ConfigurationError, match=r"^MaxDeliveryCount: must be at least 1, got 0$"):
        QueueProperties.from_json({"MaxDeliveryCount": 0})


@pytest.mark.parametrize(
    ("data", "key", "reason"),
    [
        ({"LockDurration": "PT1M"}, "LockDurration", "did you mean 'LockDuration'"),
        ({"lockDuration": "PT1M"}, "lockDuration", "did you mean 'LockDuration'"),
        ({"Foo": 1}, "Foo", "unknown property"),
        ({"LockDuration": 60}, "LockDuration", "duration string"),
        ({"LockDuration": "1 minute"}, "LockDuration", "invalid ISO 8601 duration"),
        ({"LockDuration": "PT4S"}, "LockDuration", "between PT5S and PT5M"),
        ({"MaxDeliveryCount": "3"}, "MaxDeliveryCount", "integer"),
        ({"MaxDeliveryCount": 3.0}, "MaxDeliveryCount", "integer"),
        ({"MaxDeliveryCount": True}, "MaxDeliveryCount", "integer"),
        ({"MaxDeliveryCount": 0}, "MaxDeliveryCount", "at least 1"),
        ({"RequiresSession": "false"}, "RequiresSession", "boolean"),
        ({"RequiresSession": 0}, "RequiresSession", "boolean"),
        ({"RequiresSession": None}, "RequiresSession", "boolean"),
        ({"Status": "Paused"}, "Status", "must be one of"),
        ({"Status": 1}, "Status", "must be one of"),
        ({"ForwardTo": 5}, "ForwardTo", "string"),
        ({"ForwardTo": "bad name"}, "ForwardTo", "invalid queue name"),
        ({"UserMetadata": 5}, "UserMetadata", "string"),
        ({"MaxMessageSizeInKilobytes": "1"}, "MaxMessageSizeInKilobytes", "integer"),
        ({"AutoDeleteOnIdle": "PT1M"}, "AutoDeleteOnIdle", "at least PT5M"),
        ({"DuplicateDetectionHistoryTimeWindow": "P8D"}, "DuplicateDetectionHistoryTimeWindow", "P7D"),
    ],
)
def test_queue_from_json_rejects(data: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        QueueProperties.from_json(data, path="X")
    message = str(info.value)
    assert message.startswith(f"X.{key}: "), message
    assert reason in message


def test_from_json_rejects_non_object() -> None:
    with pytest.raises(ConfigurationError, match=r"^X: must be a JSON object, got array"):
        QueueProperties.from_json([], path="X")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "key"),
    [
        (TopicProperties, "LockDuration"),
        (TopicProperties, "MaxDeliveryCount"),
        (TopicProperties, "RequiresSession"),
        (TopicProperties, "ForwardTo"),
        (SubscriptionProperties, "MaxSizeInMegabytes"),
        (SubscriptionProperties, "RequiresDuplicateDetection"),
        (SubscriptionProperties, "EnablePartitioning"),
        (QueueProperties, "DeadLetteringOnFilterEvaluationExceptions"),
    ],
)
def test_properties_of_other_entity_kinds_are_unknown(cls: type[Any], key: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^P.{key}: unknown property"):
        cls.from_json({key: None}, path="P")


def test_from_json_normalises_empty_forward_and_status_case() -> None:
    q = QueueProperties.from_json(
        {"ForwardTo": "", "ForwardDeadLetteredMessagesTo": "", "Status": "senddisabled"}
    )
    assert q.forward_to is None
    assert q.forward_dead_lettered_messages_to is None
    assert q.status == "SendDisabled"


def test_from_json_accepts_null_for_optional_values() -> None:
    q = QueueProperties.from_json(
        {"ForwardTo": None, "UserMetadata": None, "MaxMessageSizeInKilobytes": None}
    )
    assert q == QueueProperties()


def test_from_json_accepts_timespan_max_spelled_by_dotnet() -> None:
    q = QueueProperties.from_json({"DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S"})
    assert q.default_message_time_to_live == TIMESPAN_MAX


# --------------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------------


def _durations(low: timedelta, high: timedelta) -> st.SearchStrategy[timedelta]:
    return st.one_of(st.sampled_from([low, high]), st.timedeltas(min_value=low, max_value=high))


_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,20}[A-Za-z0-9])?", fullmatch=True)
_optional_names = st.none() | _names
_status = st.sampled_from(["Active", "Disabled", "SendDisabled", "ReceiveDisabled"])
_metadata = st.none() | st.text(max_size=50)
_lock = _durations(timedelta(seconds=5), timedelta(minutes=5))
_ttl = _durations(timedelta(seconds=1), TIMESPAN_MAX)
_window = _durations(timedelta(seconds=20), timedelta(days=7))
_idle = _durations(timedelta(minutes=5), TIMESPAN_MAX)
_count = st.integers(min_value=1, max_value=2_147_483_647)
_kb = st.none() | st.integers(min_value=1, max_value=102400)

queue_properties = st.builds(
    QueueProperties,
    lock_duration=_lock,
    max_size_in_megabytes=_count,
    requires_duplicate_detection=st.booleans(),
    requires_session=st.booleans(),
    default_message_time_to_live=_ttl,
    dead_lettering_on_message_expiration=st.booleans(),
    duplicate_detection_history_time_window=_window,
    max_delivery_count=_count,
    enable_batched_operations=st.booleans(),
    auto_delete_on_idle=_idle,
    enable_partitioning=st.booleans(),
    enable_express=st.booleans(),
    forward_to=_optional_names,
    forward_dead_lettered_messages_to=_optional_names,
    max_message_size_in_kilobytes=_kb,
    status=_status,
    user_metadata=_metadata,
    support_ordering=st.booleans(),
)

topic_properties = st.builds(
    TopicProperties,
    default_message_time_to_live=_ttl,
    max_size_in_megabytes=_count,
    requires_duplicate_detection=st.booleans(),
    duplicate_detection_history_time_window=_window,
    enable_batched_operations=st.booleans(),
    auto_delete_on_idle=_idle,
    enable_partitioning=st.booleans(),
    enable_express=st.booleans(),
    support_ordering=st.booleans(),
    max_message_size_in_kilobytes=_kb,
    status=_status,
    user_metadata=_metadata,
)

subscription_properties = st.builds(
    SubscriptionProperties,
    lock_duration=_lock,
    requires_session=st.booleans(),
    default_message_time_to_live=_ttl,
    dead_lettering_on_message_expiration=st.booleans(),
    dead_lettering_on_filter_evaluation_exceptions=st.booleans(),
    max_delivery_count=_count,
    enable_batched_operations=st.booleans(),
    auto_delete_on_idle=_idle,
    forward_to=_optional_names,
    forward_dead_lettered_messages_to=_optional_names,
    status=_status,
    user_metadata=_metadata,
)


@given(st.one_of(queue_properties, topic_properties, subscription_properties))
def test_properties_round_trip(props: QueueProperties | TopicProperties | SubscriptionProperties) -> None:
    import json

    data = json.loads(json.dumps(props.to_json()))
    assert type(props).from_json(data) == props


def test_every_field_has_a_distinct_json_name() -> None:
    for cls in PROPERTY_CLASSES:
        names = [f.metadata["spec"].json for f in fields(cls)]
        assert len(names) == len(set(names))
        assert all(name[0].isupper() for name in names)


# --------------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("q", "queue"),
        ("queue.1", "queue"),
        ("a/b/c", "queue"),
        ("A-b_c.d", "topic"),
        ("x" * 260, "queue"),
        ("s" * 50, "subscription"),
        ("sub-1_x.y", "subscription"),
        ("r" * 50, "rule"),
        ("$Default", "rule"),
        ("$default", "rule"),
    ],
)
def test_valid_names(name: str, kind: Any) -> None:
    assert entity_name_problem(name, kind) is None
    assert validate_entity_name(name, kind) == name


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("", "queue"),
        ("-q", "queue"),
        ("q-", "queue"),
        (".q", "topic"),
        ("q/", "queue"),
        ("/q", "queue"),
        ("a b", "queue"),
        ("a$b", "queue"),
        ("x" * 261, "queue"),
        ("x" * 261, "topic"),
        ("s" * 51, "subscription"),
        ("a/b", "subscription"),
        ("a/b", "rule"),
        ("r" * 51, "rule"),
        ("$Default", "queue"),
        ("$Other", "rule"),
        ("caf\u00e9", "queue"),
    ],
)
def test_invalid_names(name: str, kind: Any) -> None:
    assert entity_name_problem(name, kind) is not None
    with pytest.raises(ConfigurationError, match=r"^where: "):
        validate_entity_name(name, kind, label="where")


def test_non_string_name() -> None:
    assert entity_name_problem(5, "queue") == "must be a string, got number"


# --------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------


def test_rule_defaults_to_true_filter_without_action() -> None:
    rule = RuleDescription(DEFAULT_RULE_NAME)
    assert rule.filter == TrueFilter()
    assert rule.action is None


def test_true_and_false_filters_differ() -> None:
    true_filter: object = TrueFilter()
    assert true_filter != FalseFilter()
    assert true_filter == TrueFilter()


@pytest.mark.parametrize(
    "rule",
    [
        RuleDescription("$Default", TrueFilter()),
        RuleDescription("never", FalseFilter()),
        RuleDescription("sql", SqlFilter("color = 'red'")),
        RuleDescription("sqlp", SqlFilter("n > @n", {"@n": 3, "@s": "x", "@f": 1.5, "@b": True})),
        RuleDescription("act", SqlFilter("1=1"), SqlRuleAction("SET x = 1")),
        RuleDescription("corr", CorrelationFilter(correlation_id="c")),
        RuleDescription(
            "corr-all",
            CorrelationFilter(
                correlation_id="c",
                message_id="m",
                to="t",
                reply_to="r",
                label="l",
                session_id="s",
                reply_to_session_id="rs",
                content_type="application/json",
                properties={"a": "1", "b": 2, "c": 2.5, "d": False},
            ),
            SqlRuleAction("SET y = 2"),
        ),
        RuleDescription("props-only", CorrelationFilter(properties={"k": "v"})),
    ],
)
def test_rule_round_trip(rule: RuleDescription) -> None:
    import json

    data = json.loads(json.dumps(rule.to_json()))
    assert RuleDescription.from_json(data) == rule


def test_rule_to_json_shape() -> None:
    rule = RuleDescription("r2", SqlFilter("color = 'red'"), SqlRuleAction("SET x = 1"))
    assert rule.to_json() == {
        "Name": "r2",
        "Properties": {
            "FilterType": "Sql",
            "SqlFilter": {"SqlExpression": "color = 'red'", "Parameters": {}},
            "Action": {"SqlExpression": "SET x = 1"},
        },
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bad name"}, "RuleDescription.name"),
        ({"name": "r", "filter": "1=1"}, "RuleDescription.filter"),
        ({"name": "r", "action": "SET x = 1"}, "RuleDescription.action"),
    ],
)
def test_rule_description_validates(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RuleDescription(**kwargs)


def test_filter_validation() -> None:
    with pytest.raises(ConfigurationError, match=r"SqlFilter\.expression"):
        SqlFilter("  ")
    with pytest.raises(ConfigurationError, match=r"SqlFilter\.expression"):
        SqlFilter("x" * 1025)
    with pytest.raises(ConfigurationError, match=r"SqlFilter\.parameters"):
        SqlFilter("1=1", {"@p": [1]})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match=r"SqlRuleAction\.expression"):
        SqlRuleAction("")
    with pytest.raises(ConfigurationError, match="at least one property"):
        CorrelationFilter()
    with pytest.raises(ConfigurationError, match=r"CorrelationFilter\.label"):
        CorrelationFilter(label=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"CorrelationFilter\.properties"):
        CorrelationFilter(properties={"x": float("nan")})
    with pytest.raises(ConfigurationError, match=r"CorrelationFilter\.properties"):
        CorrelationFilter(properties={"": "v"})


def test_rule_from_json_filter_type_is_case_insensitive() -> None:
    rule = RuleDescription.from_json({"Name": "r", "Properties": {"FilterType": "true"}})
    assert rule.filter == TrueFilter()
    rule = RuleDescription.from_json({"Name": "r", "Properties": {"FilterType": "FALSE"}})
    assert rule.filter == FalseFilter()


def test_rule_from_json_accepts_null_action() -> None:
    rule = RuleDescription.from_json({"Name": "r", "Properties": {"FilterType": "True", "Action": None}})
    assert rule.action is None


@pytest.mark.parametrize(
    ("data", "where", "reason"),
    [
        ({"Properties": {"FilterType": "True"}}, "R.Name", "required"),
        ({"Name": "r"}, "R.Properties", "required"),
        ({"Name": "r", "Properties": []}, "R.Properties", "JSON object"),
        ({"Name": "r", "Properties": {}}, "R.Properties.FilterType", "required"),
        ({"Name": "r", "Properties": {"FilterType": 1}}, "R.Properties.FilterType", "string"),
        ({"Name": "r", "Properties": {"FilterType": "Regex"}}, "R.Properties.FilterType", "one of"),
        ({"Name": "r", "Properties": {"FilterType": "Sql"}}, "R.Properties.SqlFilter", "required"),
        (
            {"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {}}},
            "R.Properties.SqlFilter.SqlExpression",
            "required",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": ""}}},
            "R.Properties.SqlFilter.SqlExpression",
            "empty",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpresion": "1=1"}}},
            "R.Properties.SqlFilter.SqlExpresion",
            "did you mean 'SqlExpression'",
        ),
        (
            {
                "Name": "r",
                "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1", "Parameters": []}},
            },
            "R.Properties.SqlFilter.Parameters",
            "JSON object",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Correlation"}},
            "R.Properties.CorrelationFilter",
            "required",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {}}},
            "R.Properties.CorrelationFilter",
            "at least one property",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": 1}}},
            "R.Properties.CorrelationFilter.Label",
            "string",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Lable": "x"}}},
            "R.Properties.CorrelationFilter.Lable",
            "did you mean 'Label'",
        ),
        (
            {
                "Name": "r",
                "Properties": {
                    "FilterType": "Correlation",
                    "CorrelationFilter": {"Properties": {"p": {"x": 1}}},
                },
            },
            "R.Properties.CorrelationFilter.Properties.p",
            "string, number or boolean",
        ),
        (
            {
                "Name": "r",
                "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": None}}},
            },
            "R.Properties.CorrelationFilter.Properties.p",
            "string, number or boolean",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "True", "SqlFilter": {"SqlExpression": "1=1"}}},
            "R.Properties.SqlFilter",
            "not allowed with FilterType 'True'",
        ),
        (
            {
                "Name": "r",
                "Properties": {
                    "FilterType": "Sql",
                    "SqlFilter": {"SqlExpression": "1=1"},
                    "CorrelationFilter": {},
                },
            },
            "R.Properties.CorrelationFilter",
            "not allowed with FilterType 'Sql'",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "True", "Action": {}}},
            "R.Properties.Action.SqlExpression",
            "required",
        ),
        (
            {"Name": "r", "Properties": {"FilterType": "True", "Action": "SET x = 1"}},
            "R.Properties.Action",
            "JSON object",
        ),
        ({"Name": "r", "Properties": {"FilterType": "True", "Filter": 1}}, "R.Properties.Filter", "unknown"),
        ({"Name": "r r", "Properties": {"FilterType": "True"}}, "R.Name", "invalid rule name"),
        ({"Name": "r", "Extra": 1, "Properties": {"FilterType": "True"}}, "R.Extra", "unknown"),
    ],
)
def test_rule_from_json_rejects(data: dict[str, Any], where: str, reason: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RuleDescription.from_json(data, path="R")
    message = str(info.value)
    assert message.startswith(f"{where}: "), message
    assert reason in message
