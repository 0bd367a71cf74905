"""Entity lifecycle in the broker: AutoDeleteOnIdle with a fake clock, deletion, and updates."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from peek_lock_taker import Taker
from sodalite.errors import InvalidOperation, MessageLockLost, QuotaExceeded
from sodalite.model.config import NamespaceConfig, QueueConfig, TopicConfig
from sodalite.model.entities import (
    DEFAULT_RULE_NAME,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TrueFilter,
)
from sodalite.model.partition import MessageDraft
from sodalite.server.broker import Broker
from sodalite.server.entity_settings import SubQueue
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef

T0 = 1_800_000_000_000
MINUTE = 60_000
IDLE = QueueProperties(auto_delete_on_idle=timedelta(minutes=5))


def draft(body: bytes = b"x", scheduled: int | None = None) -> MessageDraft:
    return MessageDraft(None, None, None, None, scheduled, None, None, b"", 0, body)


def entity_paths(store: MemoryStore) -> list[str]:
    """The stored queues, topics and subscriptions (not the broker's own records, such as their times)."""
    return [e.path for e in store.load_entities() if e.kind in ("queue", "topic", "subscription")]


def test_idle_queues_are_deleted_and_active_ones_kept() -> None:
    async def run() -> None:
        now = [T0]
        store = MemoryStore()
        namespace = NamespaceConfig("ns", queues=(
            QueueConfig("idle", IDLE), QueueConfig("busy", IDLE), QueueConfig("scheduled", IDLE),
            QueueConfig("watched", IDLE), QueueConfig("forever", QueueProperties()),
        ))
        broker = Broker(namespace, store, clock=lambda: now[0])
        await broker.start("127.0.0.1", 0)
        try:
            busy, scheduled, watched = (broker.entity(n) for n in ("busy", "scheduled", "watched"))
            assert busy and scheduled and watched
            await busy.actor.send([draft()])
            await scheduled.actor.send([draft(scheduled=T0 + 60 * MINUTE)])
            watched.actor.add_consumer(Taker(0))

            now[0] += 4 * MINUTE
            assert await broker.sweep_idle() == []
            await busy.actor.send([draft()])  # activity: busy's idle time starts again

            now[0] += 1 * MINUTE  # 5 minutes since start: 'idle' goes
            assert await broker.sweep_idle() == ["idle"]
            assert broker.entity("idle") is None
            assert entity_paths(store) == ["busy", "forever", "scheduled", "watched"]

            now[0] += 4 * MINUTE  # 5 minutes since busy's last send: busy goes, with its messages
            assert await broker.sweep_idle() == ["busy"]
            assert store.peek(PartitionRef("busy"), 0, 1_000_000) == ()

            now[0] += 60 * MINUTE  # a scheduled message kept 'scheduled' alive; the receiver keeps 'watched'
            assert await broker.sweep_idle() == []
            assert broker.entity("forever") is not None  # TimeSpan.MaxValue: never
        finally:
            await broker.stop()

    asyncio.run(run())


def test_deleting_an_entity_detaches_its_links_with_not_found() -> None:
    import time

    from sodalite.amqp import events as ev
    from sodalite.amqp.codec import encode_value
    from sodalite.amqp.connection import Connection
    from sodalite.amqp.link import RECEIVER, SENDER
    from sodalite.amqp.performatives import Source, Target
    from sodalite.amqp.sasl import SaslClientConfig
    from sodalite.amqp.types import Described, ULong
    from sodalite.model.sas import generate_token

    async def run() -> None:
        broker = Broker(NamespaceConfig("ns", queues=(QueueConfig("doomed", IDLE),)), MemoryStore())
        port = await broker.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = Connection(server=False, container_id="t", sasl_client=SaslClientConfig(), hostname="localhost")
        client.start()
        session = client.begin()
        events: list[ev.Event] = []

        async def until(predicate: object) -> ev.Event:
            while True:
                for e in events:
                    if predicate(e):  # type: ignore[operator]
                        return e
                writer.write(client.data_to_send())
                events.extend(client.receive_data(await asyncio.wait_for(reader.read(65536), 10)))

        cbs_in = session.attach("cbs-in", RECEIVER, Source("$cbs"), Target("$cbs"))
        cbs_out = session.attach("cbs-out", SENDER, Source("$cbs"), Target("$cbs"))
        await until(lambda e: isinstance(e, ev.LinkAttached) and e.link is cbs_out)
        cbs_in.issue_credit(1)
        audience = f"sb://localhost:{port}/doomed"
        body = bytearray()
        encode_value(Described(ULong(0x73), ["id-1"]), body)
        encode_value(Described(ULong(0x74), {"name": audience, "operation": "put-token", "type": "jwt"}), body)
        token = generate_token(audience, "RootManageSharedAccessKey", "SAS_KEY_VALUE", int(time.time()) + 60)
        encode_value(Described(ULong(0x77), token), body)
        cbs_out.send_transfer(bytes(body), b"\x01", settled=True)
        await until(lambda e: isinstance(e, ev.TransferReceived) and e.link is cbs_in)
        receiver = session.attach("r", RECEIVER, Source(f"amqps://localhost:{port}/doomed"), Target("r"))
        await until(lambda e: isinstance(e, ev.LinkAttached) and e.link is receiver)
        assert receiver.attached

        entity = broker.entity("doomed")
        assert entity is not None
        await broker.delete_entity(entity)
        detached = await until(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver)
        assert isinstance(detached, ev.LinkDetached) and detached.error is not None
        assert detached.error.condition == "amqp:not-found"
        writer.close()
        await broker.stop()

    asyncio.run(run())


def test_updating_a_queue_drops_the_locks_held_on_it() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(NamespaceConfig("ns", queues=(QueueConfig("q", QueueProperties()),)), store)
        await broker.start("127.0.0.1", 0)
        try:
            entity = broker.entity("q")
            assert entity is not None
            await entity.actor.send([draft(b"\x00\x53\x75\xa0\x01m")])
            holder = Taker(1)
            entity.actor.add_consumer(holder)
            await asyncio.sleep(0.01)
            [lock] = holder.locks
            await broker.update_queue(entity, QueueProperties(lock_duration=timedelta(seconds=30),
                                                              max_delivery_count=3))
            with pytest.raises(MessageLockLost):
                entity.actor.complete(lock.token)
            # Free again, its delivery counted: unlocked in the store, and ready in the core's window.
            [row] = store.peek(PartitionRef("q"), 0, 1_000_000)
            core = entity.actor.runners[SubQueue.MAIN].view
            assert row.lock_token is None and list(core.window.records) == [row.record.sequence_number]
            assert not core.locks.held
            assert row.record.delivery_count == 1
            assert entity.actor.settings.lock_duration == 30_000 and core.settings.max_delivery_count == 3
            [stored] = [e for e in store.load_entities() if e.kind == "queue"]
            assert stored.properties["LockDuration"] == "PT30S"  # persisted
            with pytest.raises(InvalidOperation):
                await broker.update_queue(entity, QueueProperties(requires_session=True))
        finally:
            await broker.stop()

    asyncio.run(run())


def test_topic_and_subscription_idleness_follow_the_seed() -> None:
    from sodalite.model.config import SubscriptionConfig, TopicConfig
    from sodalite.model.entities import SubscriptionProperties, TopicProperties

    async def run() -> None:
        now = [T0]
        five = timedelta(minutes=5)
        namespace = NamespaceConfig("ns", topics=(
            TopicConfig("t", TopicProperties(auto_delete_on_idle=five), subscriptions=(
                SubscriptionConfig("s", SubscriptionProperties(auto_delete_on_idle=five)),
                SubscriptionConfig("keep", SubscriptionProperties()),
            )),
        ))
        store = MemoryStore()
        broker = Broker(namespace, store, clock=lambda: now[0])
        await broker.start("127.0.0.1", 0)
        try:
            topic = broker.entity("t")
            assert topic is not None
            now[0] += 4 * MINUTE
            await broker.publish(topic, [draft(b"\x00\x53\x75\xa0\x01m")])  # a send: use of the topic only
            now[0] += 1 * MINUTE
            # Copies arriving are no use of a subscription: 's' has been idle for 5 minutes.
            assert await broker.sweep_idle() == ["t/subscriptions/s"]
            now[0] += 3 * MINUTE
            assert await broker.sweep_idle() == []  # the topic's send was 4 minutes ago
            now[0] += 1 * MINUTE
            assert await broker.sweep_idle() == ["t"]  # and with it its remaining subscription
            assert broker.entities == {} and entity_paths(store) == []
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_topic_takes_subscriptions_up_to_its_quota() -> None:
    async def run() -> None:
        broker = Broker(NamespaceConfig("ns", topics=(TopicConfig("news"),)), MemoryStore(), clock=lambda: T0)
        await broker.start("127.0.0.1", 0)
        try:
            topic = broker.entity("news")
            assert topic is not None
            broker.max_subscriptions_per_topic = 2
            rules = [RuleDescription(DEFAULT_RULE_NAME, TrueFilter())]
            for name in ("a", "b"):
                await broker.create_subscription(topic, name, SubscriptionProperties(), rules)
            with pytest.raises(QuotaExceeded, match="already has 2 subscriptions"):
                await broker.create_subscription(topic, "c", SubscriptionProperties(), rules)
            assert broker.entity("news/subscriptions/c") is None
        finally:
            await broker.stop()

    asyncio.run(run())
