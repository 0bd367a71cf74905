"""The store contract for move keys (RememberMoveKeys / ForgetMoveKeys), held by every adapter.

A move across stores appends the message in the target together with its move key, then deletes
the source copy; the key lets a retry after a crash see that the target already has the message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    AppendMessages,
    DeleteEntity,
    DeleteMessages,
    ForgetMoveKeys,
    MessagingStore,
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


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], MessagingStore]]:
    def build() -> MessagingStore:
        store: MessagingStore = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "m.db")
        store.open()
        return store
    yield build


def test_keys_are_remembered_sorted_per_partition_and_forgotten(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([RememberMoveKeys(T, ("b/x/0/2", "a/x/0/1")), RememberMoveKeys(T_P1, ("c/y/0/9",))])
    assert store.load_partition(T).move_keys == ("a/x/0/1", "b/x/0/2")
    assert store.load_partition(T_P1).move_keys == ("c/y/0/9",)
    store.apply([RememberMoveKeys(T, ("a/x/0/1",)), ForgetMoveKeys(T, ("b/x/0/2", "unknown"))])
    assert store.load_partition(T).move_keys == ("a/x/0/1",)
    assert store.load_partition(PartitionRef("TARGET", 0)).move_keys == ("a/x/0/1",)  # paths fold case
    store.close()


def test_append_with_its_key_is_one_transaction(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([AppendMessages(T, (_record(1),))])
    with pytest.raises(StoreUnavailable):  # the duplicate sequence number fails the whole batch
        store.apply([RememberMoveKeys(T, ("s/q/0/7",)), AppendMessages(T, (_record(1),))])
    assert store.load_partition(T).move_keys == ()
    store.apply([AppendMessages(T, (_record(2),)), RememberMoveKeys(T, ("s/q/0/7",)),
                 DeleteMessages(SOURCE_DLQ, (7,))])
    snapshot = store.load_partition(T)
    assert [m.sequence_number for m in snapshot.messages] == [1, 2]
    assert snapshot.move_keys == ("s/q/0/7",)
    store.close()


def test_a_key_that_is_not_text_fails_the_batch(make: Callable[[], MessagingStore]) -> None:
    store = make()
    with pytest.raises(StoreUnavailable):
        store.apply([AppendMessages(T, (_record(1),)), RememberMoveKeys(T, ("bad\ud800",))])
    assert store.load_partition(T).messages == ()
    store.close()


def test_deleting_the_entity_forgets_its_keys(make: Callable[[], MessagingStore]) -> None:
    store = make()
    store.apply([RememberMoveKeys(T, ("k1",)), RememberMoveKeys(PartitionRef("target/$deadletterqueue", 0), ("k2",)),
                 RememberMoveKeys(PartitionRef("targetother", 0), ("k3",))])
    store.apply([DeleteEntity("target")])
    assert store.load_partition(T).move_keys == ()
    assert store.load_partition(PartitionRef("target/$deadletterqueue", 0)).move_keys == ()
    assert store.load_partition(PartitionRef("targetother", 0)).move_keys == ("k3",)
    store.close()


def test_sqlite_keeps_keys_across_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "k.db")
    store.open()
    store.apply([RememberMoveKeys(T, ("s/q/0/1",))])
    store.close()
    again = SqliteStore(tmp_path / "k.db")
    again.open()
    assert again.load_partition(T).move_keys == ("s/q/0/1",)
    assert replace(again.load_partition(T), move_keys=()).messages == ()
    again.close()
