"""The pure partition core, rule by rule: each test a sequence of commands with a fake clock (no
sleeping), asserting the store ops emitted, the replies and what the store then holds."""

from __future__ import annotations

import uuid

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    CancelScheduled,
    CloseConsumer,
    CoreSettings,
    Delivered,
    IdleExpired,
    LockLost,
    LockRenewed,
    MessageNotFound,
    Receive,
    ReceiveMode,
    RenewLock,
    Schedule,
    ScheduledCancelled,
    Send,
    SendAccepted,
    ServerBusy,
    Settle,
    SettlementDone,
    StoreAvailable,
    StoreUnavailable,
    Tick,
    Touch,
    Unsent,
    new_view,
)
from sodalite.model.store_ops import (
    Activate,
    Append,
    Claim,
    ForgetMessageIds,
    MoveMessages,
    Outcome,
    RememberMessageIds,
)
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000


def harness(**settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 3}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=7))  # type: ignore[arg-type]


def send(h: Harness, *drafts_: object, reply_to: object = "s") -> list[int]:
    first = h.run(Send(tuple(drafts_), reply_to))  # type: ignore[arg-type]
    accepted = [r for r in first + h.drain() if isinstance(r, SendAccepted)]
    assert len(accepted) == 1
    return list(accepted[0].sequence_numbers)


def deliveries(replies: list[object]) -> list[Delivered]:
    return [r for r in replies if isinstance(r, Delivered)]


def receive(h: Harness, n: int = 1, consumer: str = "c", mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[Delivered]:
    out = h.run(Receive(consumer, n, mode))
    return deliveries(out + h.drain())


def settle(h: Harness, token: uuid.UUID | None, outcome: Outcome, **kw: object) -> list[object]:
    assert token is not None
    first = h.run(Settle(token, outcome, "t", **kw))  # type: ignore[arg-type]
    return first + h.drain()


# ---- send -------------------------------------------------------------------------------------------


def test_send_is_accepted_only_after_its_append_committed_with_the_numbers_the_store_gave() -> None:
    h = harness()
    h.store.numbers_given(41)  # the store's counter decides, not the core
    replies = h.run(Send((draft("a"), draft("b")), "s1"))
    assert replies == []
    assert [type(op) for op in h.effects[0][1]] == [Append]  # type: ignore[index]
    assert h.drain() == [SendAccepted("s1", (42, 43))]
    assert sorted(h.store.rows) == [42, 43]
    assert h.view.counts.active == 2


def test_a_failed_append_answers_server_busy_and_stores_nothing() -> None:
    h = harness()
    h.run(Send((draft("a"),), "s1"))
    assert h.step(fail=True) == [ServerBusy("s1")]
    assert h.store.rows == {} and h.view.counts.active == 0


def test_while_the_store_is_unavailable_sends_are_refused_at_once() -> None:
    h = harness()
    h.run(StoreUnavailable())
    assert h.run(Send((draft("a"),), "s1")) == [ServerBusy("s1")]
    assert not h.effects
    h.run(StoreAvailable())
    assert send(h, draft("a")) == [1]


def test_pings_are_accepted_and_never_stored() -> None:
    h = harness()
    assert send(h, draft(ping=True)) == []
    assert h.store.rows == {} and h.ops == []


def test_the_entity_default_ttl_caps_the_message_ttl() -> None:
    h = harness(default_ttl=1_000)
    h.at(500)
    send(h, draft(ttl=5_000), draft())
    assert [row.record.expires_at for row in h.store.rows.values()] == [1_500, 1_500]


# ---- peek-lock, settle, renew ---------------------------------------------------------------------------


def test_a_delivery_waits_for_its_claim_and_carries_the_stored_count_and_lock() -> None:
    h = harness()
    send(h, draft("a"))
    h.at(1_000)
    first = h.run(Receive("c", 1))
    assert deliveries(first) == []
    claim = next(op for op in h.effects[0][1] if isinstance(op, Claim))  # type: ignore[index]
    assert claim.sequence_numbers == (1,) and claim.locked_until == 1_000 + LOCK and claim.owner == "node"
    (d,) = deliveries(h.drain())
    assert d.consumer == "c" and d.message.sequence_number == 1 and d.message.delivery_count == 1
    assert d.locked_until == 1_000 + LOCK
    row = h.store.rows[1]
    assert row.lock_token == d.lock_token and row.record.delivery_count == 1  # counted before hand-out


def test_messages_are_delivered_in_sequence_order_and_only_as_far_as_credit_goes() -> None:
    h = harness()
    send(h, *(draft(str(i)) for i in range(5)))
    got = receive(h, 3)
    assert [d.message.sequence_number for d in got] == [1, 2, 3]
    assert [d.message.sequence_number for d in receive(h, 5)] == [4, 5]


def test_a_message_sent_to_a_waiting_receiver_is_delivered_after_the_send_commits() -> None:
    h = harness()
    assert receive(h, 1) == []
    send(h, draft("a"))
    (d,) = deliveries(h.drain() + h.replies)
    assert d.message.sequence_number == 1


def test_complete_echoes_only_after_the_settle_committed_and_deletes_the_row() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    assert d.lock_token is not None
    assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "t")) == []
    assert h.drain() == [SettlementDone("t", d.lock_token, Outcome.COMPLETE)]
    assert h.store.rows == {} and h.view.counts.active == 0


