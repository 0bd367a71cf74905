"""The pure partition core, an update of the entity's properties (``UpdateSettings``): it ends every
lock granted here, as Service Bus (and the deleted version-1 path) end them, in the store by one
fenced batch, and answers after it. Fake clock, the memory store (tests/core_harness.py)."""

from __future__ import annotations

from dataclasses import replace

from core_harness import Harness, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    AcceptSession,
    CoreSettings,
    Delivered,
    LockLost,
    Receive,
    Send,
    SendAccepted,
    SessionAccepted,
    SessionLockLost,
    SessionLost,
    SettingsUpdated,
    Settle,
    SettlementDone,
    StoreAvailable,
    StoreUnavailable,
    UpdateSettings,
    new_view,
)
from sodalite.model.store_ops import Outcome
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000
SETTINGS = CoreSettings(lock_duration=LOCK, max_delivery_count=3)


def harness(settings: CoreSettings = SETTINGS) -> Harness:
    return Harness(new_view(settings, 0, token_seed=7))


def send(h: Harness, *drafts: object) -> list[int]:
    replies = h.run(Send(tuple(drafts), "s")) + h.drain()  # type: ignore[arg-type]
    [accepted] = [r for r in replies if isinstance(r, SendAccepted)]
    return [n for n in accepted.sequence_numbers if n is not None]


def receive(h: Harness, n: int, consumer: str = "c") -> list[Delivered]:
    replies = h.run(Receive(consumer, n)) + h.drain()
    return [r for r in replies if isinstance(r, Delivered)]


def test_an_update_releases_every_lock_in_one_fenced_batch_keeping_the_delivery_count() -> None:
    h = harness()
    first, second = send(h, draft(body=b"a"), draft(body=b"b"))
    delivered = receive(h, 2)
    assert [d.message.sequence_number for d in delivered] == [first, second]
    h.at(1_000)
    newer = replace(SETTINGS, lock_duration=5_000, max_delivery_count=7)
    ops_before = len(h.ops)
    assert h.run(UpdateSettings(newer, "u")) == []  # answered only once the release committed
    [batch] = h.ops[ops_before:]
    assert isinstance(batch, SettleOp) and {item.outcome for item in batch.items} == {Outcome.ABANDON}
    assert {item.lock_token for item in batch.items} == {d.lock_token for d in delivered}
    replies = h.drain()
    assert SettingsUpdated("u", tuple(d.lock_token for d in delivered if d.lock_token)) in replies
    assert h.view.settings == newer
    for seq in (first, second):  # free in the store, the delivery still counted
        row = h.store.rows[seq]
        assert row.lock_token is None and row.record.delivery_count == 1
    assert not h.view.locks.held
    for d in delivered:  # a settlement with a dropped lock is refused
        assert d.lock_token is not None
        assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "x")) == [LockLost("x", d.lock_token)]
    again = receive(h, 2, "other")  # free at once, in order, with the new lock duration
    assert [d.message.sequence_number for d in again] == [first, second]
    assert all(d.locked_until == 1_000 + 5_000 for d in again)


def test_a_lock_whose_deliveries_are_used_up_is_dead_lettered_as_on_a_lapse() -> None:
    h = harness(replace(SETTINGS, max_delivery_count=1))
    [seq] = send(h, draft())
    [d] = receive(h, 1)
    h.run(UpdateSettings(replace(SETTINGS, max_delivery_count=1), "u"))
    h.drain()
    assert seq not in h.store.rows and len(h.store.dead) == 1
    assert d.lock_token is not None
    assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "x")) == [LockLost("x", d.lock_token)]


def test_a_settlement_decided_before_the_update_still_applies() -> None:
    h = harness()
    [seq] = send(h, draft())
    [d] = receive(h, 1)
    assert d.lock_token is not None
    h.run(Settle(d.lock_token, Outcome.COMPLETE, "done"))  # in a batch not yet carried out
    assert h.run(UpdateSettings(SETTINGS, "u")) == [SettingsUpdated("u", ())]  # nothing of its own to drop
    assert SettlementDone("done", d.lock_token, Outcome.COMPLETE) in h.drain()
    assert seq not in h.store.rows


