"""A topic's fan-out commits every subscription's copy in one transaction: all or none."""

from __future__ import annotations

import asyncio

import pytest

from sodalite.errors import StoreUnavailable
from sodalite.model.config import NamespaceConfig, SubscriptionConfig, TopicConfig
from sodalite.model.entities import RuleDescription, SqlFilter
from sodalite.model.partition import MessageDraft
from sodalite.server.broker import Broker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef

BODY = b"\x00\x53\x75\xa0\x01x"


def draft() -> MessageDraft:
    return MessageDraft("m-1", None, None, None, None, None, None, b"", 0, BODY)


def _namespace() -> NamespaceConfig:
    subscriptions = (
        SubscriptionConfig("a"), SubscriptionConfig("b"),
        SubscriptionConfig("c", rules=(RuleDescription("only-red", SqlFilter("color = 'red'")),)),
    )
    return NamespaceConfig("ns", topics=(TopicConfig("t", subscriptions=subscriptions),))


def test_a_failed_commit_leaves_no_subscription_with_a_partial_copy() -> None:
    async def run() -> None:
        store = MemoryStore()
        broker = Broker(_namespace(), store, core="v1")
        await broker.start("127.0.0.1", 0)
        try:
            topic = broker.entity("t")
            assert topic is not None and len(topic.subscriptions) == 3
            store.fail_next_apply(StoreUnavailable("disk gone"))
            with pytest.raises(StoreUnavailable):
                await broker.publish(topic, [draft()])
            for sub in ("a", "b", "c"):
                assert store.load_partition(PartitionRef(f"t/subscriptions/{sub}")).messages == ()
                assert broker.entities[f"t/subscriptions/{sub}"].actor.partition.messages == {}
            for _ in range(100):  # the topic's actor reloads after the failure
                if not topic.actor._reloading:
                    break
                await asyncio.sleep(0.01)
            await broker.publish(topic, [draft()])
            stored = {sub: len(store.load_partition(PartitionRef(f"t/subscriptions/{sub}")).messages)
                      for sub in ("a", "b", "c")}
            assert stored == {"a": 1, "b": 1, "c": 0}  # the red-only subscription's rule did not match
        finally:
            await broker.stop()

    asyncio.run(run())
