"""The store contract for move keys (RememberMoveKeys / ForgetMoveKeys), held by every adapter.

A move across stores appends the message in the target together with its move key, then deletes
the source copy; the key lets a retry after a crash see that the target already has the message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    Append,
    DeleteEntity,
    ForgetMoveKeys,
    MessagingStore,
    MoveItem,
    MoveMessages,
    PartitionRef,
    RememberMoveKeys,
)
from sodalite.store.sqlite import SqliteStore

T = PartitionRef("target", 0)
T_P1 = PartitionRef("target", 1)
SOURCE_DLQ = PartitionRef("source/$deadletterqueue", 0)


def _record(seq: int) -> MessageRecord:
    return MessageRecord(seq, 1_700_000_000_000, f"id-{seq}", None, None, None, None, None, 0,
                         MessageState.ACTIVE, True, None, b"", 0, b"\x00Sw\xa1\x02hi")


@dataclass(frozen=True)
class Loaded:
    """What the tests read of a partition: its messages (``peek``) and move keys (``partition_meta``)."""

    messages: tuple[MessageRecord, ...]
    move_keys: tuple[str, ...]


def load(store: MessagingStore, ref: PartitionRef) -> Loaded:
    return Loaded(tuple(m.record for m in store.peek(ref, 0, 1000)), store.partition_meta(ref).move_keys)


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], MessagingStore]]:
    def build() -> MessagingStore:
        store: MessagingStore = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "m.db")
        store.open()
        return store
    yield build


def test_keys_are_remembered_sorted_per_partition_and_forgotten(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([RememberMoveKeys(("b/x/0/2", "a/x/0/1"), ref=T), RememberMoveKeys(("c/y/0/9",), ref=T_P1)])
    assert load(store, T).move_keys == ("a/x/0/1", "b/x/0/2")
    assert load(store, T_P1).move_keys == ("c/y/0/9",)
    store.apply([RememberMoveKeys(("a/x/0/1",), ref=T), ForgetMoveKeys(("b/x/0/2", "unknown"), ref=T)])
    assert load(store, T).move_keys == ("a/x/0/1",)
    assert load(store, PartitionRef("TARGET", 0)).move_keys == ("a/x/0/1",)  # paths fold case
    store.close()


def test_append_with_its_key_is_one_transaction(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([Append((_record(1),), ref=T)])
    with pytest.raises(StoreUnavailable):  # a value that does not fit 64 bits fails the whole batch
        store.apply([RememberMoveKeys(("s/q/0/7",), ref=T), Append((replace(_record(1), enqueued_time=2**63),), ref=T)])
    assert load(store, T).move_keys == ()
    store.apply([Append((_record(2),), ref=T), RememberMoveKeys(("s/q/0/7",), ref=T),
                 MoveMessages(0, (MoveItem(7),), target=None, ref=SOURCE_DLQ)])
    snapshot = load(store, T)
    assert [m.sequence_number for m in snapshot.messages] == [1, 2]
    assert snapshot.move_keys == ("s/q/0/7",)
    store.close()


def test_a_key_that_is_not_text_fails_the_batch(make: Callable[[], MessagingStore]) -> None:
    store = make()
    with pytest.raises(StoreUnavailable):
        store.apply([Append((_record(1),), ref=T), RememberMoveKeys(("bad\ud800",), ref=T)])
    assert load(store, T).messages == ()
    store.close()


def test_deleting_the_entity_forgets_its_keys(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([RememberMoveKeys(("k1",), ref=T), RememberMoveKeys(("k2",),
                                                                    ref=PartitionRef("target/$deadletterqueue", 0)),
                 RememberMoveKeys(("k3",), ref=PartitionRef("targetother", 0))])
    store.apply([DeleteEntity("target")])
    assert load(store, T).move_keys == ()
    assert load(store, PartitionRef("target/$deadletterqueue", 0)).move_keys == ()
    assert load(store, PartitionRef("targetother", 0)).move_keys == ("k3",)
    store.close()


def test_sqlite_keeps_keys_across_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "k.db")
    store.open()
    store.apply([RememberMoveKeys(("s/q/0/1",), ref=T)])
    store.close()
    again = SqliteStore(tmp_path / "k.db")
    again.open()
    assert load(again, T).move_keys == ("s/q/0/1",)
    assert replace(load(again, T), move_keys=()).messages == ()
    again.close()