def test_without_locks_the_update_is_answered_at_once_and_stores_nothing() -> None:
    h = harness()
    send(h, draft())
    ops_before = len(h.ops)
    assert h.run(UpdateSettings(SETTINGS, "u")) == [SettingsUpdated("u", ())]
    assert len(h.ops) == ops_before


def test_a_failed_release_still_ends_the_locks_here_and_the_store_lets_them_lapse() -> None:
    h = harness()
    [seq] = send(h, draft())
    [d] = receive(h, 1)
    assert d.lock_token is not None
    h.run(UpdateSettings(SETTINGS, "u"))
    assert SettingsUpdated("u", (d.lock_token,)) in h.step(fail=True)
    assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "x")) == [LockLost("x", d.lock_token)]
    assert h.store.rows[seq].locked_at(h.now)  # still locked in the store: it lapses at its time
    h.drain()
    h.at(LOCK + 1)
    again = receive(h, 1, "other")
    assert [m.message.sequence_number for m in again] == [seq]


def test_with_the_store_down_the_locks_end_here_and_lapse_in_the_store() -> None:
    h = harness()
    [seq] = send(h, draft())
    [d] = receive(h, 1)
    assert d.lock_token is not None
    h.run(StoreUnavailable())
    assert h.run(UpdateSettings(SETTINGS, "u")) == [SettingsUpdated("u", (d.lock_token,))]
    assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "x")) == [LockLost("x", d.lock_token)]
    assert h.store.rows[seq].locked_at(h.now)  # it lapses there at its time, and here with it
    h.run(StoreAvailable())
    h.drain()
    h.at(LOCK + 1)
    again = receive(h, 1, "other")
    assert [m.message.sequence_number for m in again] == [seq]


def test_a_deferred_message_locked_by_number_stays_deferred() -> None:
    from sodalite.model.partition_core import DeferredReceived, ReceiveDeferred, ReceiveMode

    h = harness()
    [seq] = send(h, draft())
    [d] = receive(h, 1)
    assert d.lock_token is not None
    h.run(Settle(d.lock_token, Outcome.DEFER, "defer"))
    h.drain()
    replies = h.run(ReceiveDeferred((seq,), "r", ReceiveMode.PEEK_LOCK, None, "c")) + h.drain()
    [got] = [r for r in replies if isinstance(r, DeferredReceived)]
    h.run(UpdateSettings(SETTINGS, "u"))
    h.drain()
    row = h.store.rows[seq]
    assert row.record.state == MessageState.DEFERRED and row.lock_token is None
    token = got.messages[0].lock_token
    assert token is not None and token not in h.view.locks.held


def test_sessions_held_are_released_and_their_holders_told() -> None:
    h = harness(replace(SETTINGS, requires_session=True))
    [seq] = send(h, draft(session="s1"))
    h.run(Receive("c", 0))
    replies = h.run(AcceptSession("c", "s1", "a")) + h.drain()
    assert any(isinstance(r, SessionAccepted) for r in replies)
    [d] = receive(h, 1)
    assert d.lock_token is not None
    replies = h.run(UpdateSettings(replace(SETTINGS, requires_session=True), "u"))
    assert SessionLost("c", "s1") in replies
    replies = h.drain()
    assert SettingsUpdated("u", (d.lock_token,)) in replies
    assert "s1" not in h.store.session_locks
    row = h.store.rows[seq]
    assert row.lock_token is None and row.record.delivery_count == 1
    assert h.run(Settle(d.lock_token, Outcome.COMPLETE, "x")) == [SessionLockLost("x", "s1", d.lock_token)]
    h.run(Receive("d", 0))
    replies = h.run(AcceptSession("d", "s1", "b")) + h.drain()  # free for another receiver at once
    assert any(isinstance(r, SessionAccepted) for r in replies)
