"""ForwardDeadLetteredMessagesTo in the partition core, rule by rule, with a fake clock against the
memory store (tests/core_harness.py): every way a message is dead-lettered (a client's
dead-letter, MaxDeliveryCount on abandon, on a lapse and when a receive meets it, expiry) goes to
the target partition in the same fenced settle or move, naming its source, counted afresh, enqueued
at the time and expiring by the target's time-to-live; at the hop limit into the transfer dead-letter
queue with that reason; the reply only after the commit; without forwarding, the dead-letter queue."""

from __future__ import annotations

import uuid

from core_harness import Harness, draft
from sodalite.model.partition_core import (
    CoreSettings,
    DeadLetterForward,
    Delivered,
    Receive,
    Send,
    SendAccepted,
    Settle,
    SettlementDone,
    Tick,
    forwarded_expiry,
    new_view,
)
from sodalite.model.store_ops import MoveMessages, Outcome
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000
TARGET = ("dlfwd-dst", 0)
TRANSFER = ("loop-a/$transferdeadletterqueue", 0)


FORWARD = DeadLetterForward(TARGET, "dlfwd-src", 600_000)  # the target's default time-to-live: ten minutes


def harness(forward: DeadLetterForward | None = FORWARD, **settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 3, "forward_dead_letters": forward}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=11))  # type: ignore[arg-type]


def send(h: Harness, *drafts_: object) -> list[int]:
    replies = h.run(Send(tuple(drafts_), "s")) + h.drain()  # type: ignore[arg-type]
    return [n for r in replies if isinstance(r, SendAccepted) for n in r.sequence_numbers]


def receive(h: Harness, n: int = 1) -> list[Delivered]:
    return [r for r in h.run(Receive("c", n)) + h.drain() if isinstance(r, Delivered)]


def settle(h: Harness, token: uuid.UUID | None, outcome: Outcome, **kw: object) -> tuple[list[object], list[object]]:
    """(the replies when decided, the replies once carried out)."""
    assert token is not None
    first = h.run(Settle(token, outcome, "t", **kw))  # type: ignore[arg-type]
    return first, h.drain()


def test_a_client_dead_letter_goes_to_the_target_in_the_fenced_settle_answered_after_the_commit() -> None:
    h = harness()
    send(h, draft("a", ttl=3_600_000))
    (d,) = receive(h)
    h.at(1_000)
    first, later = settle(h, d.lock_token, Outcome.DEAD_LETTER, reason="why", description="because")
    assert first == []  # not before the commit
    assert SettlementDone("t", d.lock_token, Outcome.DEAD_LETTER) in later
    (op,) = [op for op in h.ops if isinstance(op, SettleOp)]
    (item,) = op.items
    assert (item.outcome, item.target, item.lock_token) == (Outcome.DEAD_LETTER, TARGET, d.lock_token)
    assert (item.reset_delivery_count, item.enqueued_time) == (True, 1_000)
    assert item.expires_at == 1_000 + 600_000  # the message's hour, capped by the target's ten minutes
    assert item.edit is not None
    assert (item.edit.dead_letter_reason, item.edit.dead_letter_description, item.edit.dead_letter_source) == (
        "why", "because", "dlfwd-src")
    # It left the queue and its dead-letter queue stayed empty; the target holds it, counted afresh.
    assert h.store.rows == {} and h.store.dead == {} and h.view.counts.active == 0
    (row,) = h.store.other(TARGET).rows.values()
    assert (row.origin, row.record.delivery_count, row.record.enqueued_time) == (1, 0, 1_000)


def test_the_message_time_to_live_applies_when_the_target_has_no_default() -> None:
    h = harness(DeadLetterForward(TARGET, "src", None))
    send(h, draft("short", ttl=50_000), draft("forever"))
    for d in receive(h, 2):
        settle(h, d.lock_token, Outcome.DEAD_LETTER)
    items = [item for op in h.ops if isinstance(op, SettleOp) for item in op.items]
    assert [item.expires_at for item in items] == [50_000, None]


def test_a_dead_letter_whose_lock_was_lost_forwards_nothing() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    h.at(LOCK + 1)
    h.run(Tick())
    h.drain()
    first, later = settle(h, d.lock_token, Outcome.DEAD_LETTER)
    assert not any(isinstance(r, SettlementDone) for r in first + later)
    assert h.store.other(TARGET).rows == {} and list(h.store.rows) == [1]


def test_max_delivery_count_on_abandon_forwards_with_the_service_reason() -> None:
    h = harness(max_delivery_count=2)
    send(h, draft("a"))
    for _ in range(2):
        (d,) = receive(h)
        settle(h, d.lock_token, Outcome.ABANDON)
    assert h.store.rows == {} and h.store.dead == {}
    (row,) = h.store.other(TARGET).rows.values()
    assert row.edit is not None and row.edit.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert row.edit.dead_letter_source == "dlfwd-src"
    assert row.record.delivery_count == 0  # counted afresh: the target does not dead-letter it again at once


