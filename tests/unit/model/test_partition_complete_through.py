"""Partition.complete_through and the bounds the Spark source reads (first stored, highest visible)."""

from __future__ import annotations

from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft, Partition

T0 = 1_700_000_000_000


def draft(message_id: str, scheduled: int | None = None) -> MessageDraft:
    return MessageDraft(message_id, None, None, None, scheduled, None, None, b"", 0, b"\x00\x53\x75\xa0\x01x")


def send(p: Partition, n: int, scheduled: int | None = None) -> list[MessageRecord]:
    records = p.accept([draft(f"m{i}", scheduled) for i in range(n)], T0, None)
    p.publish(records)
    return records


def test_removes_every_state_through_n_but_not_locked_ones() -> None:
    p = Partition([], 0)
    send(p, 3)
    send(p, 1, scheduled=T0 + 60_000)  # 4, scheduled
    send(p, 2)  # 5, 6
    taken = p.lock_next(T0, 30_000, "owner")
    assert taken is not None and taken[0].sequence_number == 1
    assert p.complete_through(4) == [2, 3, 4]
    assert sorted(p.messages) == [1, 5, 6]
    assert p.count(MessageState.SCHEDULED) == 0
    assert p.complete_through(4) == []  # idempotent
    p.complete(taken[1].token, T0)  # the lock holder still settles what was skipped
    assert p.first_sequence_number() == 5


def test_visible_through_counts_published_numbers_only() -> None:
    p = Partition([], 0)
    accepted = p.accept([draft("a"), draft("b")], T0, None)
    assert p.visible_through == 0  # numbers handed out, not yet committed and published
    p.publish(accepted)
    assert p.visible_through == 2
    p.complete_through(2)
    assert (p.first_sequence_number(), p.visible_through) == (None, 2)  # removal never lowers it


def test_reconstruction_counts_stored_numbers_as_visible() -> None:
    p = Partition([], 0)
    records = send(p, 3)
    rebuilt = Partition(records[:2], 7)
    assert rebuilt.visible_through == 7 and rebuilt.first_sequence_number() == 1


def test_next_visible_waits_for_a_lower_number_still_being_committed() -> None:
    p = Partition([], 0)
    slow = p.accept([draft("in-a-transaction")], T0, None)  # 1: its commit lands in another batch
    fast = p.accept([draft("plain")], T0, None)  # 2
    p.publish(fast)
    assert p.visible_through == 2 and p.next_visible == 1  # a reader must not pass 1 yet
    p.publish(slow)
    assert p.next_visible == 3
    lost = p.accept([draft("failed")], T0, None)  # 3: its commit fails
    assert p.next_visible == 3
    p.forget_unpublished(r.sequence_number for r in lost)
    p.publish(p.accept([draft("next")], T0, None))  # 4
    assert p.next_visible == 5
