"""ServiceBusAdministrationClient (sync and aio) managing topics, subscriptions and rules on the broker."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdmin
from azure.servicebus.management import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop

FOREVER = datetime.timedelta(days=10675199)  # the SDK reads TimeSpan.MaxValue as about this


def _admin(broker: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)


def _receive_all(client: ServiceBusClient, topic: str, subscription: str) -> list[str]:
    got = []
    # Until a peek finds the entity empty: every message is stored before its send is acknowledged,
    # so nothing more is on its way, and no receive has to wait out an idle timeout to show it.
    with client.get_subscription_receiver(topic, subscription) as receiver:
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for message in receiver.receive_messages(max_message_count=20, max_wait_time=5):
                got.append(str(message))
                receiver.complete_message(message)
    return got


def test_topic_lifecycle_with_every_property(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    created = admin.create_topic(
        "adm-topic", default_message_time_to_live=datetime.timedelta(hours=3), max_size_in_megabytes=2048,
        requires_duplicate_detection=True, duplicate_detection_history_time_window=datetime.timedelta(minutes=2),
        enable_batched_operations=False, support_ordering=False, auto_delete_on_idle=datetime.timedelta(hours=5),
        enable_partitioning=True, enable_express=True, user_metadata="owner=<ops & co>")
    # (MaxMessageSizeInKilobytes is Premium-only since issue 13.7: test_conformance_admin_premium.py sets it)
    assert created.name == "adm-topic"
    got = admin.get_topic("adm-topic")
    assert got.default_message_time_to_live == datetime.timedelta(hours=3)
    # Partitioned in a Standard namespace: the size per partition times its 16 partitions, as Service Bus shows it.
    assert (got.max_size_in_megabytes, got.requires_duplicate_detection) == (16 * 2048, True)
    assert got.duplicate_detection_history_time_window == datetime.timedelta(minutes=2)
    assert (got.enable_batched_operations, got.support_ordering) == (False, False)
    assert got.auto_delete_on_idle == datetime.timedelta(hours=5)
    assert (got.enable_partitioning, got.enable_express) == (True, True)
    assert (got.user_metadata, got.status) == ("owner=<ops & co>", "Active")
    assert got.availability_status == "Available"

    # update re-sends everything it read, read-only members included
    got.default_message_time_to_live = datetime.timedelta(hours=1)
    got.status = "SendDisabled"
    got.user_metadata = "changed"
    admin.update_topic(got)
    again = admin.get_topic("adm-topic")
    assert again.default_message_time_to_live == datetime.timedelta(hours=1)
    assert (again.status, again.user_metadata, again.max_size_in_megabytes) == ("SendDisabled", "changed", 16 * 2048)

    with pytest.raises(ResourceExistsError):
        admin.create_topic("adm-topic")
    with pytest.raises(ResourceExistsError):
        admin.create_topic("queue.1")  # queues and topics share one name space
    with pytest.raises(ResourceExistsError):
        admin.create_queue("adm-topic")
    missing = admin.get_topic("adm-topic")
    missing.name = "adm-topic-missing"
    with pytest.raises(ResourceNotFoundError):
        admin.update_topic(missing)
    with pytest.raises(HttpResponseError) as info:
        again.requires_duplicate_detection = False
        admin.update_topic(again)
    assert info.value.status_code == 400

    admin.delete_topic("adm-topic")
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic("adm-topic")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_topic("adm-topic")  # deleting what is not there is 404, as Service Bus answers (issue 13.7)


def test_topics_subscriptions_and_rules_list_over_several_pages(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    topics = [f"adm-page-{i}" for i in range(5)]
    for name in topics:
        admin.create_topic(name)
    listed = [t.name for t in admin.list_topics(max_page_size=2)]
    assert [name for name in listed if name.startswith("adm-page-")] == topics
    runtime = [t for t in admin.list_topics_runtime_properties(max_page_size=2) if t.name in topics]
    assert [t.subscription_count for t in runtime] == [0] * 5
    assert "adm-page-0" not in [q.name for q in admin.list_queues()]

    subscriptions = [f"sub-{i}" for i in range(5)]
    for name in subscriptions:
        admin.create_subscription("adm-page-0", name)
    assert [s.name for s in admin.list_subscriptions("adm-page-0", max_page_size=2)] == subscriptions
    assert [s.total_message_count for s in admin.list_subscriptions_runtime_properties("adm-page-0",
                                                                                       max_page_size=3)] == [0] * 5
    assert admin.get_topic_runtime_properties("adm-page-0").subscription_count == 5

    rules = [f"r{i}" for i in range(4)]
    for name in rules:
        admin.create_rule("adm-page-0", "sub-0", name, filter=SqlRuleFilter(f"n = {len(name)}"))
    assert [r.name for r in admin.list_rules("adm-page-0", "sub-0", max_page_size=2)] == ["$Default", *rules]
    assert list(admin.list_subscriptions("adm-page-1")) == []
    assert list(admin.list_rules("adm-page-0", "no-such-sub")) == []
    for name in topics:
        admin.delete_topic(name)


def test_subscription_lifecycle_with_every_property(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topic("adm-subs")
    admin.create_queue("adm-subs-fwd")
    admin.create_queue("adm-subs-dlq")
    created = admin.create_subscription(
        "adm-subs", "everything", lock_duration=datetime.timedelta(seconds=45), requires_session=True,
        default_message_time_to_live=datetime.timedelta(days=2), dead_lettering_on_message_expiration=True,
        dead_lettering_on_filter_evaluation_exceptions=False, max_delivery_count=4,
        enable_batched_operations=False, forward_to="adm-subs-fwd", user_metadata="m",
        forward_dead_lettered_messages_to="adm-subs-dlq", auto_delete_on_idle=datetime.timedelta(hours=2))
    assert (created.name, created.max_delivery_count) == ("everything", 4)
    got = admin.get_subscription("adm-subs", "everything")
    assert got.lock_duration == datetime.timedelta(seconds=45)
    assert got.requires_session is True
    assert got.default_message_time_to_live == datetime.timedelta(days=2)
    assert got.dead_lettering_on_message_expiration is True
    assert got.dead_lettering_on_filter_evaluation_exceptions is False
    assert (got.max_delivery_count, got.enable_batched_operations, got.user_metadata) == (4, False, "m")
    assert got.forward_to is not None and got.forward_to.endswith(f":{broker.admin_port}/adm-subs-fwd")
    assert got.forward_dead_lettered_messages_to is not None
    assert got.forward_dead_lettered_messages_to.endswith("/adm-subs-dlq")
    assert got.auto_delete_on_idle == datetime.timedelta(hours=2)
    assert (got.status, got.availability_status) == ("Active", "Available")

    got.max_delivery_count = 9
    got.forward_to = None
    got.status = "ReceiveDisabled"
    admin.update_subscription("adm-subs", got)
    again = admin.get_subscription("adm-subs", "everything")
    assert (again.max_delivery_count, again.forward_to, again.status) == (9, None, "ReceiveDisabled")
    assert again.forward_dead_lettered_messages_to is not None  # kept: update re-sent it

    # a subscription starts with $Default (a TrueFilter), as in Service Bus
    [default] = list(admin.list_rules("adm-subs", "everything"))
    assert default.name == "$Default" and isinstance(default.filter, TrueRuleFilter) and default.action is None

    with pytest.raises(ResourceExistsError):
        admin.create_subscription("adm-subs", "everything")
    with pytest.raises(ResourceNotFoundError):
        admin.create_subscription("adm-no-topic", "s")
    with pytest.raises(ResourceNotFoundError):
        admin.create_subscription("adm-subs", "bad-target", forward_to="adm-nowhere")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("adm-subs", "missing")
    again.name = "missing"
    with pytest.raises(ResourceNotFoundError):
        admin.update_subscription("adm-subs", again)

    admin.delete_subscription("adm-subs", "everything")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("adm-subs", "everything")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_subscription("adm-subs", "everything")

    # deleting a topic takes its subscriptions with it, also when a topic of that name comes back
    admin.create_subscription("adm-subs", "kept")
    admin.delete_topic("adm-subs")
    admin.create_topic("adm-subs")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("adm-subs", "kept")
    assert list(admin.list_subscriptions("adm-subs")) == []
    for name in ("adm-subs", "adm-subs-fwd", "adm-subs-dlq"):
        admin.delete_topic(name)  # DELETE /{name} removes the queue or the topic of that name


def test_rule_lifecycle_with_every_filter_and_action(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topic("adm-rules")
    admin.create_subscription("adm-rules", "s")
    sql = admin.create_rule("adm-rules", "s", "sql", filter=SqlRuleFilter(
        "color = @c AND size > @n AND big = @b AND ratio < @f", parameters={"@c": "red", "@n": 5, "@b": True,
                                                                              "@f": 1.5}),
        action=SqlRuleAction("SET seen = 1"))
    assert sql.name == "sql" and sql.created_at_utc is not None
    admin.create_rule("adm-rules", "s", "corr", filter=CorrelationRuleFilter(
        correlation_id="cid", message_id="mid", to="to", reply_to="rt", label="subject", session_id="sid",
        reply_to_session_id="rsid", content_type="text/plain",
        properties={"k": "v", "n": 7, "big": 2**40, "flag": False, "f": 2.25}))
    admin.create_rule("adm-rules", "s", "never", filter=FalseRuleFilter())
    admin.create_rule("adm-rules", "s", "always")  # the SDK's default filter is a TrueRuleFilter

    got = admin.get_rule("adm-rules", "s", "sql")
    assert isinstance(got.filter, SqlRuleFilter)
    assert got.filter.sql_expression == "color = @c AND size > @n AND big = @b AND ratio < @f"
    assert got.filter.parameters == {"@c": "red", "@n": 5, "@b": True, "@f": 1.5}
    assert isinstance(got.action, SqlRuleAction) and got.action.sql_expression == "SET seen = 1"
    corr = admin.get_rule("adm-rules", "s", "corr")
    assert isinstance(corr.filter, CorrelationRuleFilter)
    f = corr.filter
    assert (f.correlation_id, f.message_id, f.to, f.reply_to, f.label, f.session_id, f.reply_to_session_id,
            f.content_type) == ("cid", "mid", "to", "rt", "subject", "sid", "rsid", "text/plain")
    assert f.properties == {"k": "v", "n": 7, "big": 2**40, "flag": False, "f": 2.25}
    assert corr.action is None
    assert isinstance(admin.get_rule("adm-rules", "s", "never").filter, FalseRuleFilter)
    assert isinstance(admin.get_rule("adm-rules", "s", "always").filter, TrueRuleFilter)
    listed = {r.name: r for r in admin.list_rules("adm-rules", "s")}
    assert list(listed) == ["$Default", "sql", "corr", "never", "always"]
    listed_corr = listed["corr"].filter
    assert isinstance(listed_corr, CorrelationRuleFilter) and listed_corr.properties == f.properties
    runtime = admin.get_topic_runtime_properties("adm-rules")
    assert (runtime.sql_filter_count, runtime.correlation_filter_count) == (4, 1)

    got.filter = CorrelationRuleFilter(label="replaced")
    got.action = None
    admin.update_rule("adm-rules", "s", got)
    replaced = admin.get_rule("adm-rules", "s", "sql")
    assert isinstance(replaced.filter, CorrelationRuleFilter) and replaced.filter.label == "replaced"
    assert replaced.action is None

    with pytest.raises(ResourceExistsError):
        admin.create_rule("adm-rules", "s", "SQL")  # rule names are case-insensitive
    with pytest.raises(HttpResponseError, match="rule 'broken'") as info:
        admin.create_rule("adm-rules", "s", "broken", filter=SqlRuleFilter("color = = 'x'"))
    assert info.value.status_code == 400
    with pytest.raises(ResourceNotFoundError):
        admin.create_rule("adm-rules", "missing", "r")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule("adm-rules", "s", "missing")
    replaced.name = "missing"
    with pytest.raises(ResourceNotFoundError):
        admin.update_rule("adm-rules", "s", replaced)
    admin.delete_rule("adm-rules", "s", "sql")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule("adm-rules", "s", "sql")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_rule("adm-rules", "s", "sql")
    admin.delete_topic("adm-rules")


def test_a_created_rule_filters_what_is_sent_afterwards(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topic("adm-filter")
    admin.create_subscription("adm-filter", "red-only")
    admin.delete_rule("adm-filter", "red-only", "$Default")
    admin.create_rule("adm-filter", "red-only", "red", filter=SqlRuleFilter("color = @c", parameters={"@c": "red"}))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("adm-filter") as sender:
            sender.send_messages([ServiceBusMessage(c, application_properties={"color": c})
                                  for c in ("red", "blue", "red", "green")])
        assert _receive_all(client, "adm-filter", "red-only") == ["red", "red"]
    admin.delete_topic("adm-filter")


def test_runtime_properties_after_real_traffic(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topic("adm-traffic")
    admin.create_subscription("adm-traffic", "a")
    admin.create_subscription("adm-traffic", "b")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("adm-traffic") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            sender.schedule_messages(ServiceBusMessage("later"), later)
        with client.get_subscription_receiver("adm-traffic", "a") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(message, reason="test")

    a = admin.get_subscription_runtime_properties("adm-traffic", "a")
    assert (a.active_message_count, a.dead_letter_message_count) == (3, 1)
    assert (a.transfer_message_count, a.transfer_dead_letter_message_count) == (0, 0)
    assert a.total_message_count >= 4 and a.name == "a"
    assert a.accessed_at_utc is not None and a.created_at_utc is not None
    b = admin.get_subscription_runtime_properties("adm-traffic", "b")
    assert (b.active_message_count, b.dead_letter_message_count) == (4, 0)
    topic = admin.get_topic_runtime_properties("adm-traffic")
    assert topic.scheduled_message_count == 1
    assert topic.size_in_bytes is not None and topic.size_in_bytes > 0
    assert topic.subscription_count == 2
    admin.delete_topic("adm-traffic")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription_runtime_properties("adm-traffic", "a")


async def _aio(broker: BrokerProcess) -> None:
    async with AsyncAdmin.from_connection_string(broker.admin_connection_string,
                                                 connection_verify=broker.admin_certificate) as admin:
        await admin.create_topic("adm-aio-topic", max_size_in_megabytes=3072)
        topic = await admin.get_topic("adm-aio-topic")
        topic.user_metadata = "aio"
        await admin.update_topic(topic)
        assert (await admin.get_topic("adm-aio-topic")).user_metadata == "aio"
        assert "adm-aio-topic" in [t.name async for t in admin.list_topics(max_page_size=1)]

        await admin.create_subscription("adm-aio-topic", "s", max_delivery_count=3)
        subscription = await admin.get_subscription("adm-aio-topic", "s")
        subscription.lock_duration = datetime.timedelta(seconds=20)
        await admin.update_subscription("adm-aio-topic", subscription)
        again = await admin.get_subscription("adm-aio-topic", "s")
        assert (again.max_delivery_count, again.lock_duration) == (3, datetime.timedelta(seconds=20))
        assert [s.name async for s in admin.list_subscriptions("adm-aio-topic")] == ["s"]
        runtime = await admin.get_subscription_runtime_properties("adm-aio-topic", "s")
        assert runtime.total_message_count == 0

        await admin.create_rule("adm-aio-topic", "s", "c", filter=CorrelationRuleFilter(properties={"n": 1}))
        rule = await admin.get_rule("adm-aio-topic", "s", "c")
        assert isinstance(rule.filter, CorrelationRuleFilter) and rule.filter.properties == {"n": 1}
        rule.filter = SqlRuleFilter("n = 2")
        await admin.update_rule("adm-aio-topic", "s", rule)
        assert [r.name async for r in admin.list_rules("adm-aio-topic", "s", max_page_size=1)] == ["$Default", "c"]
        await admin.delete_rule("adm-aio-topic", "s", "c")
        await admin.delete_subscription("adm-aio-topic", "s")
        with pytest.raises(ResourceNotFoundError):
            await admin.get_subscription("adm-aio-topic", "s")
        await admin.delete_topic("adm-aio-topic")
        with pytest.raises(ResourceNotFoundError):
            await admin.get_topic("adm-aio-topic")


def test_aio_admin_client_manages_topics_subscriptions_and_rules(broker: BrokerProcess) -> None:
    asyncio.run(_aio(broker))


def test_created_topic_subscription_and_rule_survive_a_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    admin = _admin(fresh_broker)
    admin.create_topic("made-live", max_size_in_megabytes=2048, user_metadata="t")
    admin.create_subscription("made-live", "s", max_delivery_count=3)
    admin.create_subscription("made-live", "MixedCase")  # keeps its spelling, is found in any case
    admin.create_rule("made-live", "s", "gold", filter=SqlRuleFilter("tier = 'gold'"))
    admin.delete_rule("made-live", "s", "$Default")
    admin.create_subscription("made-live", "gone")
    admin.delete_subscription("made-live", "gone")
    subscription = admin.get_subscription("made-live", "s")
    subscription.lock_duration = datetime.timedelta(seconds=30)
    admin.update_subscription("made-live", subscription)
    # a deleted topic's subscriptions are deleted from the store too: none comes back under its successor
    admin.create_topic("doomed")
    admin.create_subscription("doomed", "orphan")
    admin.delete_topic("doomed")
    admin.create_topic("doomed")
    topic_created = admin.get_topic_runtime_properties("made-live").created_at_utc
    sub_times = admin.get_subscription_runtime_properties("made-live", "s")
    assert sub_times.updated_at_utc >= sub_times.created_at_utc
    fresh_broker.kill()

    fresh_broker.start()
    admin = _admin(fresh_broker)
    topic = admin.get_topic("made-live")
    assert (topic.max_size_in_megabytes, topic.user_metadata) == (2048, "t")
    # creation and update times are stored, not the restart's
    assert admin.get_topic_runtime_properties("made-live").created_at_utc == topic_created
    again = admin.get_subscription_runtime_properties("made-live", "s")
    assert (again.created_at_utc, again.updated_at_utc) == (sub_times.created_at_utc, sub_times.updated_at_utc)
    got = admin.get_subscription("made-live", "s")
    assert (got.max_delivery_count, got.lock_duration) == (3, datetime.timedelta(seconds=30))
    assert [s.name for s in admin.list_subscriptions("made-live")] == ["MixedCase", "s"]
    assert admin.get_subscription("made-live", "mixedcase").max_delivery_count == 10  # found in any case
    [rule] = list(admin.list_rules("made-live", "s"))
    assert list(admin.list_subscriptions("doomed")) == []
    assert admin.get_topic_runtime_properties("doomed").subscription_count == 0
    assert rule.name == "gold" and isinstance(rule.filter, SqlRuleFilter)
    with ServiceBusClient.from_connection_string(fresh_broker.connection_string) as client:
        with client.get_topic_sender("made-live") as sender:
            sender.send_messages([ServiceBusMessage("gold", application_properties={"tier": "gold"}),
                                  ServiceBusMessage("tin", application_properties={"tier": "tin"})])
        assert _receive_all(client, "made-live", "s") == ["gold"]


def test_requires_session_cannot_change_in_service_bus_words(broker: BrokerProcess) -> None:
    """The refusal the SDKs' own tests compare (the Go SDK's admin tests, for queues and subscriptions)."""
    admin = _admin(broker)
    queue = admin.create_queue("adm-rs-queue")
    queue.requires_session = True
    with pytest.raises(HttpResponseError) as refused:
        admin.update_queue(queue)
    assert "The value for the RequiresSession property of an existing Queue cannot be changed" in str(refused.value)
    admin.create_topic("adm-rs-topic")
    subscription = admin.create_subscription("adm-rs-topic", "s")
    subscription.requires_session = True
    with pytest.raises(HttpResponseError) as refused:
        admin.update_subscription("adm-rs-topic", subscription)
    assert ("The value for the RequiresSession property of an existing Subscription cannot be changed"
            in str(refused.value))
    assert admin.get_subscription("adm-rs-topic", "s").requires_session is False
    admin.delete_topic("adm-rs-topic")
    admin.delete_queue("adm-rs-queue")
