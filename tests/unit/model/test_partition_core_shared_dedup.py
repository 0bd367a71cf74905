"""A store several nodes share (``CoreSettings.shared_store``, issue 18): the store decides
duplicates, in the batch that appends (the core's detector is only a first filter), and the core
reads its counts back from the store when told (``RefreshCounts``)."""

from __future__ import annotations

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition_core import (
    CoreSettings,
    Publish,
    PublishCopy,
    Published,
    PublishEntry,
    ReadCounts,
    RefreshCounts,
    Send,
    SendAccepted,
    StoreFailed,
    Tick,
    new_view,
)
from sodalite.model.store_ops import Append, AppendTo, ClaimMessageIds, ForgetMessageIds, PruneMessageIds

WINDOW = 60_000


def shared(store: PartitionStore | None = None) -> Harness:
    settings = CoreSettings(lock_duration=30_000, duplicate_window=WINDOW, shared_store=True)
    return Harness(new_view(settings, 0, token_seed=4), store)


def send(h: Harness, *mids: str | None) -> list[int]:
    replies = h.run(Send(tuple(draft(mid) for mid in mids), "s")) + h.drain()
    (accepted,) = [r for r in replies if isinstance(r, SendAccepted)]
    return list(accepted.sequence_numbers)


def test_the_batch_claims_the_ids_before_the_append_it_gates() -> None:
    h = shared()
    assert send(h, "a", None) == [1, 2]
    claim, append = h.ops
    assert isinstance(claim, ClaimMessageIds) and claim.message_ids == ("a",) and claim.window_ms == WINDOW
    assert isinstance(append, Append) and append.gate is not None
    assert append.gate.claim == claim.claim and append.gate.message_ids == ("a", None)


def test_an_id_another_node_took_is_acknowledged_and_not_stored_and_the_store_decides_again() -> None:
    h = shared()
    h.store.remember_ids(("a", 0))  # another node stored a message with id "a"
    h.at(10)
    assert send(h, "a", "b") == [1]  # acknowledged; only "b" stored
    assert [row.record.message_id for row in h.store.rows.values()] == ["b"]
    assert h.view.dedup.detector is not None and not h.view.dedup.detector.is_duplicate("a", 10)  # the filter let it go
    assert h.view.dedup.detector.is_duplicate("b", 10)
    h.at(20)
    before = len(h.ops)
    assert send(h, "a") == []  # asked the store again: still a duplicate
    assert isinstance(h.ops[before], ClaimMessageIds)
    assert send(h, "b") == []  # the filter's own id: no batch at all
    assert len(h.ops) == before + 2
    # past the other node's window the id is new
    h.at(WINDOW + 1)
    assert send(h, "a") == [2]


def test_pruning_drops_every_entry_past_the_window_and_spares_one_taken_again_since() -> None:
    h = shared()
    send(h, "a")
    h.store.remember_ids(("gone", 0))  # another node's id (that node stopped: it prunes nothing)
    assert h.next_due == WINDOW  # the history's own prune timer comes first; "a" is due at WINDOW + 1
    h.at(WINDOW + 1)
    h.run(Tick())
    (prune,) = [op for op in h.ops if isinstance(op, PruneMessageIds)]
    assert prune == PruneMessageIds(1)  # every entry seen before now - window
    assert not any(isinstance(op, ForgetMessageIds) for op in h.ops)
    h.store.remember_ids(("a", WINDOW))  # another node took "a" again meanwhile
    h.drain()
    assert h.store.message_ids == {"a": WINDOW}


def test_a_shared_store_history_is_pruned_once_per_window_even_without_own_ids() -> None:
    h = shared()
    h.store.remember_ids(("theirs", 5))
    h.run(Tick())
    assert h.next_due == WINDOW  # nothing of its own to forget, and still a prune
    h.at(WINDOW + 10)
    h.run(Tick())
    h.drain()
    assert h.store.message_ids == {}
    assert h.next_due == 2 * WINDOW + 10


def test_a_failed_batch_lets_the_id_go_from_the_filter() -> None:
    h = shared()
    batch = h.run(Send((draft("a"),), "s"))
    assert batch == []
    effect = h.effects.popleft()
    assert isinstance(effect, tuple)
    h.run(StoreFailed(effect[0], "down"))
    assert h.view.dedup.detector is not None and not h.view.dedup.detector.is_duplicate("a", 0)


def copy(target: str, body: bytes) -> PublishCopy:
    return PublishCopy(target, MessageRecord(0, 0, None, None, None, None, None, None, 0, MessageState.ACTIVE,
                                             None, None, b"", 0, body))


def test_a_topic_skips_every_copy_of_a_message_another_node_published() -> None:
    h = shared()
    h.store.remember_ids(("m1", 0))
    replies = h.run(Publish((PublishEntry("m1", (copy("s1", b"dup"), copy("s2", b"dup"))),
                             PublishEntry("m2", (copy("s1", b"new"),))), "p")) + h.drain()
    assert [type(op) for op in h.ops] == [ClaimMessageIds, AppendTo, AppendTo]
    (published,) = [r for r in replies if isinstance(r, Published)]
    stored = dict(published.stored)
    assert [r.tail for r in stored["s1"]] == [b"new"] and "s2" not in stored
    assert [row.record.tail for row in h.store.other("s1").rows.values()] == [b"new"]
    assert h.store.other("s2").rows == {}
    # a publish that stores no copy: the claim answers after its commit
    assert h.run(Publish((PublishEntry("m3", ()),), "q")) == []
    assert h.drain() == [Published("q", ())]


def test_refresh_counts_reads_other_nodes_sends_and_settlements_back_from_the_store() -> None:
    h = shared()
    send(h, None, None)
    assert h.view.counts.active == 2
    # another node stores three messages in the same partition, and one of this node's is completed there
    h.store.apply((Append(tuple(MessageRecord(0, 0, None, None, None, None, None, None, 0, MessageState.ACTIVE,
                                              None, None, b"", 0, b"x") for _ in range(3))),))
    h.store.complete_elsewhere(1)
    assert h.view.counts.active == 2  # this core has not seen them
    assert h.run(RefreshCounts()) == []
    (read,) = list(h.effects)
    assert isinstance(read, ReadCounts)
    h.drain()
    assert h.view.counts.active == 4
    h.run(Tick())
    assert not h.effects  # asked once, not again
