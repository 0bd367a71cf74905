"""Sessions in the pure partition core, rule by rule, with a fake clock: accept by id and next
available, one holder per session, in-order delivery to the holder only, the session lock as a
timer, settlement after it is lost, renewal, session state, and MaxDeliveryCount/TTL/deferral for
a session's messages. Each test drives decide() against the memory store (tests/core_harness.py)
and asserts the replies and what that store then holds."""

from __future__ import annotations

import uuid

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    AcceptSession,
    CloseConsumer,
    CoreSettings,
    Delivered,
    GetSessionState,
    LockLost,
    NoSessionAvailable,
    Receive,
    ReceiveMode,
    Refused,
    RenewLock,
    RenewSessionLock,
    Schedule,
    Send,
    SendAccepted,
    ServerBusy,
    SessionAccepted,
    SessionCannotBeLocked,
    SessionLockLost,
    SessionLost,
    SessionRenewed,
    SessionState,
    SessionStateSet,
    SetSessionState,
    Settle,
    SettlementDone,
    StoreAvailable,
    StoreUnavailable,
    Tick,
    new_view,
)
from sodalite.model.store_ops import Claim, ClaimSession, Outcome, PutSessionState, ReleaseSession, RenewSession

LOCK = 30_000


def harness(store: PartitionStore | None = None, **settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 3, "requires_session": True}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=11), store)  # type: ignore[arg-type]


def send(h: Harness, *sessions: str, ttl: int | None = None) -> list[int]:
    first = h.run(Send(tuple(draft(None, session=s, ttl=ttl) for s in sessions), "s"))
    accepted = [r for r in first + h.drain() if isinstance(r, SendAccepted)]
    assert len(accepted) == 1
    return list(accepted[0].sequence_numbers)


def accept(h: Harness, consumer: str, session: str | None, wait_until: int | None = None) -> list[object]:
    h.run(Receive(consumer, 0))  # the link attaches
    return h.run(AcceptSession(consumer, session, ("accept", consumer), wait_until)) + h.drain()


def accepted(replies: list[object]) -> list[tuple[object, str]]:
    return [(r.consumer, r.session_id) for r in replies if isinstance(r, SessionAccepted)]


