"""Which entities stay on the version-1 path under ``--core v2`` (``broker._kept_on_v1``): groups
joined by forwarding (and subscriptions to their topics) move together (``model/placement.py``), and
none stays behind any more. Partitioned topics run on the core since they were built there; groups
spanning messaging stores or mixing partitioned and non-partitioned entities since a topic stores
copies in other stores by those stores' batches; groups forwarding dead letters out of their store or
into a partitioned entity since the relay carries them (issue 14): the tests that pinned those groups
on version 1 now assert they run on the core."""

from __future__ import annotations

from sodalite.server.broker import _kept_on_v1
from sodalite.store.port import EntityRecord


def queue(path: str, **properties: object) -> EntityRecord:
    return EntityRecord(path, "queue", dict(properties))


def topic(path: str, **properties: object) -> EntityRecord:
    return EntityRecord(path, "topic", dict(properties))


def subscription(topic_path: str, name: str, **properties: object) -> EntityRecord:
    return EntityRecord(f"{topic_path}/subscriptions/{name}", "subscription",
                        {"Properties": dict(properties), "Rules": []})


def one_store(path: str) -> object:
    return "store"


def test_forwarding_alone_keeps_nothing_on_v1() -> None:
    records = [queue("a", ForwardTo="b"), queue("b"), topic("t"), subscription("t", "s", ForwardTo="A"),
               topic("u"), subscription("u", "x", ForwardTo="t")]
    assert _kept_on_v1(records, one_store) == set()


def test_forwarding_dead_letters_in_one_store_keeps_nothing_on_v1() -> None:
    """The core forwards dead letters in the dead-lettering's own transaction (issue 14)."""
    records = [queue("src", ForwardDeadLetteredMessagesTo="dst"), queue("dst"), queue("feeder", ForwardTo="Dst"),
               queue("alone"), topic("t"), subscription("t", "s", ForwardDeadLetteredMessagesTo="dst")]
    assert _kept_on_v1(records, one_store) == set()


def test_forwarding_dead_letters_across_stores_or_into_a_partitioned_queue_runs_on_the_core() -> None:
    """Dead letters forwarded out of their store (or into a partitioned queue) go through a relay."""
    across = [queue("src", ForwardDeadLetteredMessagesTo="dst"), queue("dst"), queue("alone")]
    assert _kept_on_v1(across, lambda path: "other" if path == "dst" else "main") == set()
    partitioned = [queue("src", ForwardDeadLetteredMessagesTo="p"), queue("p", EnablePartitioning=True)]
    assert _kept_on_v1(partitioned, one_store) == set()


def test_a_partitioned_topic_forwarding_into_a_non_partitioned_queue_runs_on_the_core() -> None:
    records = [topic("T", EnablePartitioning=True), subscription("T", "s", ForwardTo="q"), queue("q"),
               subscription("T", "plain"), queue("other")]
    assert _kept_on_v1(records, one_store) == set()
    assert _kept_on_v1(records, lambda path: path) == set()


def test_a_partitioned_queue_runs_on_the_core_also_when_forwarding_joins_it() -> None:
    alone = [queue("p", EnablePartitioning=True)]
    assert _kept_on_v1(alone, one_store) == set()
    joined = [queue("p", EnablePartitioning=True), topic("t"), subscription("t", "s", ForwardTo="p")]
    assert _kept_on_v1(joined, one_store) == set()


def test_a_group_across_stores_runs_on_the_core() -> None:
    records = [topic("t"), subscription("t", "s", ForwardTo="q"), queue("q"), queue("r")]
    assert _kept_on_v1(records, lambda path: "store-of-q" if path == "q" else "main") == set()
    plain = [topic("t"), subscription("t", "s")]
    assert _kept_on_v1(plain, lambda path: "store-of-t" if path == "t" else "other") == set()


def test_dead_letters_forwarded_past_a_chain_into_another_store_run_on_the_core() -> None:
    """Where dead letters land is the end of the target's ForwardTo chain (a relay when in another store)."""
    stores = {"src": "a", "mid": "a", "end": "b", "t": "b"}
    chain = [queue("src", ForwardDeadLetteredMessagesTo="mid"), queue("mid", ForwardTo="end"), queue("end")]
    assert _kept_on_v1(chain, lambda path: stores[path]) == set()
    into_topic = [queue("src", ForwardDeadLetteredMessagesTo="mid"), queue("mid", ForwardTo="t"), topic("t")]
    assert _kept_on_v1(into_topic, lambda path: stores[path]) == set()
    within = [queue("src", ForwardDeadLetteredMessagesTo="mid"), queue("mid"), topic("t"),
              subscription("t", "s", ForwardTo="src")]
    assert _kept_on_v1(within, lambda path: stores[path]) == set()


def test_a_partitioned_topic_runs_on_the_core_with_its_subscriptions() -> None:
    records = [topic("T", EnablePartitioning=True), subscription("T", "a"), subscription("T", "b"), queue("q")]
    assert _kept_on_v1(records, one_store) == set()
    # Partition i of each lies in store i mod the stores, wherever the paths would hash.
    assert _kept_on_v1(records, lambda path: path) == set()


def test_a_partitioned_topic_forwarding_into_partitioned_entities_runs_on_the_core() -> None:
    records = [topic("T", EnablePartitioning=True), subscription("T", "s", ForwardTo="pq"),
               queue("pq", EnablePartitioning=True), subscription("T", "u", ForwardTo="PU"),
               topic("pu", EnablePartitioning=True), subscription("pu", "x"),
               queue("pf", EnablePartitioning=True, ForwardTo="pq")]
    assert _kept_on_v1(records, lambda path: path) == set()


def test_partitioned_entities_forwarding_their_dead_letters_run_on_the_core() -> None:
    """Issue 14: partition i dead-letters into the target's partition i, in the same store."""
    records = [topic("T", EnablePartitioning=True), subscription("T", "s", ForwardDeadLetteredMessagesTo="pq"),
               queue("pq", EnablePartitioning=True), topic("other", EnablePartitioning=True),
               queue("pp", EnablePartitioning=True, ForwardDeadLetteredMessagesTo="pq")]
    assert _kept_on_v1(records, one_store) == set()
