from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest

from sodalite.errors import ConfigurationError
from sodalite.model.authorization import AccessRights
from sodalite.model.config import (
    DEFAULT_AUTHORIZATION_RULE,
    AuthorizationRule,
    NamespaceConfig,
    QueueConfig,
    SubscriptionConfig,
    TopicConfig,
    default_namespace,
    load_config,
    load_config_text,
)
from sodalite.model.entities import (
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

# The sample Config.json shipped with the Azure Service Bus emulator, in its shape and values.
EMULATOR_SAMPLE = """
{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "queue.1",
            "Properties": {
              "DeadLetteringOnMessageExpiration": false,
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "",
              "ForwardTo": "",
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3,
              "RequiresDuplicateDetection": false,
              "RequiresSession": false
            }
          }
        ],
        "Topics": [
          {
            "Name": "topic.1",
            "Properties": {
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "RequiresDuplicateDetection": false
            },
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Properties": {
                  "DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H",
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "",
                  "ForwardTo": "",
                  "RequiresSession": false
                },
                "Rules": [
                  {
                    "Name": "app-prop-filter-1",
                    "Properties": {
                      "FilterType": "Correlation",
                      "CorrelationFilter": {
                        "ContentType": "application/text",
                        "CorrelationId": "id1",
                        "Label": "subject1",
                        "MessageId": "msgid1",
                        "ReplyTo": "someQueue",
                        "ReplyToSessionId": "sessionId",
                        "SessionId": "session1",
                        "To": "xyz",
                        "Properties": {"prop1": "value1"}
                      }
                    }
                  }
                ]
              },
              {
                "Name": "subscription.2",
                "Properties": {
                  "DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H",
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "",
                  "ForwardTo": "",
                  "RequiresSession": false
                },
                "Rules": [
                  {
                    "Name": "user-prop-filter-1",
                    "Properties": {
                      "FilterType": "Correlation",
                      "CorrelationFilter": {"Properties": {"prop3": "value3"}}
                    }
                  },
                  {
                    "Name": "sql-filter-1",
                    "Properties": {
                      "FilterType": "Sql",
                      "SqlFilter": {"SqlExpression": "sys.MessageId = '123456' AND userProp1 = 'value1'"},
                      "Action": {"SqlExpression": "SET sys.To = 'Entity'"}
                    }
                  }
                ]
              },
              {
                "Name": "subscription.3",
                "Properties": {
                  "DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H",
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "",
                  "ForwardTo": "",
                  "RequiresSession": false
                }
              }
            ]
          }
        ]
      }
    ],
    "Logging": {
      "Type": "File"
    }
  }
}
"""


def _doc(namespace: dict[str, Any] | None = None, **user: Any) -> dict[str, Any]:
    ns = {"Name": "sbemulatorns"} if namespace is None else namespace
    return {"UserConfig": {"Namespaces": [ns], **user}}


def _one(namespace: dict[str, Any]) -> NamespaceConfig:
    [ns] = load_config(_doc(namespace))
    return ns


def _queue_doc(properties: dict[str, Any]) -> dict[str, Any]:
    return {"Name": "ns1", "Queues": [{"Name": "q", "Properties": properties}]}


def _topic_doc(properties: dict[str, Any]) -> dict[str, Any]:
    return {"Name": "ns1", "Topics": [{"Name": "t", "Properties": properties}]}


def _subscription_doc(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "Name": "ns1",
        "Queues": [{"Name": "target"}],
        "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": properties}]}],
    }


def _error(data: Any) -> str:
    with pytest.raises(ConfigurationError) as info:
        load_config(data)
    return str(info.value)


# --------------------------------------------------------------------------------------------------
# The emulator sample
# --------------------------------------------------------------------------------------------------


def test_emulator_sample_parses() -> None:
    [ns] = load_config_text(EMULATOR_SAMPLE)
    assert ns.name == "sbemulatorns"
    assert ns.authorization_rules == (AuthorizationRule("RootManageSharedAccessKey", "SAS_KEY_VALUE"),)
    assert ns.max_message_size_in_kilobytes == 256
    assert ns.partition_count == 16

    [queue] = ns.queues
    assert queue.name == "queue.1"
    assert queue.properties == QueueProperties(
        dead_lettering_on_message_expiration=False,
        default_message_time_to_live=timedelta(hours=1),
        duplicate_detection_history_time_window=timedelta(seconds=20),
        forward_dead_lettered_messages_to=None,
        forward_to=None,
        lock_duration=timedelta(minutes=1),
        max_delivery_count=3,
        requires_duplicate_detection=False,
        requires_session=False,
    )

    [topic] = ns.topics
    assert topic.name == "topic.1"
    assert topic.properties == TopicProperties(
        default_message_time_to_live=timedelta(hours=1),
        duplicate_detection_history_time_window=timedelta(seconds=20),
    )
    sub1, sub2, sub3 = topic.subscriptions
    assert [s.name for s in topic.subscriptions] == ["subscription.1", "subscription.2", "subscription.3"]
    assert sub1.properties == SubscriptionProperties(
        default_message_time_to_live=timedelta(hours=1), max_delivery_count=3
    )
    assert sub1.rules == (
        RuleDescription(
            "app-prop-filter-1",
            CorrelationFilter(
                correlation_id="id1",
                message_id="msgid1",
                to="xyz",
                reply_to="someQueue",
                label="subject1",
                session_id="session1",
                reply_to_session_id="sessionId",
                content_type="application/text",
                properties={"prop1": "value1"},
            ),
        ),
    )
    assert sub2.rules == (
        RuleDescription("user-prop-filter-1", CorrelationFilter(properties={"prop3": "value3"})),
        RuleDescription(
            "sql-filter-1",
            SqlFilter("sys.MessageId = '123456' AND userProp1 = 'value1'"),
            SqlRuleAction("SET sys.To = 'Entity'"),
        ),
    )
    assert sub3.rules == (RuleDescription("$Default", TrueFilter()),)


def test_sample_without_topics_parses() -> None:
    [ns] = load_config(
        {
            "UserConfig": {
                "Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "background-task"}]}],
                "Logging": {"Type": "File"},
            }
        }
    )
    assert ns.topics == ()
    assert ns.queues == (QueueConfig("background-task", QueueProperties()),)