def receive(h: Harness, consumer: str, n: int = 1, mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[Delivered]:
    out = h.run(Receive(consumer, n, mode)) + h.drain()
    return [r for r in out if isinstance(r, Delivered)]


def settle(h: Harness, token: uuid.UUID | None, outcome: Outcome) -> list[object]:
    assert token is not None
    return h.run(Settle(token, outcome, "t")) + h.drain()


def seqs(got: list[Delivered]) -> list[int]:
    return [d.message.sequence_number for d in got]


# ---- sending --------------------------------------------------------------------------------------------


def test_a_message_without_a_session_id_is_refused_and_nothing_of_its_send_is_stored() -> None:
    h = harness()
    replies = h.run(Send((draft(None, session="a"), draft(None)), "s")) + h.drain()
    assert [type(r) for r in replies] == [Refused]
    assert h.store.rows == {}
    assert send(h, "a") == [1]  # with a SessionId it goes in
    ping = h.run(Send((draft(None, ping=True),), "p"))  # a ping needs no SessionId
    assert ping == [SendAccepted("p", ())]


# ---- accepting -------------------------------------------------------------------------------------------


def test_a_named_session_is_accepted_once_its_lock_is_in_the_store_even_without_messages() -> None:
    h = harness()
    h.run(Receive("r1", 0))
    first = h.run(AcceptSession("r1", "a", "acc"))
    assert first == [] and isinstance(h.effects[0][1][0], ClaimSession)  # type: ignore[index]
    replies = h.drain()
    assert replies == [SessionAccepted("acc", "r1", "a", LOCK)]
    token, until, _owner = h.store.session_locks["a"]
    assert until == LOCK and h.view.sessions.held["a"].token == token


def test_a_session_held_by_another_receiver_cannot_be_locked() -> None:
    h = harness()
    assert accepted(accept(h, "r1", "a")) == [("r1", "a")]
    replies = accept(h, "r2", "a")
    assert [type(r) for r in replies] == [SessionCannotBeLocked]
    other = PartitionStore()  # another node holds it: the store refuses the claim
    other.lock_session_elsewhere("a", uuid.uuid4(), LOCK)
    h2 = harness(other)
    assert accept(h2, "r1", "a") == [SessionCannotBeLocked(("accept", "r1"), "a")]


def test_next_available_takes_the_free_session_with_the_lowest_ready_message() -> None:
    h = harness()
    send(h, "b", "a", "b")
    assert accepted(accept(h, "r1", None)) == [("r1", "b")]
    assert accepted(accept(h, "r2", None)) == [("r2", "a")]


def test_next_available_waits_for_a_send_and_times_out_at_its_deadline() -> None:
    h = harness()
    assert accept(h, "r1", None, wait_until=5_000) == []
    claims = [op for op in h.ops if isinstance(op, ClaimSession)]
    assert len(claims) == 1  # it asked once and does not poll while nothing became ready
    assert accept(h, "r2", None, wait_until=2_000) == []
    h.at(1_000)
    replies = h.run(Send((draft(None, session="x"),), "s")) + h.drain()
    assert accepted(replies) == [("r1", "x")]
    assert h.next_due == 2_000  # r2's deadline
    h.at(2_000)
    assert h.run(Tick()) == [NoSessionAvailable(("accept", "r2"))]


# ---- delivering -------------------------------------------------------------------------------------------


def test_only_the_holder_gets_its_sessions_messages_and_in_order() -> None:
    h = harness()
    send(h, "a", "b", "a", "a")
    accept(h, "ra", "a")
    accept(h, "rb", "b")
    got_a = receive(h, "ra", 10)
    assert seqs(got_a) == [1, 3, 4]
    assert all(d.consumer == "ra" for d in got_a)
    assert all(h.store.rows[d.message.sequence_number].lock_token == d.lock_token for d in got_a)
    assert all(d.locked_until == h.view.sessions.held["a"].locked_until for d in got_a)  # they ride on the session
    got_b = receive(h, "rb", 10)
    assert seqs(got_b) == [2]
    h.run(Receive("plain", 10))  # a receiver without a session gets nothing
    assert [r for r in h.drain() if isinstance(r, Delivered)] == []


def test_one_claim_per_session_is_in_flight_and_a_failed_one_lets_nothing_overtake() -> None:
    h = harness()
    send(h, "a", "a")
    accept(h, "r", "a")
    h.run(Receive("r", 1))
    h.run(Receive("r", 1))  # more credit while the first claim is in flight: no second claim yet
    claims = [op for batch in h.effects if isinstance(batch, tuple) for op in batch[1] if isinstance(op, Claim)]
    assert len(claims) == 1 and len(claims[0].tokens) == 1
    assert [r for r in h.step(fail=True) if isinstance(r, Delivered)] == []  # the claim fails
    got = [r for r in h.drain() if isinstance(r, Delivered)]
    assert seqs(got) == [1, 2]
    assert [d.message.delivery_count for d in got] == [1, 1]


def test_new_messages_of_a_held_session_reach_its_waiting_receiver() -> None:
    h = harness()
    accept(h, "r", "a")
    assert receive(h, "r", 2) == []  # the claim came back empty
    replies = h.run(Send((draft(None, session="a"), draft(None, session="zz")), "s")) + h.drain()
    assert seqs([r for r in replies if isinstance(r, Delivered)]) == [1]


def test_receive_and_delete_delivers_a_sessions_message_only_after_the_delete_committed() -> None:
    h = harness()
    send(h, "a", "a")
    accept(h, "r", "a")
    h.run(Receive("r", 2, ReceiveMode.RECEIVE_AND_DELETE))
    assert [r for r in h.step() if isinstance(r, Delivered)] == []  # the claim: nothing yet
    got = [r for r in h.step() if isinstance(r, Delivered)]  # the delete commits
    assert [(d.message.sequence_number, d.lock_token) for d in got] == [(1, None), (2, None)]
    assert h.store.rows == {} and h.view.counts.active == 0


# ---- the session lock ----------------------------------------------------------------------------------


def test_the_session_lock_lapses_at_its_time_and_settlement_after_it_is_session_lock_lost() -> None:
    h = harness()
    send(h, "a")
    accept(h, "r1", "a")
    (d,) = receive(h, "r1")
    assert h.next_due == LOCK
    h.at(LOCK)
    assert SessionLost("r1", "a") in h.run(Tick())
    assert d.lock_token is not None
    replies = settle(h, d.lock_token, Outcome.COMPLETE)
    assert replies == [SessionLockLost("t", "a", d.lock_token)]
    assert 1 in h.store.rows
    accept(h, "r2", "a")  # the session is free again; its message comes back with the delivery counted
    (again,) = receive(h, "r2")
    assert (again.message.sequence_number, again.message.delivery_count) == (1, 2)


def test_renewing_the_session_extends_its_messages_locks_and_the_lapse_follows() -> None:
    h = harness()
    send(h, "a")
    accept(h, "r", "a")
    (d,) = receive(h, "r")
    h.at(20_000)
    replies = h.run(RenewSessionLock("a", "rn")) + h.drain()
    assert replies == [SessionRenewed("rn", "a", 20_000 + LOCK)]
    assert h.store.session_locks["a"][1] == 20_000 + LOCK
    assert h.store.rows[1].locked_until == 20_000 + LOCK
    assert any(isinstance(op, RenewSession) for op in h.ops)
    h.at(LOCK + 1)
    assert h.run(Tick()) == []
    assert settle(h, d.lock_token, Outcome.COMPLETE) == [SettlementDone("t", d.lock_token, Outcome.COMPLETE)]
    assert h.store.rows == {}


def test_receiving_extends_the_session_lock() -> None:
    h = harness()
    accept(h, "r", "a")
    h.at(10_000)
    receive(h, "r", 1)
    assert h.view.sessions.held["a"].locked_until == 10_000 + LOCK
    assert h.store.session_locks["a"][1] == 10_000 + LOCK


def test_a_sessions_message_has_no_lock_of_its_own_to_renew() -> None:
    h = harness()
    send(h, "a")
    accept(h, "r", "a")
    (d,) = receive(h, "r")
    assert d.lock_token is not None
    replies = h.run(RenewLock(d.lock_token, "rl"))
    assert [type(r) for r in replies] == [Refused]


def test_renewing_a_session_not_held_is_session_lock_lost() -> None:
    h = harness()
    assert h.run(RenewSessionLock("a", "rn")) == [SessionLockLost("rn", "a")]


def test_closing_the_receiver_releases_the_session_and_abandons_its_messages() -> None:
    h = harness()
    send(h, "a", "a")
    accept(h, "r1", "a")
    receive(h, "r1", 2)
    h.run(CloseConsumer("r1"))
    assert any(isinstance(op, ReleaseSession) for op in h.effects[0][1])  # type: ignore[index]
    h.drain()
    assert "a" not in h.store.session_locks
    assert all(row.lock_token is None for row in h.store.rows.values())
    assert accepted(accept(h, "r2", None)) == [("r2", "a")]
    got = receive(h, "r2", 5)
    assert [(d.message.sequence_number, d.message.delivery_count) for d in got] == [(1, 2), (2, 2)]


def test_a_session_closed_while_the_store_is_down_is_found_again_once_its_lock_lapses_there() -> None:
    """The release could not be sent: the store keeps the session locked until its time, and the
    core, which found nothing free meanwhile, asks again at that time without being told."""
    h = harness()
    send(h, "a")
    accept(h, "r1", "a")
    h.run(StoreUnavailable())
    h.run(CloseConsumer("r1"))
    h.run(StoreAvailable())
    h.drain()
    assert "a" in h.store.session_locks  # nothing released it
    assert accept(h, "r2", None, wait_until=LOCK * 3) == []  # a is locked in the store until LOCK
    assert h.next_due == LOCK
    h.at(LOCK)
    assert accepted(h.run(Tick()) + h.drain()) == [("r2", "a")]


# ---- session state ----------------------------------------------------------------------------------------


def test_session_state_is_set_durably_and_read_back_only_by_a_holder() -> None:
    h = harness()
    assert h.run(GetSessionState("a", "g")) == [SessionLockLost("g", "a")]
    assert h.run(SetSessionState("a", b"s1", "p")) == [SessionLockLost("p", "a")]
    accept(h, "r", "a")
    h.at(5)
    first = h.run(SetSessionState("a", b"s1", "p"))
    assert first == [] and isinstance(h.effects[0][1][0], PutSessionState)  # type: ignore[index]
    assert h.drain() == [SessionStateSet("p", "a")]
    assert h.store.session_states == {"a": (b"s1", 5)}
    assert h.run(GetSessionState("a", "g")) == [SessionState("g", "a", b"s1")]
    h.run(SetSessionState("a", b"s2", "p2"))
    assert h.step(fail=True) == [ServerBusy("p2")]  # a failed batch: the state is unchanged
    assert h.run(GetSessionState("a", "g")) == [SessionState("g", "a", b"s1")]
    h.run(SetSessionState("a", None, "p3"))
    h.drain()
    assert h.store.session_states == {}
    assert h.run(GetSessionState("a", "g")) == [SessionState("g", "a", None)]


def test_session_state_read_at_start_is_served() -> None:
    view = new_view(CoreSettings(requires_session=True), 0, token_seed=1, session_states=(("a", b"old", 1),))
    h = Harness(view)
    accept(h, "r", "a")
    assert h.run(GetSessionState("a", "g")) == [SessionState("g", "a", b"old")]


# ---- MaxDeliveryCount, TTL, deferral ---------------------------------------------------------------------


def test_abandon_of_the_last_allowed_delivery_of_a_sessions_message_dead_letters() -> None:
    h = harness(max_delivery_count=1)
    send(h, "a", "a")
    accept(h, "r", "a")
    (d,) = receive(h, "r")
    replies = settle(h, d.lock_token, Outcome.ABANDON)
    assert SettlementDone("t", d.lock_token, Outcome.ABANDON) in replies
    assert [row.origin for row in h.store.dead.values()] == [1]
    assert seqs(receive(h, "r")) == [2]


def test_a_sessions_message_found_with_its_deliveries_used_up_is_dead_lettered_not_delivered() -> None:
    store = PartitionStore()
    first = harness(store, max_delivery_count=2)
    send(first, "a", "a")
    store.lapsed_deliveries(1, 2)  # two lapsed deliveries (crashes)
    h = Harness(new_view(CoreSettings(lock_duration=LOCK, max_delivery_count=2, requires_session=True), 0,
                         token_seed=3, active=2, last_sequence_number=2), store)
    accept(h, "r", "a")
    got = receive(h, "r", 1)
    assert seqs(got) == [2]
    assert [row.origin for row in store.dead.values()] == [1]


def test_an_expired_sessions_message_is_never_delivered_and_leaves_at_its_time() -> None:
    h = harness(dead_letter_on_expiration=True)
    send(h, "a", ttl=100)
    send(h, "a")
    h.at(100)
    h.run(Tick())
    h.drain()
    assert [row.origin for row in h.store.dead.values()] == [1]
    accept(h, "r", "a")
    assert seqs(receive(h, "r", 5)) == [2]


def test_an_expired_sessions_message_abandoned_leaves_instead_of_coming_back() -> None:
    h = harness()
    send(h, "a", ttl=1_000)
    accept(h, "r", "a")
    (d,) = receive(h, "r")
    h.at(1_000)
    settle(h, d.lock_token, Outcome.ABANDON)
    assert h.store.rows == {} and h.store.gone == {1: "complete"}


def test_defer_parks_a_sessions_message_and_the_next_one_is_delivered() -> None:
    h = harness()
    send(h, "a", "a")
    accept(h, "r", "a")
    (d,) = receive(h, "r")
    settle(h, d.lock_token, Outcome.DEFER)
    assert h.store.rows[1].record.state is MessageState.DEFERRED and h.view.counts.deferred == 1
    assert seqs(receive(h, "r", 5)) == [2]


def test_settling_an_unknown_token_is_still_lock_lost() -> None:
    h = harness()
    token = uuid.uuid4()
    assert h.run(Settle(token, Outcome.COMPLETE, "t")) == [LockLost("t", token)]


def test_a_session_claim_answered_after_its_lock_lapsed_holds_nothing() -> None:
    h = harness()
    send(h, "a")
    h.run(Receive("r1", 0))
    h.run(AcceptSession("r1", "a", "named"))
    h.run(Receive("r2", 0))
    h.run(AcceptSession("r2", None, "next"))
    h.at(LOCK)  # both claims come back when their locks have already lapsed
    replies = h.step()
    assert replies == [ServerBusy("named")] and h.view.sessions.held == {}
    replies = h.step() + h.drain()  # the next-available one is asked for again
    assert accepted(replies) == [("r2", "a")]
    assert h.view.sessions.held["a"].locked_until == 2 * LOCK


def test_a_scheduled_message_of_a_held_session_reaches_its_holder_at_its_time() -> None:
    h = harness()
    first = h.run(Schedule((draft(None, scheduled=5_000, session="a"),), "sch")) + h.drain()
    assert [r.sequence_numbers for r in first if isinstance(r, SendAccepted)] == [(1,)]
    accept(h, "r", "a")
    assert receive(h, "r", 1) == []
    assert h.next_due == 5_000
    h.at(5_000)
    got = [r for r in h.run(Tick()) + h.drain() if isinstance(r, Delivered)]
    assert seqs(got) == [1] and got[0].consumer == "r"


def test_a_failed_next_available_claim_answers_server_busy_and_the_next_accept_asks_again() -> None:
    h = harness()
    send(h, "a")
    h.run(Receive("r1", 0))
    h.run(AcceptSession("r1", None, "first"))
    assert h.step(fail=True) == [ServerBusy("first")]
    assert accepted(accept(h, "r2", None)) == [("r2", "a")]


def test_a_message_claim_answered_after_its_lock_lapsed_delivers_nothing_and_the_message_comes_back() -> None:
    h = harness()
    send(h, "a")
    accept(h, "r1", "a")
    h.run(Receive("r1", 1))  # the claim (and the session's renewal) wait in a batch
    h.at(LOCK)
    replies = h.step()
    assert [r for r in replies if isinstance(r, Delivered)] == []
    assert h.view.locks.held == {} and 1 in h.view.window.records  # held by no one, ready again at once
    h.drain()
    assert SessionLost("r1", "a") in h.replies
    assert accepted(accept(h, "r2", "a")) == [("r2", "a")]
    (d,) = receive(h, "r2")
    assert (d.message.sequence_number, d.message.delivery_count) == (1, 2)