def test_lock_lost_is_a_reply_for_unknown_expired_and_already_settled_tokens() -> None:
    h = harness()
    assert h.run(Settle(uuid.UUID(int=5), Outcome.COMPLETE, "x")) == [LockLost("x", uuid.UUID(int=5))]
    send(h, draft("a"), draft("b"))
    d1, d2 = receive(h, 2)
    assert d1.lock_token is not None and d2.lock_token is not None
    h.run(Settle(d1.lock_token, Outcome.COMPLETE, "t1"))
    assert h.run(Settle(d1.lock_token, Outcome.COMPLETE, "t2")) == [LockLost("t2", d1.lock_token)]
    h.drain()
    h.at(LOCK)  # d2's lock ends exactly now
    assert LockLost("t3", d2.lock_token) in h.run(Settle(d2.lock_token, Outcome.COMPLETE, "t3"))


def test_a_lock_lapses_at_its_time_and_the_message_is_delivered_again_counted_twice() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    assert h.next_due == LOCK
    h.at(LOCK - 1)
    h.run(Tick())
    assert h.view.locks.held  # not yet
    h.at(LOCK)
    h.run(Tick())
    assert not h.view.locks.held and h.store.rows[1].record.delivery_count == 1
    (again,) = receive(h)
    assert again.message.sequence_number == 1 and again.message.delivery_count == 2
    assert again.lock_token != d.lock_token


def test_abandon_puts_the_message_first_in_line_with_its_delivery_counted() -> None:
    h = harness()
    send(h, draft("a"), draft("b"))
    (d,) = receive(h)
    replies = settle(h, d.lock_token, Outcome.ABANDON)
    assert SettlementDone("t", d.lock_token, Outcome.ABANDON) in replies
    (again,) = receive(h)
    assert again.message.sequence_number == 1 and again.message.delivery_count == 2


def test_where_an_abandon_does_not_count_it_releases_with_its_properties_and_says_abandoned() -> None:
    """A dead-letter queue's core (abandon_counts False): the count stays as it was dead-lettered."""
    h = harness(abandon_counts=False)
    send(h, draft("a"))
    (d,) = receive(h)
    replies = h.run(Settle(d.lock_token, Outcome.ABANDON, "t", properties_to_modify=(("k", "v"),))) + h.drain()
    assert SettlementDone("t", d.lock_token, Outcome.ABANDON) in replies
    assert h.store.rows[1].record.delivery_count == 0 and h.store.rows[1].edit is not None
    (again,) = receive(h)
    assert again.message.delivery_count == 1  # the store's, before this delivery: the wire shows 0


def test_release_gives_the_delivery_back() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    settle(h, d.lock_token, Outcome.RELEASE)
    assert h.store.rows[1].record.delivery_count == 0
    (again,) = receive(h)
    assert again.message.delivery_count == 1


def test_renew_extends_the_lock_and_the_lapse_follows_the_new_time() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    assert d.lock_token is not None
    h.at(10_000)
    h.run(RenewLock(d.lock_token, "r"))
    assert h.drain() == [LockRenewed("r", d.lock_token, 10_000 + LOCK)]
    assert h.store.rows[1].locked_until == 10_000 + LOCK
    h.at(LOCK)
    h.run(Tick())
    assert h.view.locks.held and h.next_due == 10_000 + LOCK
    assert SettlementDone("t", d.lock_token, Outcome.COMPLETE) in settle(h, d.lock_token, Outcome.COMPLETE)