def test_results_are_frozen_dataclasses() -> None:
    [ns] = load_config_text(EMULATOR_SAMPLE)
    with pytest.raises(AttributeError):
        ns.name = "other"  # type: ignore[misc]
    assert isinstance(ns.queues, tuple)
    assert isinstance(ns.topics, tuple)
    assert isinstance(ns.topics[0].subscriptions, tuple)
    assert isinstance(ns.topics[0].subscriptions[0].rules, tuple)


# --------------------------------------------------------------------------------------------------
# Every property lands in its field
# --------------------------------------------------------------------------------------------------

# (JSON name, JSON value, attribute, expected Python value); the JSON values are not the defaults.
_ENTITY_KEYS = [{"KeyName": "listener", "PrimaryKey": "p", "Rights": ["Listen"]}]
_ENTITY_RULES = (AuthorizationRule("listener", "p", None, frozenset({AccessRights.LISTEN})),)

QUEUE_CASES: list[tuple[str, Any, str, Any]] = [
    ("AuthorizationRules", _ENTITY_KEYS, "authorization_rules", _ENTITY_RULES),
    ("LockDuration", "PT30S", "lock_duration", timedelta(seconds=30)),
    ("MaxSizeInMegabytes", 5120, "max_size_in_megabytes", 5120),
    ("RequiresDuplicateDetection", True, "requires_duplicate_detection", True),
    ("RequiresSession", True, "requires_session", True),
    ("DefaultMessageTimeToLive", "P1DT2H", "default_message_time_to_live", timedelta(days=1, hours=2)),
    ("DeadLetteringOnMessageExpiration", True, "dead_lettering_on_message_expiration", True),
    (
        "DuplicateDetectionHistoryTimeWindow",
        "PT45S",
        "duplicate_detection_history_time_window",
        timedelta(seconds=45),
    ),
    ("MaxDeliveryCount", 3, "max_delivery_count", 3),
    ("EnableBatchedOperations", False, "enable_batched_operations", False),
    ("AutoDeleteOnIdle", "P1D", "auto_delete_on_idle", timedelta(days=1)),
    ("EnablePartitioning", True, "enable_partitioning", True),
    ("EnableExpress", True, "enable_express", True),
    ("ForwardTo", "target", "forward_to", "target"),
    ("ForwardDeadLetteredMessagesTo", "target", "forward_dead_lettered_messages_to", "target"),
    ("MaxMessageSizeInKilobytes", 1024, "max_message_size_in_kilobytes", 1024),
    ("Status", "SendDisabled", "status", "SendDisabled"),
    ("UserMetadata", "some text", "user_metadata", "some text"),
    ("SupportOrdering", False, "support_ordering", False),
]

TOPIC_CASES: list[tuple[str, Any, str, Any]] = [
    ("DefaultMessageTimeToLive", "PT0.5S", "default_message_time_to_live", None),  # below 1 s: rejected
    ("DefaultMessageTimeToLive", "PT10M", "default_message_time_to_live", timedelta(minutes=10)),
    ("MaxSizeInMegabytes", 2048, "max_size_in_megabytes", 2048),
    ("RequiresDuplicateDetection", True, "requires_duplicate_detection", True),
    (
        "DuplicateDetectionHistoryTimeWindow",
        "P7D",
        "duplicate_detection_history_time_window",
        timedelta(days=7),
    ),
    ("EnableBatchedOperations", False, "enable_batched_operations", False),
    ("AutoDeleteOnIdle", "PT5M", "auto_delete_on_idle", timedelta(minutes=5)),
    ("EnablePartitioning", True, "enable_partitioning", True),
    ("EnableExpress", True, "enable_express", True),
    ("SupportOrdering", False, "support_ordering", False),
    ("MaxMessageSizeInKilobytes", 102400, "max_message_size_in_kilobytes", 102400),
    ("Status", "Disabled", "status", "Disabled"),
    ("UserMetadata", "", "user_metadata", ""),
    ("AuthorizationRules", _ENTITY_KEYS, "authorization_rules", _ENTITY_RULES),
]

SUBSCRIPTION_CASES: list[tuple[str, Any, str, Any]] = [
    ("LockDuration", "PT5M", "lock_duration", timedelta(minutes=5)),
    ("RequiresSession", True, "requires_session", True),
    ("DefaultMessageTimeToLive", "PT1H", "default_message_time_to_live", timedelta(hours=1)),
    ("DeadLetteringOnMessageExpiration", True, "dead_lettering_on_message_expiration", True),
    (
        "DeadLetteringOnFilterEvaluationExceptions",
        False,
        "dead_lettering_on_filter_evaluation_exceptions",
        False,
    ),
    ("MaxDeliveryCount", 1, "max_delivery_count", 1),
    ("EnableBatchedOperations", False, "enable_batched_operations", False),
    ("AutoDeleteOnIdle", "P10675199DT2H48M5.4775807S", "auto_delete_on_idle", TIMESPAN_MAX),
    ("ForwardTo", "target", "forward_to", "target"),
    ("ForwardDeadLetteredMessagesTo", "target", "forward_dead_lettered_messages_to", "target"),
    ("Status", "ReceiveDisabled", "status", "ReceiveDisabled"),
    ("UserMetadata", "meta", "user_metadata", "meta"),
]


def _queue_with_target(properties: dict[str, Any]) -> dict[str, Any]:
    doc = _queue_doc(properties)
    doc["Queues"].append({"Name": "target"})
    return doc


@pytest.mark.parametrize(("key", "value", "attr", "expected"), QUEUE_CASES)
def test_every_queue_property(key: str, value: Any, attr: str, expected: Any) -> None:
    ns = _one(_queue_with_target({key: value}))
    props = ns.queues[0].properties
    assert getattr(props, attr) == expected
    assert getattr(QueueProperties(), attr) != expected  # the value is not the default
    assert props == QueueProperties(**{attr: expected})  # and nothing else changed


