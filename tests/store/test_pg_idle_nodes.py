"""AutoDeleteOnIdle across two nodes on one PostgreSQL schema (issue 18.3; clarifications.md, 18):
each node writes its last activity and the receivers attached to it to the store, and the idle
sweep decides from the store alone, fenced there: no node deletes an entity another node serves, a
node that stops refreshing lapses after three intervals, and two nodes sweeping at once delete an
idle entity once.

Both brokers run in this process (``cli.stores.build_broker``, as ``sodalite serve --store
postgresql://...`` builds them), each with its own store connections, on a schema of the
test's own. AutoDeleteOnIdle is at least 5 minutes, so the brokers' clocks are the wall clock plus
an offset the test moves on; the test calls ``sweep_idle`` and node b's ``record_activity`` itself
(their loops are set to hours), so it asserts what one refresh and one sweep do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from peek_lock_taker import Taker
from pg_server import fresh_schema_url
from sodalite.cli.stores import build_broker
from sodalite.model.config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import QueueProperties, SubscriptionProperties, TopicProperties
from sodalite.server.broker import ACTIVITY_LAPSE, ACTIVITY_SECONDS, Broker
from sodalite.server.entity_settings import wall_clock_ms

MINUTE = 60_000
IDLE = timedelta(minutes=5)
NAMESPACE = NamespaceConfig(
    "ns",
    queues=(QueueConfig("idle", QueueProperties(auto_delete_on_idle=IDLE)),
            QueueConfig("orphan", QueueProperties(auto_delete_on_idle=IDLE)),
            QueueConfig("forever")),
    topics=(TopicConfig("news", TopicProperties(auto_delete_on_idle=IDLE),
                        subscriptions=(SubscriptionConfig("all", SubscriptionProperties()),)),),
)


Scenario = Callable[[Broker, Broker, list[int]], Awaitable[None]]


def _two_nodes(url: str, tmp_path: Path, scenario: Scenario) -> None:
    async def run() -> None:
        offset = [0]
        nodes = []
        for name in ("a", "b"):
            node = build_broker(NAMESPACE, tmp_path / name, store_url=url, node_id=name)
            node.clock = lambda: wall_clock_ms() + offset[0]
            node.idle_sweep_seconds = 3600.0  # the test sweeps itself
            nodes.append(node)
        # Node b refreshes only when the test says (node a's own refreshes, every 5 s, change nothing here).
        nodes[1].activity_seconds = 3600.0
        a, b = nodes
        await a.start("127.0.0.1", 0)
        try:
            await b.start("127.0.0.1", 0)
            try:
                await scenario(a, b, offset)
            finally:
                await b.stop()
        finally:
            await a.stop()

    asyncio.run(run())


def _stored(broker: Broker) -> list[str]:
    return sorted(e.path for e in broker.worker.store.load_entities() if e.kind in ("queue", "topic"))


def test_an_entity_served_on_one_node_is_not_deleted_by_the_others_sweep_and_goes_once_idle(
        database: str, tmp_path: Path) -> None:
    async def scenario(a: Broker, b: Broker, offset: list[int]) -> None:
        served, subscription = b.entity("idle"), b.entity("news/subscriptions/all")
        assert served is not None and subscription is not None
        receiver, listener = Taker(0), Taker(0)
        served.actor.add_consumer(receiver)  # a receiver on node b only
        subscription.actor.add_consumer(listener)  # and one on the topic's subscription
        offset[0] += 6 * MINUTE  # idle for longer than AutoDeleteOnIdle on node a
        await b.record_activity()
        assert await a.sweep_idle() == ["orphan"]  # nobody serves that one
        assert a.entity("idle") is not None and a.entity("news") is not None
        assert _stored(a) == ["forever", "idle", "news"]

        served.actor.remove_consumer(receiver)
        subscription.actor.remove_consumer(listener)
        await b.record_activity()
        offset[0] += 6 * MINUTE  # and now idle on both nodes
        deleted = await asyncio.gather(a.sweep_idle(), b.sweep_idle())
        assert sorted(name for names in deleted for name in names) == ["idle", "news"]  # each once
        await a.follow_entities()
        await b.follow_entities()
        for node in (a, b):
            assert node.entity("idle") is None and node.entity("news") is None
            assert node.entity("news/subscriptions/all") is None
        assert _stored(a) == ["forever"]

    _two_nodes(fresh_schema_url(database), tmp_path, scenario)


def test_a_node_that_stops_refreshing_lapses_after_three_intervals(database: str, tmp_path: Path) -> None:
    async def scenario(a: Broker, b: Broker, offset: list[int]) -> None:
        served = b.entity("orphan")
        assert served is not None
        served.actor.add_consumer(Taker(0))
        offset[0] += 6 * MINUTE
        await b.record_activity()
        assert "orphan" not in await a.sweep_idle()  # node b serves it
        # node b refreshes no more (as a node that died): its receiver counts for three intervals
        offset[0] += int((ACTIVITY_LAPSE - 1) * ACTIVITY_SECONDS * 1000)
        assert "orphan" not in await a.sweep_idle()
        offset[0] += int(2 * ACTIVITY_SECONDS * 1000)
        assert "orphan" in await a.sweep_idle()
        assert "orphan" not in _stored(a)

    _two_nodes(fresh_schema_url(database), tmp_path, scenario)
