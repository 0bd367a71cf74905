"""A consumer with a selector (JMS) in the pure partition core: it is given only the window messages it
selects, in order; the others stay, in order, for consumers without one; expired messages still leave."""

from __future__ import annotations

from core_harness import Harness, draft
from sodalite.model.message import MessageRecord
from sodalite.model.partition_core import CoreSettings, Delivered, Receive, Send, SendAccepted, new_view


def harness() -> Harness:
    return Harness(new_view(CoreSettings(lock_duration=30_000, max_delivery_count=3), 0, token_seed=7))


def send(h: Harness, *message_ids: str, ttl: int | None = None) -> list[int]:
    replies = h.run(Send(tuple(draft(m, ttl=ttl) for m in message_ids), "s")) + h.drain()
    return [n for r in replies if isinstance(r, SendAccepted) for n in r.sequence_numbers]


def received(h: Harness, command: Receive) -> list[str | None]:
    return [r.message.message_id for r in h.run(command) + h.drain() if isinstance(r, Delivered)]


def red(record: MessageRecord) -> bool:
    return (record.message_id or "").startswith("red")


def test_a_selector_takes_what_it_selects_and_leaves_the_rest_in_order() -> None:
    h = harness()
    send(h, "red-1", "blue-1", "red-2", "blue-2")
    assert received(h, Receive("reds", 3, selects=red)) == ["red-1", "red-2"]  # one credit left
    assert received(h, Receive("all", 10)) == ["blue-1", "blue-2"]
    # New messages: each goes to the consumer that may take it.
    replies = h.run(Send((draft("blue-3"), draft("red-4")), "s")) + h.drain()
    given = {(r.consumer, r.message.message_id) for r in replies if isinstance(r, Delivered)}
    assert given == {("all", "blue-3"), ("reds", "red-4")}


def test_a_selector_that_selects_nothing_takes_nothing() -> None:
    h = harness()
    send(h, "blue-1", "blue-2")
    assert received(h, Receive("reds", 5, selects=red)) == []
    assert received(h, Receive("all", 5)) == ["blue-1", "blue-2"]


def test_an_expired_message_leaves_when_a_selector_meets_it() -> None:
    h = harness()
    send(h, "red-old", ttl=1_000)
    send(h, "red-new")
    h.now += 5_000
    assert received(h, Receive("reds", 5, selects=red)) == ["red-new"]
    assert received(h, Receive("all", 5)) == []