@pytest.mark.parametrize(("key", "value", "attr", "expected"), TOPIC_CASES)
def test_every_topic_property(key: str, value: Any, attr: str, expected: Any) -> None:
    if expected is None:
        assert _error(_doc(_topic_doc({key: value}))).startswith(
            f"UserConfig.Namespaces[0].Topics[0].Properties.{key}: "
        )
        return
    props = _one(_topic_doc({key: value})).topics[0].properties
    assert getattr(props, attr) == expected
    assert getattr(TopicProperties(), attr) != expected
    assert props == TopicProperties(**{attr: expected})


@pytest.mark.parametrize(("key", "value", "attr", "expected"), SUBSCRIPTION_CASES)
def test_every_subscription_property(key: str, value: Any, attr: str, expected: Any) -> None:
    props = _one(_subscription_doc({key: value})).topics[0].subscriptions[0].properties
    assert getattr(props, attr) == expected
    assert props == SubscriptionProperties(**{attr: expected})


def test_cases_cover_every_property() -> None:
    # AuthorizationRules is left out of to_json when empty
    assert {c[0] for c in QUEUE_CASES} == {*QueueProperties().to_json(), "AuthorizationRules"}
    assert {c[0] for c in TOPIC_CASES} == {*TopicProperties().to_json(), "AuthorizationRules"}
    assert {c[0] for c in SUBSCRIPTION_CASES} == set(SubscriptionProperties().to_json())


def test_all_properties_at_once_round_trip_through_to_json() -> None:
    queue = QueueProperties(**{attr: expected for _, _, attr, expected in QUEUE_CASES})
    topic = TopicProperties(
        **{attr: expected for _, _, attr, expected in TOPIC_CASES if expected is not None}
    )
    sub = SubscriptionProperties(**{attr: expected for _, _, attr, expected in SUBSCRIPTION_CASES})
    doc = {
        "Name": "ns1",
        "Queues": [{"Name": "q", "Properties": queue.to_json()}, {"Name": "target"}],
        "Topics": [
            {
                "Name": "t",
                "Properties": topic.to_json(),
                "Subscriptions": [{"Name": "s", "Properties": sub.to_json()}],
            }
        ],
    }
    [ns] = load_config_text(json.dumps({"UserConfig": {"Namespaces": [doc]}}))
    assert ns.queues[0].properties == queue
    assert ns.topics[0].properties == topic
    assert ns.topics[0].subscriptions[0].properties == sub


def test_empty_forward_means_none() -> None:
    ns = _one(_queue_doc({"ForwardTo": "", "ForwardDeadLetteredMessagesTo": ""}))
    assert ns.queues[0].properties.forward_to is None
    assert ns.queues[0].properties.forward_dead_lettered_messages_to is None


def test_forward_target_may_be_a_topic_and_is_case_insensitive() -> None:
    ns = _one(
        {
            "Name": "ns1",
            "Queues": [{"Name": "q", "Properties": {"ForwardTo": "TOPIC.A"}}],
            "Topics": [{"Name": "topic.a"}],
        }
    )
    assert ns.queues[0].properties.forward_to == "TOPIC.A"


# --------------------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------------------


def test_defaults_when_properties_are_omitted() -> None:
    ns = _one(
        {
            "Name": "ns1",
            "Queues": [{"Name": "q"}],
            "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s"}]}],
        }
    )
    assert ns.queues[0].properties == QueueProperties()
    assert ns.topics[0].properties == TopicProperties()
    assert ns.topics[0].subscriptions[0].properties == SubscriptionProperties()
    ns = _one({"Name": "ns1", "Queues": [{"Name": "q", "Properties": {}}]})
    assert ns.queues[0].properties == QueueProperties()


def test_namespace_defaults() -> None:
    ns = _one({"Name": "ns1"})
    assert ns == NamespaceConfig("ns1", (), (), (DEFAULT_AUTHORIZATION_RULE,), 256, 16)
    assert AuthorizationRule("RootManageSharedAccessKey", "SAS_KEY_VALUE", None) == DEFAULT_AUTHORIZATION_RULE


def test_topic_without_subscriptions() -> None:
    assert _one({"Name": "ns1", "Topics": [{"Name": "t"}]}).topics[0].subscriptions == ()


@pytest.mark.parametrize("rules", [None, []])
def test_subscription_without_rules_gets_default_rule(rules: list[Any] | None) -> None:
    sub: dict[str, Any] = {"Name": "s"}
    if rules is not None:
        sub["Rules"] = rules
    ns = _one({"Name": "ns1", "Topics": [{"Name": "t", "Subscriptions": [sub]}]})
    assert ns.topics[0].subscriptions[0].rules == (RuleDescription("$Default", TrueFilter(), None),)


def test_subscription_with_rules_gets_no_extra_default_rule() -> None:
    sub = {"Name": "s", "Rules": [{"Name": "only", "Properties": {"FilterType": "False"}}]}
    ns = _one({"Name": "ns1", "Topics": [{"Name": "t", "Subscriptions": [sub]}]})
    assert ns.topics[0].subscriptions[0].rules == (RuleDescription("only", FalseFilter()),)


def test_true_and_false_filter_types() -> None:
    sub = {
        "Name": "s",
        "Rules": [
            {"Name": "$Default", "Properties": {"FilterType": "True"}},
            {
                "Name": "never",
                "Properties": {"FilterType": "False", "Action": {"SqlExpression": "SET a = 1"}},
            },
        ],
    }
    rules = (
        _one({"Name": "ns1", "Topics": [{"Name": "t", "Subscriptions": [sub]}]})
        .topics[0]
        .subscriptions[0]
        .rules
    )
    assert rules == (
        RuleDescription("$Default", TrueFilter()),
        RuleDescription("never", FalseFilter(), SqlRuleAction("SET a = 1")),
    )


def test_sql_filter_parameters() -> None:
    sub = {
        "Name": "s",
        "Rules": [
            {
                "Name": "p",
                "Properties": {
                    "FilterType": "Sql",
                    "SqlFilter": {"SqlExpression": "n > @n", "Parameters": {"@n": 5, "@f": 0.5, "@b": True}},
                },
            }
        ],
    }
    [rule] = (
        _one({"Name": "ns1", "Topics": [{"Name": "t", "Subscriptions": [sub]}]})
        .topics[0]
        .subscriptions[0]
        .rules
    )
    assert rule.filter == SqlFilter("n > @n", {"@n": 5, "@f": 0.5, "@b": True})


