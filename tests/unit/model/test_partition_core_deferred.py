"""Deferred messages received by sequence number, and complete-through, in the pure partition core,
rule by rule with a fake clock: what is claimed or purged, when the reply comes (after the commit),
what happens to a deferred message's lock (settled, abandoned, lapsed, riding on a session) and
that the view's counts come back equal to the store's after a purge."""

from __future__ import annotations

import uuid

import pytest

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    AcceptSession,
    CloseConsumer,
    CompletedThrough,
    CompleteThrough,
    CoreSettings,
    CountsRead,
    DeferredReceived,
    Delivered,
    LockLost,
    LockRenewed,
    MessageNotFound,
    ReadCounts,
    Receive,
    ReceiveDeferred,
    ReceiveMode,
    Refused,
    RenewLock,
    RenewSessionLock,
    Schedule,
    Send,
    SendAccepted,
    ServerBusy,
    SessionLockLost,
    SessionLost,
    Settle,
    SettlementDone,
    StoreAvailable,
    StoreUnavailable,
    Tick,
    new_view,
)
from sodalite.model.store_ops import Claim, Outcome, Purge, RenewLocks, RenewSession
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000


def harness(store: PartitionStore | None = None, **settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 3}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=13), store)  # type: ignore[arg-type]


def send(h: Harness, *drafts_: object) -> list[int]:
    replies = h.run(Send(tuple(drafts_), "s")) + h.drain()  # type: ignore[arg-type]
    return [n for r in replies if isinstance(r, SendAccepted) for n in r.sequence_numbers]


def receive(h: Harness, n: int = 1, consumer: str = "c") -> list[Delivered]:
    return [r for r in h.run(Receive(consumer, n)) + h.drain() if isinstance(r, Delivered)]


def settle(h: Harness, token: uuid.UUID | None, outcome: Outcome) -> list[object]:
    assert token is not None
    return h.run(Settle(token, outcome, "t")) + h.drain()


def deferred(h: Harness, *bodies: str) -> list[int]:
    """Send one message per body, receive and defer them all; their numbers."""
    seqs = send(h, *(draft(b) for b in bodies))
    got = receive(h, len(seqs))
    assert [d.message.sequence_number for d in got] == seqs
    for d in got:
        assert any(isinstance(r, SettlementDone) for r in settle(h, d.lock_token, Outcome.DEFER))
    return seqs


def counts(h: Harness) -> tuple[int, int, int]:
    c = h.view.counts
    return c.active, c.scheduled, c.deferred


def only(replies: list[object], kind: type) -> object:
    found = [r for r in replies if isinstance(r, kind)]
    assert len(found) == 1, replies
    return found[0]


# ---- receive deferred by number: PeekLock -------------------------------------------------------------


def test_peek_lock_claims_the_deferred_numbers_in_one_claim_and_answers_after_it_committed() -> None:
    h = harness()
    s1, s2, s3 = deferred(h, "a", "b", "c")
    assert counts(h) == (0, 0, 3)
    first = h.run(ReceiveDeferred((s3, s1, s3), "rd", consumer="m"))
    assert first == []  # nothing before the claim is durable
    ((_, ops),) = h.effects
    assert len(ops) == 1 and isinstance(ops[0], Claim)
    claim = ops[0]
    assert claim.state is MessageState.DEFERRED and claim.sequence_numbers == (s3, s1) and len(claim.tokens) == 2
    got = only(h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived) and got.reply_to == "rd"
    assert [m.message.sequence_number for m in got.messages] == [s3, s1]  # in the order asked, each once
    for m in got.messages:
        row = h.store.rows[m.message.sequence_number]
        assert row.lock_token == m.lock_token and row.locked_until == m.locked_until == LOCK
        # the deferral gave its delivery back (not a delivery attempt); this claim counts one
        assert m.message.state is MessageState.DEFERRED and m.message.delivery_count == 1
        assert h.view.locks.held[m.lock_token].consumer == "m"
    assert h.store.rows[s2].lock_token is None
    assert counts(h) == (0, 0, 3)  # still deferred while locked