def test_a_lapse_of_the_last_delivery_forwards_in_one_move_to_the_target() -> None:
    h = harness(max_delivery_count=1)
    send(h, draft("a"))
    receive(h)
    h.at(LOCK)
    h.run(Tick())
    (move,) = [op for op in h.effects[0][1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    assert (move.to_dead_letter, move.target) == (False, TARGET)
    (item,) = move.items
    assert (item.reset_delivery_count, item.enqueued_time, item.expires_at) == (True, LOCK, LOCK + 600_000)
    assert item.edit is not None and item.edit.dead_letter_source == "dlfwd-src"
    h.drain()
    assert h.store.rows == {} and h.store.dead == {} and h.view.counts.active == 0
    assert len(h.store.moved_out) == 1 and h.store.moved_out[0][0] == TARGET


def test_an_expired_message_is_forwarded_when_the_entity_dead_letters_on_expiration() -> None:
    h = harness(dead_letter_on_expiration=True)
    send(h, draft("a", ttl=5_000), draft("b"))
    h.at(5_000)
    h.run(Tick())
    (move,) = [op for op in h.effects[0][1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    assert move.target == TARGET and not move.to_dead_letter
    (item,) = move.items
    assert item.edit is not None and item.edit.dead_letter_reason == "TTLExpiredException"
    assert item.expires_at == 5_000 + 5_000  # its own five seconds, counted again from the forwarding
    h.drain()
    assert list(h.store.rows) == [2] and h.view.counts.active == 1


def test_an_expired_message_is_dropped_not_forwarded_when_the_entity_does_not_dead_letter_on_expiration() -> None:
    h = harness()
    send(h, draft("a", ttl=5_000))
    h.at(5_000)
    h.run(Tick())
    (move,) = [op for op in h.effects[0][1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    assert (move.target, move.to_dead_letter) == (None, False)


def test_at_the_hop_limit_the_dead_letter_goes_to_the_transfer_dead_letter_queue_and_never_expires() -> None:
    h = harness(DeadLetterForward(TRANSFER, "src", 1_000, hop_limit="forwarded 5 times"))
    send(h, draft("a", ttl=60_000))
    (d,) = receive(h)
    settle(h, d.lock_token, Outcome.DEAD_LETTER, reason="why")
    (op,) = [op for op in h.ops if isinstance(op, SettleOp)]
    (item,) = op.items
    assert item.target == TRANSFER and item.expires_at is None
    assert item.edit is not None
    assert (item.edit.dead_letter_reason, item.edit.dead_letter_description, item.edit.dead_letter_source) == (
        "MaxTransferHopCountExceeded", "forwarded 5 times", "src")


def test_without_forwarding_dead_letters_stay_in_the_dead_letter_queue() -> None:
    h = harness(None)
    send(h, draft("a"))
    (d,) = receive(h)
    settle(h, d.lock_token, Outcome.DEAD_LETTER, reason="why")
    (op,) = [op for op in h.ops if isinstance(op, SettleOp)]
    assert op.items[0].target is None and not op.items[0].reset_delivery_count
    assert len(h.store.dead) == 1 and h.store.others == {}


def test_forwarding_set_while_running_applies_to_the_next_dead_letter() -> None:
    h = harness(None)
    send(h, draft("a"), draft("b"))
    first, second = receive(h, 2)
    settle(h, first.lock_token, Outcome.DEAD_LETTER)
    h.view.settings = CoreSettings(lock_duration=LOCK, forward_dead_letters=DeadLetterForward(TARGET, "src"))
    settle(h, second.lock_token, Outcome.DEAD_LETTER)
    assert [row.origin for row in h.store.dead.values()] == [1]
    assert [row.origin for row in h.store.other(TARGET).rows.values()] == [2]


def test_a_dead_letter_waiting_for_a_relay_goes_to_the_own_dead_letter_queue_marked_and_without_expiry() -> None:
    """A target in another store (server/dead_letter_relay.py): the core forwards into the entity's
    own dead-letter queue, named after its source and counted afresh, and the copy does not expire
    while it waits there (the relay gives it its expiry in the target, from its enqueued time)."""
    own = ("dlfwd-src/$deadletterqueue", 0)
    h = harness(DeadLetterForward(own, "dlfwd-src", 600_000, relayed=True), max_delivery_count=2)
    send(h, draft("a", ttl=3_600_000), draft("b", ttl=3_600_000))
    (d, _) = receive(h, 2)
    h.at(1_000)
    settle(h, d.lock_token, Outcome.DEAD_LETTER, reason="why")
    (op,) = [op for op in h.ops if isinstance(op, SettleOp)]
    (item,) = op.items
    assert (item.target, item.reset_delivery_count, item.enqueued_time, item.expires_at) == (own, True, 1_000, None)
    assert item.edit is not None and (item.edit.dead_letter_reason, item.edit.dead_letter_source) == (
        "why", "dlfwd-src")
    h.at(LOCK + 1)  # the other lock lapses; receiving it once more makes MaxDeliveryCount of it
    h.run(Tick())
    h.drain()
    receive(h)
    h.at(2 * LOCK + 2)
    h.run(Tick())
    moves = [op for effect in h.effects for op in effect[1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    (move,) = [m for m in moves if m.target == own]
    assert [(i.reset_delivery_count, i.expires_at) for i in move.items] == [(True, None)]
    assert forwarded_expiry(DeadLetterForward(own, "s", 600_000, relayed=True), 5_000, 0) is None
    assert forwarded_expiry(DeadLetterForward(TARGET, "s", 600_000), 5_000, 0) == 5_000