def test_default_namespace() -> None:
    ns = default_namespace()
    assert ns.name == "sbemulatorns"
    assert ns.queues == (QueueConfig("queue.1", QueueProperties()),)
    assert ns.topics == ()
    assert ns.authorization_rules == (AuthorizationRule("RootManageSharedAccessKey", "SAS_KEY_VALUE"),)
    assert ns.max_message_size_in_kilobytes == 256
    assert ns.partition_count == 16
    assert default_namespace() == ns


def test_logging_is_ignored() -> None:
    for logging in ({"Type": "File"}, {"Type": "Console"}, {"Anything": [1, 2]}, "x", None):
        assert load_config(_doc(Logging=logging)) == load_config(_doc())


def test_schema_key_is_allowed() -> None:
    data = _doc()
    data["$schema"] = "./Config-schema.json"
    assert load_config(data)[0].name == "sbemulatorns"


# --------------------------------------------------------------------------------------------------
# Namespace extensions
# --------------------------------------------------------------------------------------------------


def test_authorization_rules_replace_the_default() -> None:
    ns = _one(
        {
            "Name": "ns1",
            "AuthorizationRules": [
                {"KeyName": "sender", "PrimaryKey": "k1", "SecondaryKey": "k2"},
                {"KeyName": "listener", "PrimaryKey": "k3"},
            ],
        }
    )
    assert ns.authorization_rules == (
        AuthorizationRule("sender", "k1", "k2"),
        AuthorizationRule("listener", "k3", None),
    )


def test_namespace_limits() -> None:
    ns = _one({"Name": "ns1", "MaxMessageSizeInKilobytes": 1024, "PartitionCount": 4})
    assert ns.max_message_size_in_kilobytes == 1024
    assert ns.partition_count == 4
    ns = _one({"Name": "ns1", "MaxMessageSizeInKilobytes": 102400, "PartitionCount": 1024})
    assert (ns.max_message_size_in_kilobytes, ns.partition_count) == (102400, 1024)
    ns = _one({"Name": "ns1", "MaxMessageSizeInKilobytes": 1, "PartitionCount": 1})
    assert (ns.max_message_size_in_kilobytes, ns.partition_count) == (1, 1)


def test_several_namespaces() -> None:
    data = {
        "UserConfig": {
            "Namespaces": [
                {"Name": "ns-a", "Queues": [{"Name": "q"}]},
                {"Name": "ns-b", "Queues": [{"Name": "q"}]},
            ]
        }
    }
    assert [ns.name for ns in load_config(data)] == ["ns-a", "ns-b"]


# --------------------------------------------------------------------------------------------------
# Rejections name the JSON path
# --------------------------------------------------------------------------------------------------

Q1 = "UserConfig.Namespaces[0].Queues[1]"


def _two_queues(second: dict[str, Any]) -> dict[str, Any]:
    return _doc({"Name": "sbemulatorns", "Queues": [{"Name": "queue.0"}, second]})


