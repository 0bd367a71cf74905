"""Entity times and regenerated keys are one record per thing (issue 14 item 1).

When each entity was created and last updated is one record per entity, so two
brokers on one PostgreSQL schema creating and updating entities at the same moment keep every
entity's times, and each node reports the times of entities created through the other (issue 18).

Before, all the times were one record ({path: [created, updated]}) that each node rewrote whole
from what it knew: what the other node had just written was lost, and after a restart such an
entity showed the restart as its creation. A store an older release wrote holds that one record:
the broker splits it into one record per entity at start, keeping the times.

Both brokers run in this process (``cli.stores.build_broker``, as ``sodalite serve --store
postgresql://...`` builds them), on a schema of the test's own on the server this process
starts (``tests/pg_server.py``); the test calls ``follow_entities`` itself.

Regenerated keys likewise: one record per key (the namespace's or a queue's or topic's), so two nodes
regenerating different keys at once keep both, and the older release's one record is split at start.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pg_server import fresh_schema_url
from sodalite.cli.stores import build_broker
from sodalite.model.authorization import AuthorizationRule, KeyOverride, KeyOverrides
from sodalite.model.config import NamespaceConfig, QueueConfig
from sodalite.model.entities import QueueProperties
from sodalite.server.broker import Broker
from sodalite.store.port import EntityRecord, PutEntity
from sodalite.store.postgres import PostgresStore

NAMESPACE = NamespaceConfig("ns", queues=(QueueConfig("q"),))


def _times(broker: Broker, path: str) -> tuple[int, int] | None:
    entity = broker.entity(path)
    assert entity is not None, path
    return broker.times_of(entity)


def test_entities_created_and_updated_through_two_nodes_at_once_keep_their_times(
        database: str, tmp_path: Path) -> None:
    url = fresh_schema_url(database)

    async def run() -> dict[str, tuple[int, int] | None]:
        a = build_broker(NAMESPACE, tmp_path / "a", store_url=url, node_id="a")
        b = build_broker(NAMESPACE, tmp_path / "b", store_url=url, node_id="b")
        await a.start("127.0.0.1", 0)
        await b.start("127.0.0.1", 0)
        try:
            a.clock = lambda: 1_900_000_000_000
            b.clock = lambda: 1_900_000_500_000
            await asyncio.gather(*(a.create_queue(f"a{i}", QueueProperties()) for i in range(5)),
                                 *(b.create_queue(f"b{i}", QueueProperties()) for i in range(5)))
            await b.follow_entities()
            await a.follow_entities()
            q = a.entity("q")
            assert q is not None
            await a.update_queue(q, QueueProperties(max_delivery_count=3))
            await b.follow_entities()
            seen = {f"{node}:{path}": _times(broker, path) for node, broker in (("a", a), ("b", b))
                    for path in ("a0", "b4", "q")}
        finally:
            await b.stop()
            await a.stop()
        c = build_broker(NAMESPACE, tmp_path / "c", store_url=url, node_id="c")
        c.clock = lambda: 1_999_999_999_999  # a restart that is not the creation of anything
        await c.start("127.0.0.1", 0)
        try:
            seen |= {f"c:{path}": _times(c, path) for path in ("a0", "a1", "a2", "a3", "a4", "b0", "b1",
                                                               "b2", "b3", "b4", "q")}
        finally:
            await c.stop()
        return seen

    seen = asyncio.run(run())
    at_a, at_b = (1_900_000_000_000,) * 2, (1_900_000_500_000,) * 2
    assert seen["a:a0"] == seen["b:a0"] == at_a
    assert seen["a:b4"] == seen["b:b4"] == at_b
    assert seen["a:q"] is not None and seen["a:q"][1] == 1_900_000_000_000
    assert seen["b:q"] == seen["a:q"]
    for i in range(5):
        assert seen[f"c:a{i}"] == at_a
        assert seen[f"c:b{i}"] == at_b
    assert seen["c:q"] == seen["a:q"]


def test_the_one_times_record_of_an_older_release_is_split_keeping_the_times(database: str, tmp_path: Path) -> None:
    url = fresh_schema_url(database)
    store = PostgresStore(url)
    store.open()
    legacy = {"old": [1_700_000_000_000, 1_700_000_001_000], "q": [1_600_000_000_000, 1_600_000_000_000]}
    store.apply([PutEntity(EntityRecord("old", "queue", QueueProperties().to_json())),
                 PutEntity(EntityRecord("$entitytimes", "entity-times", legacy))])
    store.close()

    async def run() -> tuple[tuple[int, int] | None, tuple[int, int] | None, list[str]]:
        broker = build_broker(NAMESPACE, tmp_path / "n", store_url=url, node_id="n")
        await broker.start("127.0.0.1", 0)
        try:
            records = await broker.worker.call(broker.worker.store.load_entities)
            return _times(broker, "old"), _times(broker, "q"), sorted(
                r.path for r in records if r.kind == "entity-times")
        finally:
            await broker.stop()

    old, q, records = asyncio.run(run())
    assert old == (1_700_000_000_000, 1_700_000_001_000)
    assert q == (1_600_000_000_000, 1_600_000_000_000)
    assert records == ["$entitytimes/old", "$entitytimes/q"]


# -- regenerated keys: one record per key ---------------------------------------------------------------

KEYED = NamespaceConfig("ns", queues=(QueueConfig("q"),), authorization_rules=(
    AuthorizationRule("root", "root-key"), AuthorizationRule("one", "one-key"), AuthorizationRule("two", "two-key")))


def _keys(broker: Broker) -> dict[str, str]:
    return {r.key_name: r.primary_key for r in broker.authorization_rules}


def test_keys_regenerated_through_two_nodes_at_once_are_both_kept(database: str, tmp_path: Path) -> None:
    url = fresh_schema_url(database)

    async def run() -> list[dict[str, str]]:
        a = build_broker(KEYED, tmp_path / "a", store_url=url, node_id="a")
        b = build_broker(KEYED, tmp_path / "b", store_url=url, node_id="b")
        await a.start("127.0.0.1", 0)
        await b.start("127.0.0.1", 0)
        try:
            await asyncio.gather(a.regenerate_key(None, "one", "PrimaryKey", "one-key-2"),
                                 b.regenerate_key(None, "two", "PrimaryKey", "two-key-2"))
            await a.follow_entities()
            await b.follow_entities()
            seen = [_keys(a), _keys(b)]
        finally:
            await b.stop()
            await a.stop()
        c = build_broker(KEYED, tmp_path / "c", store_url=url, node_id="c")
        await c.start("127.0.0.1", 0)
        try:
            return [*seen, _keys(c)]
        finally:
            await c.stop()

    want = {"root": "root-key", "one": "one-key-2", "two": "two-key-2"}
    assert asyncio.run(run()) == [want, want, want]


def test_the_one_keys_record_of_an_older_release_is_split_keeping_the_keys(database: str, tmp_path: Path) -> None:
    url = fresh_schema_url(database)
    legacy = KeyOverrides().with_override(None, KeyOverride("one", "one-key-9", None, "one-key", None))
    store = PostgresStore(url)
    store.open()
    store.apply([PutEntity(EntityRecord("$authorizationrules", "authorization-rules", legacy.to_json()))])
    store.close()

    async def run() -> tuple[dict[str, str], list[str]]:
        broker = build_broker(KEYED, tmp_path / "n", store_url=url, node_id="n")
        await broker.start("127.0.0.1", 0)
        try:
            records = await broker.worker.call(broker.worker.store.load_entities)
            return _keys(broker), sorted(r.path for r in records if r.kind == "authorization-rules")
        finally:
            await broker.stop()

    keys, records = asyncio.run(run())
    assert keys == {"root": "root-key", "one": "one-key-9", "two": "two-key"}
    assert records == ["$authorizationrules/$namespace/one"]