def test_completing_and_dead_lettering_a_deferred_lock_takes_it_off_the_deferred_count() -> None:
    h = harness()
    s1, s2 = deferred(h, "a", "b")
    got = only(h.run(ReceiveDeferred((s1, s2), "rd")) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    a, b = got.messages
    assert any(isinstance(r, SettlementDone) for r in settle(h, a.lock_token, Outcome.COMPLETE))
    assert any(isinstance(r, SettlementDone) for r in settle(h, b.lock_token, Outcome.DEAD_LETTER))
    assert h.store.rows == {} and h.store.gone[s1] == "complete" and len(h.store.dead) == 1
    assert counts(h) == (0, 0, 0)


def test_an_abandoned_deferred_message_stays_deferred_and_out_of_the_window() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    got = only(h.run(ReceiveDeferred((s1,), "rd")) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    assert any(isinstance(r, SettlementDone) for r in settle(h, got.messages[0].lock_token, Outcome.ABANDON))
    assert h.store.rows[s1].record.state is MessageState.DEFERRED and h.store.rows[s1].lock_token is None
    assert receive(h, 5) == [] and s1 not in h.view.window.records
    assert counts(h) == (0, 0, 1)
    # the deferral gave one delivery back
    again = only(h.run(ReceiveDeferred((s1,), "rd2")) + h.drain(), DeferredReceived)
    assert isinstance(again, DeferredReceived) and again.messages[0].message.delivery_count == 2


def test_a_lapsed_lock_of_a_deferred_message_leaves_it_deferred_not_ready() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    got = only(h.run(ReceiveDeferred((s1,), "rd")) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    token = got.messages[0].lock_token
    assert h.next_due == LOCK
    h.at(LOCK)
    h.run(Tick())
    h.drain()
    assert token not in h.view.locks.held and s1 not in h.view.window.records and not h.view.locks.by_seq
    assert receive(h, 5) == []
    assert isinstance(settle(h, token, Outcome.COMPLETE)[0], LockLost)
    assert h.store.rows[s1].record.state is MessageState.DEFERRED and counts(h) == (0, 0, 1)
    again = only(h.run(ReceiveDeferred((s1,), "rd2")) + h.drain(), DeferredReceived)
    assert isinstance(again, DeferredReceived) and len(again.messages) == 1


def test_a_deferred_lock_is_renewed_like_any_other() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    got = only(h.run(ReceiveDeferred((s1,), "rd")) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    token = got.messages[0].lock_token
    assert token is not None
    h.at(10_000)
    replies = h.run(RenewLock(token, "rn"))
    assert isinstance(h.effects[0], tuple) and isinstance(h.effects[0][1][0], RenewLocks)
    replies += h.drain()
    assert LockRenewed("rn", token, 10_000 + LOCK) in replies
    assert h.store.rows[s1].locked_until == 10_000 + LOCK


def test_a_number_not_deferred_and_free_fails_the_whole_request_and_the_others_are_given_back() -> None:
    """As the version-1 path (model/partition.py lock_deferred: all or none) and Service Bus:
    com.microsoft:message-not-found, nothing received."""
    h = harness()
    s1, s2 = deferred(h, "a", "b")
    (active,) = send(h, draft("c"))
    locked = only(h.run(ReceiveDeferred((s2,), "hold")) + h.drain(), DeferredReceived)
    assert isinstance(locked, DeferredReceived)
    replies = h.run(ReceiveDeferred((s1, active, s2, 999), "rd")) + h.drain()
    nf = only(replies, MessageNotFound)
    assert nf == MessageNotFound("rd", (active, s2, 999))
    assert not any(isinstance(r, DeferredReceived) for r in replies)
    row = h.store.rows[s1]  # claimed, then released: unlocked, its delivery given back
    assert row.lock_token is None and row.record.delivery_count == 0 and row.record.state is MessageState.DEFERRED
    assert h.store.rows[s2].lock_token == locked.messages[0].lock_token  # the other holder keeps its lock
    assert h.store.rows[active].lock_token is None
    assert set(h.view.locks.by_seq) == {s2}
    assert counts(h) == (1, 0, 2)
    assert [d.message.sequence_number for d in receive(h, 5)] == [active]


def test_no_numbers_is_answered_at_once_with_nothing() -> None:
    h = harness()
    assert h.run(ReceiveDeferred((), "rd")) == [DeferredReceived("rd", ())]
    assert not h.effects


def test_a_failed_claim_is_server_busy_and_locks_nothing() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    h.run(ReceiveDeferred((s1,), "rd"))
    assert h.step(fail=True) == [ServerBusy("rd")]
    assert not h.view.locks.held and h.store.rows[s1].lock_token is None
    h.run(StoreUnavailable())
    assert h.run(ReceiveDeferred((s1,), "rd2")) == [ServerBusy("rd2")]


# ---- receive deferred by number: ReceiveAndDelete ---------------------------------------------------


def test_receive_and_delete_completes_after_the_claim_and_answers_after_the_delete_committed() -> None:
    h = harness()
    s1, s2 = deferred(h, "a", "b")
    assert h.run(ReceiveDeferred((s2, s1), "rd", ReceiveMode.RECEIVE_AND_DELETE)) == []
    assert h.step() == []  # the claim took both; the delete follows in the next batch
    ((_, ops),) = h.effects
    assert len(ops) == 1 and isinstance(ops[0], SettleOp)
    assert [(i.sequence_number, i.outcome) for i in ops[0].items] == [(s2, Outcome.COMPLETE), (s1, Outcome.COMPLETE)]
    got = only(h.step(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    assert [(m.message.sequence_number, m.lock_token, m.locked_until) for m in got.messages] == [
        (s2, None, None), (s1, None, None)]
    assert h.store.rows == {} and not h.view.locks.held and counts(h) == (0, 0, 0)


def test_receive_and_delete_with_a_missing_number_deletes_nothing() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    replies = h.run(ReceiveDeferred((s1, 77), "rd", ReceiveMode.RECEIVE_AND_DELETE)) + h.drain()
    assert only(replies, MessageNotFound) == MessageNotFound("rd", (77,))
    assert h.store.rows[s1].lock_token is None and h.store.rows[s1].record.delivery_count == 0
    assert counts(h) == (0, 0, 1)


def test_a_failed_delete_is_server_busy_and_the_message_stays_deferred() -> None:
    h = harness()
    (s1,) = deferred(h, "a")
    h.run(ReceiveDeferred((s1,), "rd", ReceiveMode.RECEIVE_AND_DELETE))
    assert h.step() == []
    assert h.step(fail=True) == [ServerBusy("rd")]
    h.at(LOCK)
    h.run(Tick())
    h.drain()
    assert not h.view.locks.held and s1 not in h.view.window.records
    assert h.store.rows[s1].record.state is MessageState.DEFERRED and counts(h) == (0, 0, 1)
    got = only(h.run(ReceiveDeferred((s1,), "rd2", ReceiveMode.RECEIVE_AND_DELETE)) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived) and len(got.messages) == 1 and h.store.rows == {}


# ---- receive deferred by number: sessions ---------------------------------------------------------


def session_harness() -> tuple[Harness, int, int]:
    """A session entity with one deferred message in session a and one in b; r1 holds a."""
    h = harness(requires_session=True)
    sa, sb = send(h, draft(None, session="a"), draft(None, session="b"))
    for session in ("a", "b"):
        h.run(Receive("x", 0))
        h.run(AcceptSession("x", session, "acc"))
        h.drain()
        (d,) = receive(h, 1, "x")
        settle(h, d.lock_token, Outcome.DEFER)
        h.run(CloseConsumer("x"))
        h.drain()
    h.run(Receive("r1", 0))
    h.run(AcceptSession("r1", "a", "acc"))
    h.drain()
    assert h.view.sessions.by_consumer["r1"] == "a" and counts(h) == (0, 0, 2)
    return h, sa, sb


def test_on_a_session_entity_the_session_must_be_named_and_held_here() -> None:
    h, sa, sb = session_harness()
    assert isinstance(only(h.run(ReceiveDeferred((sa,), "rd")), Refused), Refused)
    assert h.run(ReceiveDeferred((sb,), "rd", session_id="b")) == [SessionLockLost("rd", "b")]
    assert not h.effects


def test_a_sessions_holder_gets_its_deferred_messages_with_locks_riding_on_the_session() -> None:
    h, sa, sb = session_harness()
    held = h.view.sessions.held["a"]
    h.run(ReceiveDeferred((sa,), "rd", session_id="a"))
    ((_, ops),) = h.effects
    assert isinstance(ops[0], Claim) and ops[0].session_id == "a" and ops[0].locked_until == held.locked_until
    got = only(h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    token = got.messages[0].lock_token
    assert token is not None and h.view.locks.held[token].session_token == held.token
    assert isinstance(only(h.run(RenewLock(token, "rn")), Refused), Refused)  # renew the session instead
    h.at(held.locked_until - 1)
    h.run(RenewSessionLock("a", "rs"))
    ((_, ops),) = h.effects
    assert {type(op) for op in ops} == {RenewSession, RenewLocks}
    h.drain()
    assert h.store.rows[sa].locked_until == h.view.sessions.held["a"].locked_until
    # Another session's deferred message is not this holder's to take.
    assert only(h.run(ReceiveDeferred((sb,), "rd2", session_id="a")) + h.drain(), MessageNotFound) == \
        MessageNotFound("rd2", (sb,))


def test_when_the_session_lock_lapses_its_deferred_message_stays_deferred() -> None:
    h, sa, _sb = session_harness()
    got = only(h.run(ReceiveDeferred((sa,), "rd", session_id="a")) + h.drain(), DeferredReceived)
    assert isinstance(got, DeferredReceived)
    token = got.messages[0].lock_token
    h.at(h.view.sessions.held["a"].locked_until)
    replies = h.run(Tick()) + h.drain()
    assert SessionLost("r1", "a") in replies
    assert not h.view.locks.held and sa not in h.view.window.records
    assert settle(h, token, Outcome.COMPLETE) == [SessionLockLost("t", "a", token)]
    assert h.store.rows[sa].record.state is MessageState.DEFERRED and counts(h) == (0, 0, 2)


def test_a_session_lost_while_the_claim_was_in_flight_gives_the_messages_back() -> None:
    h, sa, _sb = session_harness()
    h.run(ReceiveDeferred((sa,), "rd", session_id="a"))
    h.view.sessions.held["a"].locked_until = h.now  # lost meanwhile (the core's view says so)
    replies = h.drain()
    assert SessionLockLost("rd", "a") in replies and not any(isinstance(r, DeferredReceived) for r in replies)
    assert h.store.rows[sa].lock_token is None


# ---- complete through a sequence number ------------------------------------------------------------


def test_complete_through_purges_every_unlocked_message_up_to_n_and_counts_come_back_from_the_store() -> None:
    h = harness()
    _s1, s2 = deferred(h, "d1", "d2")
    a3, *_others = send(h, draft("a3"), draft("a4"), draft("a5"), draft("a6"))
    scheduled = only(h.run(Schedule((draft("s", scheduled=999_999),), "sch")) + h.drain(), SendAccepted)
    assert isinstance(scheduled, SendAccepted)
    (sch,) = scheduled.sequence_numbers
    (held,) = receive(h, 1)  # a3 locked
    assert held.message.sequence_number == a3
    got = only(h.run(ReceiveDeferred((s2,), "rd")) + h.drain(), DeferredReceived)  # s2 locked
    assert isinstance(got, DeferredReceived)
    assert counts(h) == (4, 1, 2)
    assert h.run(CompleteThrough(sch, "ct")) == []  # nothing before the purge is durable
    ((_, ops),) = [e for e in h.effects if isinstance(e, tuple)]
    assert ops == (Purge(h.now, sch),)
    replies = h.step()
    assert replies == [CompletedThrough("ct", 5)]  # s1, a4, a5, a6 and the scheduled one
    assert set(h.store.rows) == {s2, a3}
    assert [e for e in h.effects if isinstance(e, ReadCounts)] == [ReadCounts()]
    assert h.view.counts.stale_after
    h.drain()
    assert counts(h) == (1, 0, 1) and not h.view.counts.stale_after
    assert not h.view.scheduled.heap
    # The locked ones are still the holders' to settle; nothing purged is delivered.
    assert receive(h, 5) == []
    back = settle(h, held.lock_token, Outcome.ABANDON)  # the credit given above takes it at once
    assert [r.message.sequence_number for r in back if isinstance(r, Delivered)] == [a3]
    assert any(isinstance(r, SettlementDone) for r in settle(h, got.messages[0].lock_token, Outcome.COMPLETE))
    assert counts(h) == (1, 0, 0)


def test_complete_through_forgets_the_window_and_the_next_message_is_delivered() -> None:
    h = harness(read_count=2)
    seqs = send(h, *(draft(str(i)) for i in range(6)))
    h.run(Receive("c", 0))
    h.drain()
    assert h.view.window.records  # read ahead
    replies = h.run(CompleteThrough(seqs[2], "ct")) + h.drain()
    assert CompletedThrough("ct", 3) in replies
    assert all(seq > seqs[2] for seq in h.view.window.records)
    assert [d.message.sequence_number for d in receive(h, 10)] == seqs[3:]
    assert counts(h) == (3, 0, 0)


def test_complete_through_again_removes_nothing_and_reads_no_counts() -> None:
    h = harness()
    seqs = send(h, draft("a"), draft("b"))
    assert CompletedThrough("ct", 2) in h.run(CompleteThrough(seqs[1], "ct")) + h.drain()
    h.run(CompleteThrough(seqs[1], "ct2"))
    assert h.step() == [CompletedThrough("ct2", 0)]
    assert not any(isinstance(e, ReadCounts) for e in h.effects)
    h.drain()
    assert counts(h) == (0, 0, 0)


def test_a_failed_purge_is_server_busy_and_the_messages_are_still_delivered() -> None:
    h = harness()
    seqs = send(h, draft("a"), draft("b"))
    h.run(CompleteThrough(seqs[1], "ct"))
    assert h.step(fail=True) == [ServerBusy("ct")]
    h.drain()
    assert [d.message.sequence_number for d in receive(h, 5)] == seqs
    h.run(StoreUnavailable())
    assert h.run(CompleteThrough(seqs[1], "ct2")) == [ServerBusy("ct2")]


def test_a_lock_lapsing_while_the_purge_is_in_flight_keeps_its_message_deliverable() -> None:
    """The purge ran while the lock held, so the message stays; it came back to the window after the
    purge was decided, so the purge's answer makes the window read it again rather than trust it."""
    h = harness()
    (s1,) = send(h, draft("a"))
    (d,) = receive(h, 1)
    h.at(LOCK - 1)
    h.run(CompleteThrough(s1, "ct"))
    h.at(LOCK)
    h.run(Tick())  # the lock lapses here: the message is ready again
    assert s1 in h.view.window.records
    replies = h.drain()
    assert CompletedThrough("ct", 0) in replies
    assert s1 in h.store.rows
    assert [x.message.sequence_number for x in receive(h, 1)] == [s1]
    assert d.lock_token not in h.view.locks.held


@pytest.mark.parametrize("renewal_fails", [False, True])
@pytest.mark.parametrize("store_down", [False, True])
def test_a_lock_the_purge_found_lapsed_while_its_renewal_was_in_flight_goes_with_its_row(
        renewal_fails: bool, store_down: bool) -> None:
    """A renewal in flight keeps the lock from lapsing at its time (its answer may extend it); a purge
    decided at or after that time deletes the row, since the store's lock had lapsed by the purge's
    time. When the renewal's answer leaves the lock as it was and the store is down (so nothing lapses
    then), the purge's commit still takes the lock: the core never holds a lock on a row the purge
    removed, nor puts that row back into the window when the store comes back (the Hypothesis
    machine's shrunk example, issue 14)."""
    h = harness()
    (s1,) = send(h, draft("a"))
    (d,) = receive(h, 1)
    assert d.lock_token is not None and d.locked_until == LOCK
    h.run(RenewLock(d.lock_token, "r"))  # at 0: asks for 0 + LOCK, the time the lock already has
    h.at(LOCK)
    h.run(Tick())
    assert d.lock_token in h.view.locks.held  # busy: its renewal's answer decides
    assert h.run(CompleteThrough(s1, "ct")) == []
    if store_down:
        h.run(StoreUnavailable())
    replies = h.step(fail=renewal_fails) + h.drain()
    assert (ServerBusy("r") if renewal_fails else LockRenewed("r", d.lock_token, LOCK)) in replies
    assert CompletedThrough("ct", 1) in replies
    assert s1 not in h.store.rows and h.store.gone[s1] == "purged"
    assert d.lock_token not in h.view.locks.held and s1 not in h.view.locks.by_seq
    h.run(StoreAvailable())
    h.at(2 * LOCK)
    h.run(Tick())
    h.drain()
    assert s1 not in h.view.window.records
    assert receive(h, 5) == []
    assert settle(h, d.lock_token, Outcome.COMPLETE) == [LockLost("t", d.lock_token)]
    assert counts(h) == (0, 0, 0)


def test_a_failed_counts_read_is_asked_again() -> None:
    h = harness()
    send(h, draft("a"))
    h.run(CompleteThrough(1, "ct"))
    h.step()
    assert isinstance(h.effects[-1], ReadCounts)
    while not isinstance(h.effects[0], ReadCounts):
        h.step()
    h.step(fail=True)
    assert h.view.counts.stale_after and any(isinstance(e, ReadCounts) for e in h.effects)
    h.drain()
    assert not h.view.counts.stale_after and counts(h) == (0, 0, 0)


def test_a_counts_read_answer_sets_the_counts_only_if_one_was_asked_for() -> None:
    h = harness()
    send(h, draft("a"))
    h.run(CountsRead((9, 9, 9)))
    assert counts(h) == (1, 0, 0)