@pytest.mark.parametrize(
    ("second", "where", "reason"),
    [
        # the example from the brief
        ({"Name": "q1", "Properties": {"LockDuration": "PT10M"}}, f"{Q1}.Properties.LockDuration", "PT5M"),
        ({"Name": "q1", "Properties": {"LockDuration": "PT4S"}}, f"{Q1}.Properties.LockDuration", "PT5S"),
        (
            {"Name": "q1", "Properties": {"MaxDeliveryCount": 0}},
            f"{Q1}.Properties.MaxDeliveryCount",
            "at least 1",
        ),
        (
            {"Name": "q1", "Properties": {"MaxDeliveryCount": -3}},
            f"{Q1}.Properties.MaxDeliveryCount",
            "at least 1",
        ),
        (
            {"Name": "q1", "Properties": {"DuplicateDetectionHistoryTimeWindow": "PT10S"}},
            f"{Q1}.Properties.DuplicateDetectionHistoryTimeWindow",
            "PT20S",
        ),
        (
            {"Name": "q1", "Properties": {"DuplicateDetectionHistoryTimeWindow": "P8D"}},
            f"{Q1}.Properties.DuplicateDetectionHistoryTimeWindow",
            "P7D",
        ),
        (
            {"Name": "q1", "Properties": {"AutoDeleteOnIdle": "PT4M"}},
            f"{Q1}.Properties.AutoDeleteOnIdle",
            "PT5M",
        ),
        (
            {"Name": "q1", "Properties": {"DefaultMessageTimeToLive": "PT0S"}},
            f"{Q1}.Properties.DefaultMessageTimeToLive",
            "at least",
        ),
        (
            {"Name": "q1", "Properties": {"MaxMessageSizeInKilobytes": 0}},
            f"{Q1}.Properties.MaxMessageSizeInKilobytes",
            "between 1 and 102400",
        ),
        (
            {"Name": "q1", "Properties": {"MaxSizeInMegabytes": 0}},
            f"{Q1}.Properties.MaxSizeInMegabytes",
            "at least",
        ),
        ({"Name": "q1", "Properties": {"Status": "Paused"}}, f"{Q1}.Properties.Status", "Active"),
        ({"Name": "q1", "Properties": {"UserMetadata": "x" * 1025}}, f"{Q1}.Properties.UserMetadata", "1024"),
        # invalid durations
        (
            {"Name": "q1", "Properties": {"LockDuration": "1 minute"}},
            f"{Q1}.Properties.LockDuration",
            "ISO 8601",
        ),
        (
            {"Name": "q1", "Properties": {"LockDuration": "00:01:00"}},
            f"{Q1}.Properties.LockDuration",
            "ISO 8601",
        ),
        ({"Name": "q1", "Properties": {"LockDuration": "P1M"}}, f"{Q1}.Properties.LockDuration", "ISO 8601"),
        (
            {"Name": "q1", "Properties": {"DefaultMessageTimeToLive": "P10675200D"}},
            f"{Q1}.Properties.DefaultMessageTimeToLive",
            "maximum",
        ),
        # wrong JSON types
        ({"Name": "q1", "Properties": {"LockDuration": 60}}, f"{Q1}.Properties.LockDuration", "got number"),
        (
            {"Name": "q1", "Properties": {"MaxDeliveryCount": "3"}},
            f"{Q1}.Properties.MaxDeliveryCount",
            "got string",
        ),
        (
            {"Name": "q1", "Properties": {"MaxDeliveryCount": 3.5}},
            f"{Q1}.Properties.MaxDeliveryCount",
            "integer",
        ),
        (
            {"Name": "q1", "Properties": {"RequiresSession": "false"}},
            f"{Q1}.Properties.RequiresSession",
            "boolean",
        ),
        ({"Name": "q1", "Properties": {"RequiresSession": 1}}, f"{Q1}.Properties.RequiresSession", "boolean"),
        ({"Name": "q1", "Properties": {"ForwardTo": []}}, f"{Q1}.Properties.ForwardTo", "got array"),
        ({"Name": "q1", "Properties": []}, f"{Q1}.Properties", "JSON object"),
        ({"Name": "q1", "Properties": None}, f"{Q1}.Properties", "got null"),
        ({"Name": 5}, f"{Q1}.Name", "string"),
        # unknown property names
        (
            {"Name": "q1", "Properties": {"LockDurration": "PT1M"}},
            f"{Q1}.Properties.LockDurration",
            "LockDuration",
        ),
        (
            {"Name": "q1", "Properties": {"lockDuration": "PT1M"}},
            f"{Q1}.Properties.lockDuration",
            "LockDuration",
        ),
        ({"Name": "q1", "Properties": {"Subscriptions": []}}, f"{Q1}.Properties.Subscriptions", "unknown"),
        ({"Name": "q1", "Subscriptions": []}, f"{Q1}.Subscriptions", "unknown"),
        ({"Name": "q1", "Propertis": {}}, f"{Q1}.Propertis", "did you mean 'Properties'"),
        # names
        ({"Properties": {}}, f"{Q1}.Name", "required"),
        ({"Name": ""}, f"{Q1}.Name", "empty"),
        ({"Name": "-queue"}, f"{Q1}.Name", "start and end with a letter or digit"),
        ({"Name": "queue-"}, f"{Q1}.Name", "start and end with a letter or digit"),
        ({"Name": "queue 1"}, f"{Q1}.Name", "invalid queue name"),
        ({"Name": "queue#1"}, f"{Q1}.Name", "invalid queue name"),
        ({"Name": "q" * 261}, f"{Q1}.Name", "260"),
        ({"Name": "QUEUE.0"}, f"{Q1}.Name", "duplicate"),
        # forwarding
        ({"Name": "q1", "Properties": {"ForwardTo": "nowhere"}}, f"{Q1}.Properties.ForwardTo", "nowhere"),
        (
            {"Name": "q1", "Properties": {"ForwardDeadLetteredMessagesTo": "nowhere"}},
            f"{Q1}.Properties.ForwardDeadLetteredMessagesTo",
            "no queue or topic",
        ),
        (
            {"Name": "q1", "Properties": {"ForwardTo": "a b"}},
            f"{Q1}.Properties.ForwardTo",
            "invalid queue name",
        ),
        # the queue itself
        ("queue", Q1, "JSON object"),
    ],
)
def test_queue_rejections(second: Any, where: str, reason: str) -> None:
    message = _error(_two_queues(second))
    assert message.startswith(f"{where}: "), message
    assert reason in message, message


def test_valid_queue_names() -> None:
    names = ["a", "1", "queue.1", "a/b/c", "my_queue-2", "q" * 260]
    ns = _one({"Name": "ns1", "Queues": [{"Name": n} for n in names]})
    assert [q.name for q in ns.queues] == names


T0 = "UserConfig.Namespaces[0].Topics[0]"
S1 = f"{T0}.Subscriptions[1]"


def _topic(subscription: Any, **topic: Any) -> dict[str, Any]:
    return _doc(
        {"Name": "ns1", "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s0"}, subscription], **topic}]}
    )


@pytest.mark.parametrize(
    ("subscription", "where", "reason"),
    [
        ({"Name": "s1", "Properties": {"LockDuration": "PT6M"}}, f"{S1}.Properties.LockDuration", "PT5M"),
        (
            {"Name": "s1", "Properties": {"MaxDeliveryCount": 0}},
            f"{S1}.Properties.MaxDeliveryCount",
            "at least 1",
        ),
        (
            {"Name": "s1", "Properties": {"MaxSizeInMegabytes": 1}},
            f"{S1}.Properties.MaxSizeInMegabytes",
            "unknown",
        ),
        (
            {"Name": "s1", "Properties": {"DeadLetteringOnFilterEvaluationException": True}},
            f"{S1}.Properties.DeadLetteringOnFilterEvaluationException",
            "did you mean 'DeadLetteringOnFilterEvaluationExceptions'",
        ),
        ({"Name": "s1", "Properties": {"ForwardTo": "missing"}}, f"{S1}.Properties.ForwardTo", "missing"),
        ({"Name": "S0"}, f"{S1}.Name", "duplicate subscription name"),
        ({"Name": "s/1"}, f"{S1}.Name", "invalid subscription name"),
        ({"Name": "s" * 51}, f"{S1}.Name", "50"),
        ({}, f"{S1}.Name", "required"),
        ({"Name": "s1", "Rules": {}}, f"{S1}.Rules", "JSON array"),
        ({"Name": "s1", "Rules": [{"Name": "r"}]}, f"{S1}.Rules[0].Properties", "required"),
        (
            {
                "Name": "s1",
                "Rules": [
                    {"Name": "r", "Properties": {"FilterType": "True"}},
                    {"Name": "R", "Properties": {"FilterType": "False"}},
                ],
            },
            f"{S1}.Rules[1].Name",
            "duplicate rule name",
        ),
        (
            {"Name": "s1", "Rules": [{"Name": "r" * 51, "Properties": {"FilterType": "True"}}]},
            f"{S1}.Rules[0].Name",
            "50",
        ),
        (
            {"Name": "s1", "Rules": [{"Properties": {"FilterType": "True"}}]},
            f"{S1}.Rules[0].Name",
            "required",
        ),
        (
            {"Name": "s1", "Rules": [{"Name": "r", "Properties": {"FilterType": "Regex"}}]},
            f"{S1}.Rules[0].Properties.FilterType",
            "Sql, Correlation, True, False",
        ),
        (
            {
                "Name": "s1",
                "Rules": [
                    {"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": 1}}}
                ],
            },
            f"{S1}.Rules[0].Properties.SqlFilter.SqlExpression",
            "string",
        ),
        (
            {
                "Name": "s1",
                "Rules": [
                    {
                        "Name": "r",
                        "Properties": {
                            "FilterType": "Correlation",
                            "CorrelationFilter": {"Properties": {"p": [1]}},
                        },
                    }
                ],
            },
            f"{S1}.Rules[0].Properties.CorrelationFilter.Properties.p",
            "string, number or boolean",
        ),
        ({"Name": "s1", "Filters": []}, f"{S1}.Filters", "unknown"),
        (["s1"], S1, "JSON object"),
    ],
)
def test_subscription_rejections(subscription: Any, where: str, reason: str) -> None:
    message = _error(_topic(subscription))
    assert message.startswith(f"{where}: "), message
    assert reason in message, message