def test_a_complete_sent_while_a_renewal_is_in_flight_applies() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    assert d.lock_token is not None
    h.run(RenewLock(d.lock_token, "r"))
    h.run(Settle(d.lock_token, Outcome.COMPLETE, "t"))
    replies = h.drain()
    assert LockRenewed("r", d.lock_token, LOCK) in replies
    assert SettlementDone("t", d.lock_token, Outcome.COMPLETE) in replies
    assert h.store.rows == {}


def test_a_failed_settle_answers_server_busy_and_keeps_the_lock() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    assert d.lock_token is not None
    h.run(Settle(d.lock_token, Outcome.COMPLETE, "t"))
    assert h.step(fail=True) == [ServerBusy("t")]
    assert SettlementDone("t", d.lock_token, Outcome.COMPLETE) in settle(h, d.lock_token, Outcome.COMPLETE)


def test_defer_parks_the_message_out_of_the_window() -> None:
    h = harness()
    send(h, draft("a"), draft("b"))
    (d,) = receive(h)
    settle(h, d.lock_token, Outcome.DEFER)
    assert h.store.rows[1].record.state == MessageState.DEFERRED
    assert (h.view.counts.active, h.view.counts.deferred) == (1, 1)
    assert [x.message.sequence_number for x in receive(h, 5)] == [2]


def test_client_dead_letter_carries_reason_and_description() -> None:
    h = harness()
    send(h, draft("a"))
    (d,) = receive(h)
    settle(h, d.lock_token, Outcome.DEAD_LETTER, reason="bad", description="very",
           properties_to_modify=(("k", 1),))
    (dead,) = h.store.dead.values()
    assert dead.edit is not None
    assert (dead.edit.dead_letter_reason, dead.edit.dead_letter_description, dead.edit.properties) == (
        "bad", "very", (("k", 1),))
    assert h.view.counts.active == 0


def test_a_delivery_claimed_for_a_consumer_that_left_is_released_not_lost() -> None:
    h = harness()
    send(h, draft("a"))
    h.run(Receive("c", 1))
    h.run(CloseConsumer("c"))
    assert deliveries(h.drain()) == []
    assert h.store.rows[1].lock_token is None and h.store.rows[1].record.delivery_count == 0
    assert [d.message.sequence_number for d in receive(h, 1, "c2")] == [1]


# ---- receive and delete ---------------------------------------------------------------------------------


def test_receive_and_delete_delivers_only_after_the_delete_committed() -> None:
    h = harness()
    send(h, draft("a"), draft("b"))
    first = h.run(Receive("c", 2, ReceiveMode.RECEIVE_AND_DELETE))
    assert deliveries(first) == []
    ops = h.effects[0][1]  # type: ignore[index]
    assert [type(op) for op in ops] == [Claim, Claim, SettleOp]
    got = deliveries(h.drain())
    assert [(d.message.sequence_number, d.lock_token) for d in got] == [(1, None), (2, None)]
    assert h.store.rows == {} and h.view.counts.active == 0


def test_a_failed_receive_and_delete_delivers_nothing_and_loses_nothing() -> None:
    h = harness()
    send(h, draft("a"))
    h.run(Receive("c", 1, ReceiveMode.RECEIVE_AND_DELETE))
    assert deliveries(h.step(fail=True)) == []
    assert list(h.store.rows) == [1]
    got = deliveries(h.drain())  # the read finds it again and the credit is still there
    assert [d.message.sequence_number for d in got] == [1]
    assert h.store.rows == {}



def test_receive_and_delete_messages_never_written_are_put_back_in_place() -> None:
    """Taken for a receiver that left before their transfers were written: back under their own
    numbers, with the delivery count they had, first in line again, and counted."""
    h = harness()
    send(h, draft("a"), draft("b"), draft("c"))
    h.run(Receive("c", 2, ReceiveMode.RECEIVE_AND_DELETE))
    got = deliveries(h.drain())
    assert [(d.message.sequence_number, d.message.delivery_count) for d in got] == [(1, 1), (2, 1)]
    assert sorted(h.store.rows) == [3] and h.view.counts.active == 1
    h.run(Unsent(tuple(d.message for d in got)))
    h.drain()
    assert sorted(h.store.rows) == [1, 2, 3] and h.view.counts.active == 3
    assert [h.store.rows[n].record.delivery_count for n in (1, 2)] == [0, 0]
    assert all(h.store.rows[n].lock_token is None for n in (1, 2))
    again = deliveries(h.run(Receive("d", 3, ReceiveMode.PEEK_LOCK))) + deliveries(h.drain())
    assert [d.message.sequence_number for d in again] == [1, 2, 3]
    assert [d.message.delivery_count for d in again] == [1, 1, 1]  # the count as the claim stored it


