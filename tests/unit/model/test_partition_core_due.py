"""Times the core does not track, named by the store (``DueInStore``): two cores on one store stand for
two nodes. A message scheduled through one core is activated by the other when told its time (the
scheduling node died, or both act on it: the store's Activate takes each row once)."""

from __future__ import annotations

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    CancelScheduled,
    CoreSettings,
    Delivered,
    DueInStore,
    Receive,
    Schedule,
    ScheduledCancelled,
    SendAccepted,
    Tick,
    new_view,
)
from sodalite.model.store_ops import Activate


def _node(store: PartitionStore, seed: int) -> Harness:
    return Harness(new_view(CoreSettings(lock_duration=30_000), 0, token_seed=seed), store)


def _activates(h: Harness) -> int:
    return sum(1 for op in h.ops if isinstance(op, Activate))


def test_a_message_another_core_scheduled_is_activated_at_the_time_the_store_names() -> None:
    store = PartitionStore()
    a, b = _node(store, 1), _node(store, 2)
    b.run(Receive("c", 1))
    b.drain()
    a.run(Schedule((draft("later", scheduled=10_000),), "s"))
    assert a.drain() == [SendAccepted("s", (1,))]
    assert b.view.counts.scheduled == 0 and b.next_due is None  # b knows nothing of it
    b.run(DueInStore(10_000))
    assert b.next_due == 10_000
    assert b.drain() == []
    b.at(10_000)
    b.run(Tick())
    (delivered,) = [r for r in b.drain() if isinstance(r, Delivered)]
    assert delivered.message.sequence_number == 1
    assert b.view.counts.scheduled == 0  # never below zero: b had not counted it
    assert store.rows[1].record.state == MessageState.ACTIVE
    # a's own time comes too: its Activate finds the row gone from SCHEDULED and activates nothing,
    # and a counts it scheduled no more (else it would keep the entity from ever being idle)
    a.at(10_000)
    a.run(Tick())
    assert a.drain() == []
    assert (a.view.counts.scheduled, len(store.rows)) == (0, 1)


def test_a_time_already_acted_on_and_named_again_changes_nothing() -> None:
    store = PartitionStore()
    b = _node(store, 2)
    b.at(5_000)
    b.run(DueInStore(4_000))  # past: acted on at once
    b.drain()
    done = _activates(b)
    assert done == 1
    b.run(DueInStore(4_000))  # the store's next_due, read again, still names it (not this core's to act on)
    b.drain()
    assert _activates(b) == done and b.next_due is None
    b.run(DueInStore(9_000))  # a new time is acted on at that time
    assert b.next_due == 9_000


def test_a_cancelled_message_is_not_counted_off_again_when_its_time_comes() -> None:
    h = _node(PartitionStore(), 3)
    h.run(Schedule((draft("x", scheduled=10_000), draft("y", scheduled=10_000), draft("z", scheduled=20_000)), "s"))
    h.drain()
    h.run(CancelScheduled((1,), "c"))
    assert h.drain() == [ScheduledCancelled("c", (1,))]
    h.at(10_000)
    h.run(Tick())
    h.drain()
    assert (h.view.counts.scheduled, h.view.counts.active) == (1, 1)  # z still waits; y is active


def test_an_activation_answered_after_a_tracked_time_leaves_that_time_to_the_next_one() -> None:
    """An Activate asked at 5,000 whose batch is answered at 10,000 activated what was due by
    5,000 only: the message due at 10,000 is still scheduled and still counted, and is activated
    next (the core once counted it as activated elsewhere, and the count went below the store's)."""
    store = PartitionStore()
    a = _node(store, 1)
    a.run(Schedule((draft("later", scheduled=10_000),), "s"))
    assert a.drain() == [SendAccepted("s", (1,))]
    a.run(DueInStore(5_000))
    a.at(5_000)
    a.run(Tick())  # an Activate at 5,000, not carried out yet
    a.at(10_000)
    a.run(Tick())
    a.drain()
    assert store.rows[1].record.state == MessageState.ACTIVE
    assert (a.view.counts.active, a.view.counts.scheduled) == store.counts()[:2] == (1, 0)