@pytest.mark.parametrize(
    ("topic", "where", "reason"),
    [
        ({"Properties": {"LockDuration": "PT1M"}}, f"{T0}.Properties.LockDuration", "unknown"),
        ({"Properties": {"RequiresSession": True}}, f"{T0}.Properties.RequiresSession", "unknown"),
        (
            {"Properties": {"DefaultMessageTimeToLive": "PT1X"}},
            f"{T0}.Properties.DefaultMessageTimeToLive",
            "ISO 8601",
        ),
        ({"Properties": {"EnablePartitioning": "yes"}}, f"{T0}.Properties.EnablePartitioning", "boolean"),
        ({"Subscriptions": {}}, f"{T0}.Subscriptions", "JSON array"),
        ({"Rules": []}, f"{T0}.Rules", "unknown"),
    ],
)
def test_topic_rejections(topic: dict[str, Any], where: str, reason: str) -> None:
    doc = _doc({"Name": "ns1", "Topics": [{"Name": "t", **topic}]})
    message = _error(doc)
    assert message.startswith(f"{where}: "), message
    assert reason in message, message


@pytest.mark.parametrize(
    ("namespace", "where", "reason"),
    [
        (
            {"Name": "ns1", "Queues": [{"Name": "x"}], "Topics": [{"Name": "X"}]},
            "UserConfig.Namespaces[0].Topics[0].Name",
            "duplicate queue or topic name 'X' (already used by UserConfig.Namespaces[0].Queues[0])",
        ),
        (
            {"Name": "ns1", "Topics": [{"Name": "t"}, {"Name": "T"}]},
            "UserConfig.Namespaces[0].Topics[1].Name",
            "duplicate",
        ),
        ({"Name": "ns1", "Topics": [{"Name": "t" * 261}]}, "UserConfig.Namespaces[0].Topics[0].Name", "260"),
        (
            {"Name": "ns1", "Topics": [{"Name": "a/b/"}]},
            "UserConfig.Namespaces[0].Topics[0].Name",
            "invalid topic",
        ),
        ({"Name": "ns1", "Queues": {}}, "UserConfig.Namespaces[0].Queues", "JSON array"),
        ({"Name": "ns1", "Topics": "t"}, "UserConfig.Namespaces[0].Topics", "JSON array"),
        ({"Queues": []}, "UserConfig.Namespaces[0].Name", "required"),
        ({"Name": 1}, "UserConfig.Namespaces[0].Name", "string"),
        ({"Name": "1ns"}, "UserConfig.Namespaces[0].Name", "invalid namespace name"),
        ({"Name": "ns_1"}, "UserConfig.Namespaces[0].Name", "invalid namespace name"),
        ({"Name": "n" * 51}, "UserConfig.Namespaces[0].Name", "50"),
        ({"Name": "ns1", "queues": []}, "UserConfig.Namespaces[0].queues", "did you mean 'Queues'"),
        ({"Name": "ns1", "Subscriptions": []}, "UserConfig.Namespaces[0].Subscriptions", "unknown"),
        (
            {"Name": "ns1", "MaxMessageSizeInKilobytes": 0},
            "UserConfig.Namespaces[0].MaxMessageSizeInKilobytes",
            "between 1 and 102400",
        ),
        (
            {"Name": "ns1", "MaxMessageSizeInKilobytes": 102401},
            "UserConfig.Namespaces[0].MaxMessageSizeInKilobytes",
            "between 1 and 102400",
        ),
        (
            {"Name": "ns1", "MaxMessageSizeInKilobytes": "256"},
            "UserConfig.Namespaces[0].MaxMessageSizeInKilobytes",
            "integer",
        ),
        (
            {"Name": "ns1", "PartitionCount": 0},
            "UserConfig.Namespaces[0].PartitionCount",
            "between 1 and 1024",
        ),
        (
            {"Name": "ns1", "PartitionCount": 1025},
            "UserConfig.Namespaces[0].PartitionCount",
            "between 1 and 1024",
        ),
        ({"Name": "ns1", "PartitionCount": True}, "UserConfig.Namespaces[0].PartitionCount", "integer"),
        ({"Name": "ns1", "PartitionCount": 16.0}, "UserConfig.Namespaces[0].PartitionCount", "integer"),
        (
            {"Name": "ns1", "AuthorizationRules": []},
            "UserConfig.Namespaces[0].AuthorizationRules",
            "at least one",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": {}},
            "UserConfig.Namespaces[0].AuthorizationRules",
            "JSON array",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"PrimaryKey": "k"}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].KeyName",
            "required",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k"}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].PrimaryKey",
            "required",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": ""}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].PrimaryKey",
            "1 to 256",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": 5}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].PrimaryKey",
            "string",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "SecondaryKey": 1}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].SecondaryKey",
            "string",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "a b", "PrimaryKey": "p"}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].KeyName",
            "invalid key name",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": ["Manage"]}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights",
            "Manage requires Send and Listen",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": ["Manage", "Send"]}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights",
            "Manage requires Send and Listen",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": []}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights",
            "at least one",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": ["Read"]}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights[0]",
            "must be one of Manage, Send, Listen",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": ["Send", "send"]}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights[1]",
            "duplicate right",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Rights": "Send"}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Rights",
            "JSON array",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": [{"KeyName": "k", "PrimaryKey": "p", "Right": ["Send"]}]},
            "UserConfig.Namespaces[0].AuthorizationRules[0].Right",
            "unknown property",
        ),
        (
            {"Name": "ns1", "Queues": [{"Name": "q", "Properties": {"AuthorizationRules": [
                {"KeyName": "k", "PrimaryKey": "p", "Rights": ["Manage", "Listen"]}]}}]},
            "UserConfig.Namespaces[0].Queues[0].Properties.AuthorizationRules[0].Rights",
            "Manage requires Send and Listen",
        ),
        (
            {"Name": "ns1", "Topics": [{"Name": "t", "Properties": {"AuthorizationRules": [
                {"KeyName": "k", "PrimaryKey": "p"}, {"KeyName": "K", "PrimaryKey": "q"}]}}]},
            "UserConfig.Namespaces[0].Topics[0].Properties.AuthorizationRules[1].KeyName",
            "duplicate key name",
        ),
        (
            {
                "Name": "ns1",
                "AuthorizationRules": [
                    {"KeyName": "k", "PrimaryKey": "p"},
                    {"KeyName": "K", "PrimaryKey": "q"},
                ],
            },
            "UserConfig.Namespaces[0].AuthorizationRules[1].KeyName",
            "duplicate",
        ),
        (
            {"Name": "ns1", "AuthorizationRules": ["k"]},
            "UserConfig.Namespaces[0].AuthorizationRules[0]",
            "JSON object",
        ),
    ],
)
def test_namespace_rejections(namespace: dict[str, Any], where: str, reason: str) -> None:
    message = _error(_doc(namespace))
    assert message.startswith(f"{where}: "), message
    assert reason in message, message