def test_a_restore_the_store_refused_is_tried_again() -> None:
    h = harness()
    send(h, draft("a"))
    h.run(Receive("c", 1, ReceiveMode.RECEIVE_AND_DELETE))
    [got] = deliveries(h.drain())
    h.run(Unsent((got.message,)))
    h.step(fail=True)  # the store was down: still deleted
    assert h.store.rows == {}
    h.run(Touch())  # the next command puts it back
    h.drain()
    assert list(h.store.rows) == [1] and h.store.rows[1].record.delivery_count == 0
    assert h.view.counts.active == 1


def test_a_read_in_flight_when_a_claim_fails_does_not_skip_the_message_the_claim_gave_back() -> None:
    """The failed claim forgets its message (cursor moves below it) while a read from above it is in
    flight; that read's short answer must not declare the window complete past the message."""
    h = harness(window_bytes=60, read_count=1, max_delivery_count=1)
    h.run(Receive("c", 1))
    h.run(Send((draft(None),), "s"))
    h.step()  # the append commits; the message goes straight to the waiting receiver: a claim
    assert deliveries(h.step(fail=True)) == []  # the claim fails; a read from 1 is asked for
    h.step()  # the read finds message 1 again: a new claim, and a read of what follows (from 2)
    assert [type(e).__name__ for e in h.effects] == ["tuple", "ReadWindow"]
    assert deliveries(h.step(fail=True)) == []  # that claim fails too, with the read from 2 in flight
    got = deliveries(h.drain())
    assert [(d.message.sequence_number, d.message.delivery_count) for d in got] == [(1, 1)]
    assert h.store.rows[1].lock_token == got[0].lock_token

# ---- MaxDeliveryCount -----------------------------------------------------------------------------------


def test_abandon_of_the_last_allowed_delivery_dead_letters() -> None:
    h = harness(max_delivery_count=2)
    send(h, draft("a"))
    for _ in range(2):
        (d,) = receive(h)
        replies = settle(h, d.lock_token, Outcome.ABANDON)
        assert SettlementDone("t", d.lock_token, Outcome.ABANDON) in replies  # the client asked abandon
    assert h.store.rows == {}
    (dead,) = h.store.dead.values()
    assert dead.edit is not None and dead.edit.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.record.delivery_count == 2
    assert receive(h) == [] and h.view.counts.active == 0


