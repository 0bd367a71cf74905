"""Moving messages between entities (resubmit/move/redrive) and purging, in an in-process broker.

Memory stores stand in for durable ones here (the store contract holds them to the same rules);
a second store and its injected failure show the keyed move across stores never doubling.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from peek_lock_taker import Taker
from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, ULong
from sodalite.errors import FilterSyntaxError, InvalidOperation, StoreUnavailable
from sodalite.model.config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import (
    QueueProperties,
    RuleDescription,
    SqlFilter,
    SqlRuleAction,
    SubscriptionProperties,
    TopicProperties,
)
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.server import moves, wire
from sodalite.server.broker import Broker
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_settings import SubQueue
from sodalite.server.registry import Entity
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef


def draft(message_id: str, color: str = "red") -> MessageDraft:
    out = bytearray()
    encode_value(Described(ULong(amqp_message.PROPERTIES), [message_id]), out)
    encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), {"color": color}), out)
    encode_value(Described(ULong(amqp_message.DATA), b"body-" + message_id.encode()), out)
    return MessageDraft(message_id, None, None, None, None, True, None, b"", 0, bytes(out))


async def dead_letter_all(entity: Entity, ids: list[str]) -> None:
    actor = entity.actor
    assert isinstance(actor, CoreActor)
    await actor.send([draft(i, "red" if n % 2 == 0 else "blue") for n, i in enumerate(ids)])
    taker = Taker(len(ids))
    actor.add_consumer(taker)
    for _ in range(50):
        if len(taker.got) == len(ids):
            break
        await asyncio.sleep(0.01)
    for lock in taker.locks:
        await actor.dead_letter(lock.token, "Bad", "it was bad")
    actor.remove_consumer(taker)


def stored(store: MemoryStore, path: str) -> list[MessageRecord]:
    return [m.record for m in store.peek(PartitionRef(path, 0), 0, 1_000_000)]


async def dead_letters(entity: Entity) -> list[int]:
    return await moves.select_messages(entity, SubQueue.DEAD_LETTER)


def names_on_two_stores(broker: Broker) -> tuple[str, str]:
    """A queue name kept in the default store and one kept in the other (the name picks the store)."""
    default = next(f"q{i}" for i in range(100) if broker._home_store(f"q{i}") is broker.workers[0])
    other = next(f"q{i}" for i in range(100) if broker._home_store(f"q{i}") is broker.workers[1])
    return default, other


def test_resubmit_within_one_store_keeps_the_message_and_resets_it() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(NamespaceConfig("ns", queues=(QueueConfig("orders"),
                                                      QueueConfig("other", QueueProperties(
                                                          requires_duplicate_detection=True,
                                                          duplicate_detection_history_time_window=timedelta(
                                                              minutes=10))))), store)
        await broker.start("127.0.0.1", 0)
        try:
            orders, other = broker.entity("orders"), broker.entity("other")
            assert orders is not None and other is not None
            await dead_letter_all(orders, ["m1", "m2", "m3"])
            assert [m.message_id for m in stored(store, "orders/$deadletterqueue")] == ["m1", "m2", "m3"]
            await other.actor.send([draft("m2")])  # the target's duplicate detection has seen m2

            blue = await moves.select_messages(orders, SubQueue.DEAD_LETTER, sql_filter="color = 'blue'")
            assert len(blue) == 1
            result = await moves.move(orders, SubQueue.DEAD_LETTER, blue, other)
            assert result == moves.MoveResult(1, 0)
            assert [m.message_id for m in stored(store, "other")] == ["m2", "m2"]  # a move is not a send

            rest = await dead_letters(orders)
            result = await moves.move(orders, SubQueue.DEAD_LETTER, rest, orders)
            assert result.moved == 2
            assert stored(store, "orders/$deadletterqueue") == []
            back = stored(store, "orders")
            assert [m.message_id for m in back] == ["m1", "m3"]
            for record in back:
                assert record.delivery_count == 0 and record.state is MessageState.ACTIVE
                props = wire.application_properties(record.tail)
                assert props == {"color": "red"}  # the dead-letter reason and description are gone
            for _ in range(3000):  # the dead-letter queue's core counts what left it once told
                if orders.actor.counts()["dead_letter"] == 0:
                    break
                await asyncio.sleep(0.01)
            counts = orders.actor.counts()
            assert counts["active"] == 2 and counts["dead_letter"] == 0
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_bad_filter_and_a_target_that_needs_sessions_are_refused_before_anything_moves() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(NamespaceConfig("ns", queues=(
            QueueConfig("src"), QueueConfig("sess", QueueProperties(requires_session=True)))), store)
        await broker.start("127.0.0.1", 0)
        try:
            src, sess = broker.entity("src"), broker.entity("sess")
            assert src is not None and sess is not None
            await dead_letter_all(src, ["a", "b"])
            with pytest.raises(FilterSyntaxError):
                await moves.select_messages(src, SubQueue.DEAD_LETTER, sql_filter="color = = 'x'")
            with pytest.raises(InvalidOperation):
                await moves.move(src, SubQueue.DEAD_LETTER, await dead_letters(src), sess)
            assert len(stored(store, "src/$deadletterqueue")) == 2
            assert stored(store, "sess") == []
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_move_across_stores_retried_after_a_failure_never_doubles() -> None:
    async def run() -> None:
        default, other = MemoryStore(), MemoryStore()
        probe = Broker(NamespaceConfig("ns"), MemoryStore(), more_stores=[("second", MemoryStore())])
        source_name, target_name = names_on_two_stores(probe)
        broker = Broker(NamespaceConfig("ns", queues=(QueueConfig(source_name), QueueConfig(target_name))),
                        default, more_stores=[("second", other)])
        await broker.start("127.0.0.1", 0)
        try:
            source, target = broker.entity(source_name), broker.entity(target_name)
            assert source is not None and target is not None
            assert isinstance(source.actor, CoreActor) and isinstance(target.actor, CoreActor)
            assert source.actor.worker is not target.actor.worker
            await dead_letter_all(source, [str(uuid.uuid4()) for _ in range(5)])
            numbers = await dead_letters(source)

            # The target commits the messages with their keys; then the source's delete fails.
            default.fail_next_apply(OSError("disk gone"))
            with pytest.raises(StoreUnavailable):
                await moves.move(source, SubQueue.DEAD_LETTER, numbers, target)
            assert len(stored(other, target_name)) == 5
            assert len(other.partition_meta(PartitionRef(target_name, 0)).move_keys) == 5
            for _ in range(100):  # the source rebuilds itself from its store: the copies are back
                if source.actor.available:
                    break
                await asyncio.sleep(0.01)
            assert len(await dead_letters(source)) == 5

            result = await moves.move(source, SubQueue.DEAD_LETTER, await dead_letters(source),
                                      target)
            assert result.moved == 5
            assert len(stored(other, target_name)) == 5  # not 10
            assert stored(default, f"{source_name}/$deadletterqueue") == []
            assert other.partition_meta(PartitionRef(target_name, 0)).move_keys == ()
            assert target.actor.counts()["active"] == 5
        finally:
            await broker.stop()

    asyncio.run(run())


def test_purge_deletes_unlocked_messages_and_counts_them() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(NamespaceConfig("ns", queues=(QueueConfig("p"),)), store)
        await broker.start("127.0.0.1", 0)
        try:
            entity = broker.entity("p")
            assert entity is not None and isinstance(entity.actor, CoreActor)
            await entity.actor.send([draft(f"m{i}") for i in range(10)])
            taker = Taker(1)
            entity.actor.add_consumer(taker)
            for _ in range(50):
                if taker.got:
                    break
                await asyncio.sleep(0.01)
            result = await moves.purge(entity, SubQueue.MAIN)
            assert result == moves.MoveResult(9, 1)  # the locked one is skipped
            assert [m.message_id for m in stored(store, "p")] == ["m0"]
        finally:
            await broker.stop()

    asyncio.run(run())


def _topic_namespace(queue: str, topic: str) -> NamespaceConfig:
    """A queue, and a topic whose duplicate detection has a window and whose subscriptions filter:
    'all' takes everything, 'red' only red messages, 'tagged' red ones with an action."""
    return NamespaceConfig("ns", queues=(QueueConfig(queue),), topics=(TopicConfig(
        topic, TopicProperties(requires_duplicate_detection=True,
                               duplicate_detection_history_time_window=timedelta(minutes=10)),
        subscriptions=(SubscriptionConfig("all"),
                       SubscriptionConfig("red", rules=(RuleDescription("red", SqlFilter("color = 'red'")),)),
                       SubscriptionConfig("tagged", rules=(RuleDescription(
                           "tag", SqlFilter("color = 'red'"), SqlRuleAction("SET tagged = 'yes'")),)))),))


def _ids(store: MemoryStore, path: str) -> list[str | None]:
    return sorted(m.message_id for m in stored(store, path))


async def fanned_out(store: MemoryStore, path: str, count: int) -> None:
    """A move into a topic lands in the topic's own partition, whose activator fans the messages out
    to the subscriptions after it (server/topic_actor.py): wait (30 s at most) for ``count`` copies."""
    for _ in range(3000):
        if len(stored(store, path)) >= count:
            return
        await asyncio.sleep(0.01)


def test_a_move_into_a_topic_fans_out_as_a_send_and_removes_the_source_in_one_transaction() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(_topic_namespace("orders", "events"), store)
        await broker.start("127.0.0.1", 0)
        try:
            orders, events = broker.entity("orders"), broker.entity("events")
            assert orders is not None and events is not None
            await dead_letter_all(orders, ["m0", "m1", "m2", "m3"])  # m0, m2 red; m1, m3 blue
            await broker.publish(events, [draft("m0")])  # the topic's duplicate detection has seen m0

            numbers = await dead_letters(orders)
            result = await moves.move(orders, SubQueue.DEAD_LETTER, numbers, events)
            assert result == moves.MoveResult(4, 0)
            assert stored(store, "orders/$deadletterqueue") == []
            for path, count in (("all", 5), ("red", 3), ("tagged", 3)):
                await fanned_out(store, f"events/subscriptions/{path}", count)
            assert _ids(store, "events/subscriptions/all") == ["m0", "m0", "m1", "m2", "m3"]  # not deduplicated
            assert _ids(store, "events/subscriptions/red") == ["m0", "m0", "m2"]
            tagged = [m for m in stored(store, "events/subscriptions/tagged")]
            assert sorted(m.message_id for m in tagged) == ["m0", "m0", "m2"]
            for record in tagged:
                props = wire.application_properties(record.tail)
                assert props["tagged"] == "yes" and props["RuleName"] == "tag"
                assert wire.DEAD_LETTER_REASON not in props
            for record in stored(store, "events/subscriptions/all"):
                assert record.delivery_count == 0 and record.state is MessageState.ACTIVE
                assert wire.DEAD_LETTER_REASON not in wire.application_properties(record.tail)
            all_sub = broker.entity("events/subscriptions/all")
            assert all_sub is not None and all_sub.actor.counts()["active"] == 5  # published after the commit
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_failed_move_into_a_topic_in_the_same_store_changes_nothing() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(_topic_namespace("orders", "events"), store)
        await broker.start("127.0.0.1", 0)
        try:
            orders, events = broker.entity("orders"), broker.entity("events")
            assert orders is not None and events is not None and isinstance(orders.actor, CoreActor)
            await dead_letter_all(orders, ["a", "b"])
            store.fail_next_apply(OSError("disk gone"))
            with pytest.raises(StoreUnavailable):
                await moves.move(orders, SubQueue.DEAD_LETTER, await dead_letters(orders), events)
            assert _ids(store, "orders/$deadletterqueue") == ["a", "b"]
            assert stored(store, "events/subscriptions/all") == []  # one transaction: nothing half-done
            for _ in range(100):
                if orders.actor.available:
                    break
                await asyncio.sleep(0.01)
            result = await moves.move(orders, SubQueue.DEAD_LETTER, await dead_letters(orders),
                                      events)
            assert result.moved == 2
            await fanned_out(store, "events/subscriptions/all", 2)
            assert _ids(store, "events/subscriptions/all") == ["a", "b"]
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_move_into_a_topic_in_another_store_retried_after_a_failure_never_doubles() -> None:
    async def run() -> None:
        default, other = MemoryStore(), MemoryStore()
        probe = Broker(NamespaceConfig("ns"), MemoryStore(), more_stores=[("second", MemoryStore())])
        queue_name, topic_name = names_on_two_stores(probe)
        broker = Broker(_topic_namespace(queue_name, topic_name), default, more_stores=[("second", other)])
        await broker.start("127.0.0.1", 0)
        try:
            source, topic = broker.entity(queue_name), broker.entity(topic_name)
            assert source is not None and topic is not None and isinstance(source.actor, CoreActor)
            assert isinstance(topic.actor, CoreActor) and source.actor.worker is not topic.actor.worker
            await dead_letter_all(source, ["r0", "b1", "r2", "b3", "r4"])

            default.fail_next_apply(OSError("disk gone"))  # the subscriptions commit; the source's delete fails
            with pytest.raises(StoreUnavailable):
                await moves.move(source, SubQueue.DEAD_LETTER, await dead_letters(source), topic)
            assert len(stored(other, f"{topic_name}/subscriptions/all")) == 5
            assert len(other.partition_meta(PartitionRef(f"{topic_name}/subscriptions/red", 0)).move_keys) == 3
            for _ in range(100):
                if source.actor.available:
                    break
                await asyncio.sleep(0.01)
            assert len(await dead_letters(source)) == 5  # still in the source

            result = await moves.move(source, SubQueue.DEAD_LETTER, await dead_letters(source),
                                      topic)
            assert result.moved == 5
            assert _ids(other, f"{topic_name}/subscriptions/all") == ["b1", "b3", "r0", "r2", "r4"]  # not 10
            assert _ids(other, f"{topic_name}/subscriptions/red") == ["r0", "r2", "r4"]
            assert _ids(other, f"{topic_name}/subscriptions/tagged") == ["r0", "r2", "r4"]
            assert stored(default, f"{queue_name}/$deadletterqueue") == []
            for name in ("all", "red", "tagged"):
                assert other.partition_meta(PartitionRef(f"{topic_name}/subscriptions/{name}", 0)).move_keys == ()
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_keyed_move_into_a_topic_fans_out_as_a_send_over_two_stores_and_a_retry_fills_in_the_failed_one() -> None:
    """The topic (store 'second') plans each message's copies as a send's: 'all' takes every one, the
    topic's duplicate detection does not apply, 'strict' dead-letters what its filter cannot evaluate,
    'fwd' forwards into a queue in the source's store. Each store takes its copies by one batch; the
    source's store fails that batch, so the move fails, 'second' keeps its copies and their keys, and
    the repeat stores only what was missing: every copy once, the topic's own partition untouched,
    every key forgotten, each destination's core counting what landed."""
    async def run() -> None:
        default, other = MemoryStore(), MemoryStore()
        probe = Broker(NamespaceConfig("ns"), MemoryStore(), more_stores=[("second", MemoryStore())])
        in_default = [f"q{i}" for i in range(100) if probe._home_store(f"q{i}") is probe.workers[0]]
        queue_name, near_name = in_default[0], in_default[1]
        topic_name = next(f"t{i}" for i in range(100) if probe._home_store(f"t{i}") is probe.workers[1])
        namespace = NamespaceConfig("ns", queues=(QueueConfig(queue_name), QueueConfig(near_name)), topics=(TopicConfig(
            topic_name, TopicProperties(requires_duplicate_detection=True,
                                        duplicate_detection_history_time_window=timedelta(minutes=10)),
            subscriptions=(
                SubscriptionConfig("all"),
                SubscriptionConfig("strict",
                                   SubscriptionProperties(dead_lettering_on_filter_evaluation_exceptions=True),
                                   rules=(RuleDescription("ordered", SqlFilter("color > 5")),)),
                SubscriptionConfig("fwd", SubscriptionProperties(forward_to=near_name),
                                   rules=(RuleDescription("red", SqlFilter("color = 'red'")),)))),))
        broker = Broker(namespace, default, more_stores=[("second", other)])
        await broker.start("127.0.0.1", 0)
        try:
            source, topic, near = broker.entity(queue_name), broker.entity(topic_name), broker.entity(near_name)
            assert source is not None and topic is not None and near is not None
            assert isinstance(source.actor, CoreActor) and isinstance(topic.actor, CoreActor)
            assert isinstance(near.actor, CoreActor)
            assert topic.actor.worker is not source.actor.worker and near.actor.worker is source.actor.worker
            await dead_letter_all(source, ["r0", "b1", "r2"])  # r0, r2 red; b1 blue
            await broker.publish(topic, [draft("r0")])  # the topic's duplicate detection has seen r0
            all_path, strict_path = f"{topic_name}/subscriptions/all", f"{topic_name}/subscriptions/strict"
            strict_dead = f"{strict_path}/$deadletterqueue"
            assert _ids(other, all_path) == ["r0"]
            assert _ids(other, strict_dead) == ["r0"] and _ids(default, near_name) == ["r0"]

            default.fail_next_apply(OSError("disk gone"))  # the copies for the queue in the source's store
            with pytest.raises(StoreUnavailable):
                await moves.move(source, SubQueue.DEAD_LETTER, await dead_letters(source), topic)
            assert _ids(other, all_path) == ["b1", "r0", "r0", "r2"]  # a move is not a send
            assert _ids(other, strict_dead) == ["b1", "r0", "r0", "r2"]
            assert _ids(default, near_name) == ["r0"]
            assert len(other.partition_meta(PartitionRef(all_path, 0)).move_keys) == 3
            for actor in (source.actor, near.actor):
                for _ in range(3000):
                    if actor.available:
                        break
                    await asyncio.sleep(0.01)
            assert len(await dead_letters(source)) == 3

            result = await moves.move(source, SubQueue.DEAD_LETTER, await dead_letters(source), topic)
            assert result == moves.MoveResult(3, 0)
            assert _ids(other, all_path) == ["b1", "r0", "r0", "r2"]
            assert _ids(other, strict_dead) == ["b1", "r0", "r0", "r2"]
            for record in stored(other, strict_dead):
                assert wire.application_properties(record.tail)[wire.DEAD_LETTER_REASON] == "FilterEvaluationException"
            assert _ids(default, near_name) == ["r0", "r0", "r2"]
            for record in stored(default, near_name) + stored(other, all_path):
                assert record.delivery_count == 0 and record.state is MessageState.ACTIVE
                assert wire.DEAD_LETTER_REASON not in wire.application_properties(record.tail)
            assert stored(default, f"{queue_name}/$deadletterqueue") == []
            assert stored(other, topic_name) == []  # nothing waits in the topic's own partition
            for store, path in ((other, topic_name), (other, all_path), (other, strict_dead), (default, near_name)):
                assert store.partition_meta(PartitionRef(path, 0)).move_keys == ()

            all_sub, strict_sub = broker.entity(all_path), broker.entity(strict_path)
            assert all_sub is not None and strict_sub is not None
            expected = ((all_sub, "active", 4), (strict_sub, "dead_letter", 4), (near, "active", 3))
            for _ in range(3000):  # each destination's core was told what landed in it
                if all(entity.actor.counts()[kind] == count for entity, kind, count in expected):
                    break
                await asyncio.sleep(0.01)
            assert [entity.actor.counts()[kind] for entity, kind, _ in expected] == [4, 4, 3]
        finally:
            await broker.stop()

    asyncio.run(run())