@pytest.mark.parametrize(
    ("data", "where", "reason"),
    [
        ([], "(document)", "JSON object"),
        ("x", "(document)", "JSON object"),
        ({}, "UserConfig", "required"),
        ({"UserConfig": []}, "UserConfig", "JSON object"),
        ({"userConfig": {}}, "userConfig", "did you mean 'UserConfig'"),
        ({"UserConfig": {"Namespaces": [{"Name": "ns1"}]}, "Extra": 1}, "Extra", "unknown"),
        ({"UserConfig": {}}, "UserConfig.Namespaces", "required"),
        ({"UserConfig": {"Namespaces": []}}, "UserConfig.Namespaces", "at least one"),
        ({"UserConfig": {"Namespaces": {}}}, "UserConfig.Namespaces", "JSON array"),
        (
            {"UserConfig": {"Namespaces": [{"Name": "ns1"}], "Namespace": []}},
            "UserConfig.Namespace",
            "did you mean 'Namespaces'",
        ),
        ({"UserConfig": {"Namespaces": [{"Name": "ns1"}], "Queues": []}}, "UserConfig.Queues", "unknown"),
        (
            {"UserConfig": {"Namespaces": [{"Name": "ns1"}, {"Name": "NS1"}]}},
            "UserConfig.Namespaces[1].Name",
            "duplicate namespace",
        ),
        ({"UserConfig": {"Namespaces": [None]}}, "UserConfig.Namespaces[0]", "got null"),
    ],
)
def test_document_rejections(data: Any, where: str, reason: str) -> None:
    message = _error(data)
    assert message.startswith(f"{where}: "), message
    assert reason in message, message


def test_rejects_the_first_error_of_a_big_document() -> None:
    data = json.loads(EMULATOR_SAMPLE)
    bad = copy.deepcopy(data)
    bad["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][1]["Rules"][1]["Properties"][
        "SqlFilter"
    ] = {}
    message = _error(bad)
    assert message.startswith(
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Rules[1].Properties.SqlFilter.SqlExpression: "
    ), message


# --------------------------------------------------------------------------------------------------
# JSON text
# --------------------------------------------------------------------------------------------------


def test_json_syntax_error_reports_line_and_column() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config_text('{\n  "UserConfig": {\n    "Namespaces": [,]\n  }\n}')
    assert "line 3, column 20" in str(info.value)


def test_json_trailing_comma_is_a_syntax_error() -> None:
    with pytest.raises(ConfigurationError, match="line 1"):
        load_config_text('{"UserConfig": {"Namespaces": [{"Name": "ns1"},]}}')


def test_empty_text_is_a_syntax_error() -> None:
    with pytest.raises(ConfigurationError, match="invalid JSON"):
        load_config_text("")


def test_duplicate_json_keys_are_rejected() -> None:
    text = '{"UserConfig": {"Namespaces": [{"Name": "ns1", "Queues": [{"Name": "a", "Name": "b"}]}]}}'
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text)
    assert str(info.value).startswith("UserConfig.Namespaces[0].Queues[0].Name: duplicate key")


def test_byte_order_mark_is_tolerated() -> None:
    assert load_config_text("\ufeff" + EMULATOR_SAMPLE) == load_config_text(EMULATOR_SAMPLE)


def test_nan_is_rejected_with_path() -> None:
    text = '{"UserConfig": {"Namespaces": [{"Name": "ns1", "PartitionCount": NaN}]}}'
    with pytest.raises(ConfigurationError, match=r"^UserConfig.Namespaces\[0\].PartitionCount: "):
        load_config_text(text)


# --------------------------------------------------------------------------------------------------
# The dataclasses validate themselves too
# --------------------------------------------------------------------------------------------------


