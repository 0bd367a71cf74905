"""Two brokers on one PostgreSQL schema follow each other's entity changes (issue 18.3): a
subscription's properties and rules, and regenerated namespace keys, changed through one node are
applied by the other at its next follow; a stored rule the other cannot compile is logged and
leaves its old rules, and the rest of the follow, alone.

Both brokers run in this process (``cli.stores.build_broker``, as ``sodalite serve --store
postgresql://...`` builds them), each with its own store connection to a schema of the
test's own on the server this process starts (``tests/pg_server.py``). The test calls
``follow_entities`` itself rather than waiting for the follow loop, so it asserts what one follow
applies; the two-node interop tests (``tests/interop/test_pg_two_nodes_topics.py``) show the same
through two real broker processes and the SDK.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from pg_server import fresh_schema_url
from sodalite.cli.stores import build_broker
from sodalite.errors import Unauthorized
from sodalite.model.authorization import AuthorizationRule
from sodalite.model.config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import RuleDescription, SqlFilter, SubscriptionProperties
from sodalite.model.sas import generate_token
from sodalite.server.broker import Broker
from sodalite.server.registry import SUBSCRIPTION
from sodalite.store.port import EntityRecord, PutEntity

SUB = "news/subscriptions/all"
NAMESPACE = NamespaceConfig(
    "ns",
    queues=(QueueConfig("q"),),
    topics=(TopicConfig("news", subscriptions=(SubscriptionConfig("all"),)),),
    authorization_rules=(AuthorizationRule("root", "root-key"),
                         AuthorizationRule("sender", "send-key")),
)


Scenario = Callable[[Broker, Broker], Awaitable[None]]


def _two_nodes(url: str, tmp_path: Path, scenario: Scenario) -> None:
    async def run() -> None:
        a = build_broker(NAMESPACE, tmp_path / "a", store_url=url, node_id="a")
        b = build_broker(NAMESPACE, tmp_path / "b", store_url=url, node_id="b")
        await a.start("127.0.0.1", 0)
        try:
            await b.start("127.0.0.1", 0)
            try:
                await scenario(a, b)
            finally:
                await b.stop()
        finally:
            await a.stop()

    asyncio.run(run())


def _rule_names(broker: Broker) -> list[str]:
    sub = broker.entity(SUB)
    assert sub is not None
    return [r.name for r in sub.rules]


def test_a_subscriptions_rules_and_properties_changed_on_one_node_apply_on_the_other(
        database: str, tmp_path: Path) -> None:
    async def scenario(a: Broker, b: Broker) -> None:
        sub_a = a.entity(SUB)
        assert sub_a is not None
        await a.add_rule(sub_a, RuleDescription("red", SqlFilter("color = 'red'")))
        await a.remove_rule(sub_a, "$Default")
        await a.update_subscription(sub_a, SubscriptionProperties(lock_duration=timedelta(seconds=17),
                                                                  max_delivery_count=3))
        await b.follow_entities()
        assert _rule_names(b) == ["red"]
        sub_b = b.entity(SUB)
        assert sub_b is not None
        assert sub_b.properties.lock_duration == timedelta(seconds=17)
        assert sub_b.actor.settings.lock_duration == 17_000
        assert sub_b.actor.settings.max_delivery_count == 3
        # The compiled rule filters on node b.
        assert sub_b.rules[0].description.filter == SqlFilter("color = 'red'")

    _two_nodes(fresh_schema_url(database), tmp_path, scenario)


def test_a_stored_rule_that_does_not_compile_keeps_the_old_rules_and_the_follow_goes_on(
        database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(a: Broker, b: Broker) -> None:
        sub_a = a.entity(SUB)
        assert sub_a is not None
        bad = RuleDescription("broken", SqlFilter("color = = 'x'"))  # valid JSON, not a valid filter
        record = {"Properties": sub_a.properties.to_json(),
                  "Rules": [RuleDescription("fine", SqlFilter("n = 1")).to_json(), bad.to_json()]}
        await a.worker.apply([PutEntity(EntityRecord(sub_a.name, SUBSCRIPTION, record))])
        await a.create_queue("made-after", a.namespace.queues[0].properties)
        with caplog.at_level(logging.ERROR, logger="sodalite.server.broker"):
            await b.follow_entities()  # does not raise
            await b.follow_entities()  # the same stored record: logged once
        assert _rule_names(b) == ["$Default"]  # the old rules, whole
        assert b.entity("made-after") is not None  # the rest of the follow went on
        refused = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
        assert len(refused) == 1 and "the old ones kept" in refused[0] and SUB in refused[0]
        # Fixed through node a (rules are rows of their own: removing the broken one leaves "fine"):
        # node b takes the new rules up.
        sub_a_now = a.entity(SUB)
        assert sub_a_now is not None
        await a.remove_rule(sub_a_now, "broken")
        await b.follow_entities()
        assert _rule_names(b) == ["fine"]

    _two_nodes(fresh_schema_url(database), tmp_path, scenario)


def test_a_namespace_key_regenerated_on_one_node_is_honoured_by_the_other(database: str, tmp_path: Path) -> None:
    def token(broker: Broker, key: str) -> str:
        return generate_token(f"sb://localhost:{broker.port}/q", "sender", key, int(time.time()) + 300)

    async def scenario(a: Broker, b: Broker) -> None:
        b.authorize(token(b, "send-key"), "q")
        rule = await a.regenerate_key(None, "sender", "PrimaryKey", "send-key-2")
        assert rule.primary_key == "send-key-2"
        await b.follow_entities()
        assert b.authorize(token(b, "send-key-2"), "q").key_name == "sender"
        with pytest.raises(Unauthorized):
            b.authorize(token(b, "send-key"), "q")
        assert [r.primary_key for r in b.authorization_rules] == ["root-key", "send-key-2"]

    _two_nodes(fresh_schema_url(database), tmp_path, scenario)