def test_a_lapse_of_the_last_allowed_delivery_dead_letters() -> None:
    h = harness(max_delivery_count=1)
    send(h, draft("a"))
    receive(h)
    h.at(LOCK)
    h.run(Tick())
    moves = [op for op in h.effects[0][1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    assert len(moves) == 1 and moves[0].to_dead_letter
    h.drain()
    assert h.store.rows == {} and len(h.store.dead) == 1 and h.view.counts.active == 0


def test_a_row_found_with_its_deliveries_used_up_is_dead_lettered_not_delivered() -> None:
    store = PartitionStore()
    h = Harness(new_view(CoreSettings(max_delivery_count=2), 0, token_seed=1), store)
    send(h, draft("a"), draft("b"))
    store.lapsed_deliveries(1, 2)  # as a crash mid-lock leaves it
    restarted = Harness(new_view(CoreSettings(max_delivery_count=2), 0, token_seed=2, active=2,
                                 last_sequence_number=2), store)
    got = receive(restarted, 2)
    assert [d.message.sequence_number for d in got] == [2]
    assert list(store.dead) == [1]


# ---- expiry ---------------------------------------------------------------------------------------------


def test_an_expired_message_is_dropped_at_its_time_without_dead_lettering() -> None:
    h = harness()
    send(h, draft("a", ttl=5_000), draft("b"))
    assert h.next_due == 5_000
    h.at(5_000)
    h.run(Tick())
    (move,) = [op for op in h.effects[0][1] if isinstance(op, MoveMessages)]  # type: ignore[index]
    assert not move.to_dead_letter
    h.drain()
    assert list(h.store.rows) == [2] and h.store.dead == {} and h.view.counts.active == 1


def test_an_expired_message_goes_to_the_dead_letter_queue_when_the_entity_says_so() -> None:
    h = harness(dead_letter_on_expiration=True)
    send(h, draft("a", ttl=5_000))
    h.at(6_000)
    assert receive(h) == []  # a receive meets it: it leaves, never handed out
    (dead,) = h.store.dead.values()
    assert dead.edit is not None and dead.edit.dead_letter_reason == "TTLExpiredException"


def test_a_locked_message_that_expires_is_unaffected_until_its_lock_ends() -> None:
    h = harness()
    send(h, draft("a", ttl=1_000))
    (d,) = receive(h)
    h.at(2_000)
    h.run(Tick())
    assert list(h.store.rows) == [1] and not h.effects
    replies = settle(h, d.lock_token, Outcome.ABANDON)
    assert SettlementDone("t", d.lock_token, Outcome.ABANDON) in replies
    assert h.store.rows == {} and h.view.counts.active == 0 and receive(h) == []


def test_a_locked_message_that_expired_leaves_when_its_lock_lapses() -> None:
    h = harness(dead_letter_on_expiration=True)
    send(h, draft("a", ttl=1_000))
    receive(h)
    h.at(LOCK)
    h.run(Tick())
    h.drain()
    assert h.store.rows == {} and len(h.store.dead) == 1


# ---- scheduling -----------------------------------------------------------------------------------------


def test_a_scheduled_message_gets_its_number_at_once_and_is_delivered_at_its_time() -> None:
    h = harness()
    h.run(Schedule((draft("a", scheduled=10_000),), "s"))
    assert h.drain() == [SendAccepted("s", (1,))]
    assert h.store.rows[1].record.state == MessageState.SCHEDULED and h.view.counts.scheduled == 1
    assert receive(h) == []
    assert h.next_due == 10_000
    h.at(10_000)
    h.run(Tick())
    assert isinstance(h.effects[0][1][0], Activate)  # type: ignore[index]
    (d,) = deliveries(h.drain())
    assert d.message.sequence_number == 1
    assert (h.view.counts.scheduled, h.view.counts.active) == (0, 1)


def test_a_scheduled_message_numbered_below_the_window_is_still_delivered_first() -> None:
    h = harness()
    send(h, draft("a", scheduled=10_000))
    send(h, draft("b"))
    h.at(10_000)
    h.run(Tick())
    h.drain()
    assert [d.message.sequence_number for d in receive(h, 2)] == [1, 2]


def test_cancel_removes_a_scheduled_message_and_never_an_active_one() -> None:
    """All or none (as Service Bus and the version-1 path): 2 is active and 9 unknown, so nothing of
    the cancel happens, 1 included, and the reply names the two; 1 still comes due."""
    h = harness()
    send(h, draft("a", scheduled=10_000), draft("b"))
    h.run(CancelScheduled((1, 2, 9), "x"))
    assert h.drain() == [MessageNotFound("x", (2, 9))]
    assert list(h.store.rows) == [1, 2] and h.view.counts.scheduled == 1 and h.view.counts.active == 1
    h.at(10_000)
    h.run(Tick())
    h.drain()
    assert sorted(h.store.rows) == [1, 2] and h.store.rows[1].record.state == MessageState.ACTIVE
    assert (h.view.counts.scheduled, h.view.counts.active) == (0, 2)


def test_cancel_of_scheduled_messages_only_removes_them_all() -> None:
    h = harness()
    send(h, draft("a", scheduled=10_000), draft("b"), draft("c", scheduled=20_000), draft("d", scheduled=30_000))
    h.run(CancelScheduled((3, 1, 3), "x"))  # a number named twice counts once
    assert h.drain() == [ScheduledCancelled("x", (3, 1))]
    assert sorted(h.store.rows) == [2, 4] and (h.view.counts.scheduled, h.view.counts.active) == (1, 1)
    assert h.next_due == 30_000  # the cancelled times are no longer this core's to wake for
    h.run(CancelScheduled((1,), "again"))  # gone now: refused, 4 untouched
    assert h.drain() == [MessageNotFound("again", (1,))]
    h.at(30_000)
    h.run(Tick())
    h.drain()
    assert h.store.rows[4].record.state == MessageState.ACTIVE and h.view.counts.scheduled == 0


def test_cancelling_number_zero_is_refused_as_not_found_and_cancels_nothing() -> None:
    h = harness()
    send(h, draft("a", scheduled=10_000))
    replies = h.run(CancelScheduled((1, 0), "x"))  # 0: what a scheduled ping was given, no message's number
    assert replies + h.drain() == [MessageNotFound("x", (0,))]
    assert list(h.store.rows) == [1] and h.view.counts.scheduled == 1


def test_scheduled_messages_of_an_earlier_run_are_activated_by_polling() -> None:
    store = PartitionStore()
    h = harness()
    h.store = store
    send(h, draft("a", scheduled=5_000))
    restarted = Harness(new_view(CoreSettings(scheduled_poll=1_000), 3_000, token_seed=2, scheduled=1,
                                 last_sequence_number=1), store, now=3_000)
    restarted.run(Receive("c", 1))
    restarted.drain()
    assert restarted.next_due == 4_000
    restarted.at(5_000)
    restarted.run(Tick())
    (d,) = deliveries(restarted.drain())
    assert d.message.sequence_number == 1
    assert restarted.view.scheduled.untracked is False


# ---- duplicate detection ----------------------------------------------------------------------------------


def test_a_duplicate_within_the_window_is_acknowledged_and_dropped() -> None:
    h = harness(duplicate_window=60_000)
    assert send(h, draft("a")) == [1]
    remember = [op for op in h.ops if isinstance(op, RememberMessageIds)]
    assert remember == [RememberMessageIds((("a", 0),))]
    h.at(60_000)
    assert send(h, draft("a"), draft("b")) == [2]  # the edge counts
    assert [row.record.message_id for row in h.store.rows.values()] == ["a", "b"]


def test_the_history_is_pruned_at_its_time_and_the_id_is_new_again() -> None:
    h = harness(duplicate_window=60_000)
    send(h, draft("a"))
    assert h.next_due == 60_001
    h.at(60_001)
    h.run(Tick())
    assert h.effects[0][1] == (ForgetMessageIds(("a",)),)  # type: ignore[index]
    h.drain()
    assert h.store.message_ids == {}
    assert send(h, draft("a")) == [2]


def test_a_failed_send_does_not_leave_its_id_in_the_history() -> None:
    h = harness(duplicate_window=60_000)
    h.run(Send((draft("a"),), "s"))
    h.step(fail=True)
    assert send(h, draft("a")) == [1]


# ---- idle -----------------------------------------------------------------------------------------------


def test_idle_expiry_comes_once_after_the_idle_time_without_use() -> None:
    h = harness(auto_delete_on_idle=300_000)
    send(h, draft("a"))
    assert h.next_due == 300_000
    h.at(200_000)
    h.run(Touch())
    assert h.next_due == 500_000
    h.at(499_999)
    assert h.run(Tick()) == []
    h.at(500_000)
    assert h.run(Tick()) == [IdleExpired()]
    assert h.run(Tick()) == [] and h.next_due is None


def test_an_attached_receiver_or_a_scheduled_message_keeps_the_entity_alive() -> None:
    h = harness(auto_delete_on_idle=1_000)
    h.run(Receive("c", 1))
    h.at(5_000)
    assert h.run(Tick()) == []
    h.run(CloseConsumer("c"))
    h.run(Schedule((draft("a", scheduled=100_000),), "s"))
    h.drain()
    h.at(50_000)
    assert IdleExpired() not in h.run(Tick())


# ---- the window ------------------------------------------------------------------------------------------


def test_the_window_stays_within_its_byte_cap_and_every_message_is_delivered_in_order() -> None:
    h = harness(window_bytes=1_000, read_count=4)
    body = b"x" * 100
    for i in range(30):
        send(h, draft(str(i), body=body))
    assert h.view.window.size <= 1_000
    got: list[int] = []
    for _ in range(30):
        (d,) = receive(h, 1)
        assert h.view.window.size <= 1_000
        got.append(d.message.sequence_number)
        settle(h, d.lock_token, Outcome.COMPLETE)
    assert got == list(range(1, 31))
    assert h.store.rows == {}


def test_a_restart_reads_the_window_from_the_store_not_the_backlog() -> None:
    store = PartitionStore()
    h = Harness(new_view(CoreSettings(), 0, token_seed=1), store)
    for i in range(10):
        send(h, draft(str(i)))
    view = new_view(CoreSettings(read_count=3, window_bytes=10), 0, token_seed=2, active=10, last_sequence_number=10)
    restarted = Harness(view, store)
    restarted.run(Receive("c", 10))
    got = [d.message.sequence_number for d in deliveries(restarted.drain())]
    assert got == list(range(1, 11))
    assert len(restarted.view.window.records) <= 1