def test_dataclass_validation() -> None:
    with pytest.raises(ConfigurationError, match=r"QueueConfig\.name"):
        QueueConfig("bad name")
    with pytest.raises(ConfigurationError, match=r"TopicConfig\.name"):
        TopicConfig("-t")
    with pytest.raises(ConfigurationError, match=r"SubscriptionConfig\.name"):
        SubscriptionConfig("a/b")
    with pytest.raises(ConfigurationError, match="duplicate subscription"):
        TopicConfig("t", TopicProperties(), (SubscriptionConfig("s"), SubscriptionConfig("S")))
    with pytest.raises(ConfigurationError, match="duplicate rule"):
        SubscriptionConfig("s", SubscriptionProperties(), (RuleDescription("r"), RuleDescription("R")))
    with pytest.raises(ConfigurationError, match="duplicate queue or topic"):
        NamespaceConfig("ns1", (QueueConfig("x"),), (TopicConfig("X"),))
    with pytest.raises(ConfigurationError, match="at least one authorization rule"):
        NamespaceConfig("ns1", authorization_rules=())
    with pytest.raises(ConfigurationError, match=r"NamespaceConfig\.partition_count"):
        NamespaceConfig("ns1", partition_count=0)
    with pytest.raises(ConfigurationError, match=r"NamespaceConfig\.max_message_size_in_kilobytes"):
        NamespaceConfig("ns1", max_message_size_in_kilobytes=102401)
    with pytest.raises(ConfigurationError, match=r"NamespaceConfig\.name"):
        NamespaceConfig("bad name")
    with pytest.raises(ConfigurationError, match=r"AuthorizationRule\.primary_key"):
        AuthorizationRule("k", "")
    with pytest.raises(ConfigurationError, match=r"AuthorizationRule\.key_name"):
        AuthorizationRule("", "p")
    with pytest.raises(ConfigurationError, match=r"AuthorizationRule\.rights: Manage requires Send and Listen"):
        AuthorizationRule("k", "p", None, frozenset({AccessRights.MANAGE, AccessRights.SEND}))
    with pytest.raises(ConfigurationError, match=r"QueueProperties\.authorization_rules: duplicate key name"):
        QueueProperties(authorization_rules=(AuthorizationRule("a", "p"), AuthorizationRule("A", "q")))


def test_dataclass_defaults() -> None:
    assert SubscriptionConfig("s").rules == (RuleDescription("$Default", TrueFilter()),)
    assert TopicConfig("t").subscriptions == ()
    assert NamespaceConfig("ns1").authorization_rules == (DEFAULT_AUTHORIZATION_RULE,)


def test_rights_default_to_all_three_and_are_read_case_insensitively() -> None:
    ns = _one({"Name": "ns1", "AuthorizationRules": [
        {"KeyName": "root", "PrimaryKey": "p"},
        {"KeyName": "sender", "PrimaryKey": "s", "Rights": ["send"]},
        {"KeyName": "admin", "PrimaryKey": "a", "Rights": ["Listen", "Manage", "Send"]},
    ]})
    root, sender, admin = ns.authorization_rules
    assert root.rights == admin.rights == frozenset(AccessRights)
    assert sender.rights == frozenset({AccessRights.SEND})


def test_entity_rules_round_trip_through_to_json() -> None:
    props = QueueProperties(authorization_rules=(
        AuthorizationRule("a", "p", "s", frozenset({AccessRights.SEND, AccessRights.LISTEN})),))
    doc = props.to_json()
    assert doc["AuthorizationRules"] == [{"KeyName": "a", "PrimaryKey": "p", "SecondaryKey": "s",
                                          "Rights": ["Send", "Listen"]}]
    assert QueueProperties.from_json(json.loads(json.dumps(doc))) == props
    topic = TopicProperties(authorization_rules=(AuthorizationRule("t", "k"),))
    assert TopicProperties.from_json(topic.to_json()) == topic


# --------------------------------------------------------------------------------------------------
# Messaging stores, SKU and entity quotas
# --------------------------------------------------------------------------------------------------


def test_messaging_stores_sku_and_quotas_parse() -> None:
    ns = _one({"Name": "ns1", "MessagingStores": [{"Name": "disk1", "Path": "/mnt/a.db"},
                                                  {"Name": "disk2", "Path": "b.db"}],
               "Sku": "Premium", "MaxEntityCount": 50, "MaxPartitionedEntityCount": 5})
    assert [(s.name, s.path) for s in ns.messaging_stores] == [("disk1", "/mnt/a.db"), ("disk2", "b.db")]
    assert (ns.sku, ns.max_entity_count, ns.max_partitioned_entity_count) == ("Premium", 50, 5)
    default = _one({"Name": "ns1"})
    assert (default.messaging_stores, default.sku, default.max_entity_count,
            default.max_partitioned_entity_count) == ((), "Standard", 10_000, 100)


@pytest.mark.parametrize(("namespace", "problem"), [
    ({"MessagingStores": [{"Name": "default", "Path": "x.db"}]}, "MessagingStores[0]: MessagingStore.name"),
    ({"MessagingStores": [{"Name": "a", "Path": " "}]}, "MessagingStores[0]: MessagingStore.path"),
    ({"MessagingStores": [{"Name": "a b", "Path": "x.db"}]}, "MessagingStores[0]"),
    ({"MessagingStores": [{"Name": "a", "Path": "x.db"}, {"Name": "A", "Path": "y.db"}]}, "duplicate"),
    ({"MessagingStores": [{"Name": "a", "Path": "x.db", "Size": 1}]}, "Size"),
    ({"Sku": "Gold"}, "Sku: must be one of Basic, Standard, Premium"),
    ({"MaxEntityCount": 0}, "MaxEntityCount"),
    ({"MaxEntityCount": 1, "Queues": [{"Name": "a"}, {"Name": "b"}]}, "exceed MaxEntityCount 1"),
    ({"MaxPartitionedEntityCount": 1, "Queues": [
        {"Name": "a", "Properties": {"EnablePartitioning": True}},
        {"Name": "b", "Properties": {"EnablePartitioning": True}}]}, "exceed MaxPartitionedEntityCount 1"),
])
def test_bad_stores_skus_and_quotas_are_refused_naming_the_field(namespace: dict[str, Any], problem: str) -> None:
    message = _error(_doc({"Name": "ns1", **namespace}))
    assert message.startswith("UserConfig.Namespaces[0]") and problem in message
