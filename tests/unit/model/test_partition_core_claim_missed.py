"""A claim the store answers with fewer rows than the window named: two cores on one store stand for
two nodes. The rows another node holds come back to this core when that node's lock lapses, even
if that node died and never says so (issue 18: a node that dies holding locks loses nothing)."""

from __future__ import annotations

from core_harness import Harness, PartitionStore, draft
from sodalite.model.partition_core import Arrived, CoreSettings, Delivered, Receive, Send, Tick, new_view


def _node(store: PartitionStore, seed: int) -> Harness:
    return Harness(new_view(CoreSettings(lock_duration=30_000), 0, token_seed=seed), store)


def test_a_row_another_core_locked_under_this_ones_claim_comes_back_when_that_lock_lapses() -> None:
    store = PartitionStore()
    a, b = _node(store, 1), _node(store, 2)
    a.run(Send((draft("m"),), "s"))
    a.drain()
    b.run(Arrived(1))  # b reads the row into its window: ready there too
    b.drain()
    assert b.view.window.order == [1]
    a.run(Receive("ca", 1))
    assert [type(r) for r in a.drain()] == [Delivered]  # a holds the lock until 30,000, then dies
    b.run(Receive("cb", 1))
    assert [r for r in b.drain() if isinstance(r, Delivered)] == []  # the store did not give it
    assert b.next_due == 30_000  # b read again and found it locked until then
    b.at(30_000)
    b.run(Tick())
    (delivered,) = [r for r in b.drain() if isinstance(r, Delivered)]
    assert delivered.message.sequence_number == 1
    assert store.rows[1].record.delivery_count == 2
