"""A dead-lettered message keeps its sequence number in the dead-letter queue (as Service Bus and the
version-1 path keep it), with a fake clock against the memory store (tests/core_harness.py):
the core marks every dead-lettering into its own dead-letter queue (a client's, MaxDeliveryCount,
expiry) to keep the number, and not a dead letter forwarded elsewhere (ForwardDeadLetteredMessagesTo);
the dead-letter queue's own core, told ``Arrived``, delivers a kept number that lies below its
window's cursor, in number order."""

from __future__ import annotations

from core_harness import Harness, draft
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition_core import (
    Arrived,
    CoreSettings,
    DeadLetterForward,
    Delivered,
    Publish,
    PublishCopy,
    Published,
    PublishEntry,
    Receive,
    Send,
    SendAccepted,
    Settle,
    Tick,
    new_view,
)
from sodalite.model.store_ops import AppendTo, MoveMessages, Outcome, dead_letter_of
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000


def harness(**settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 2}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=5))  # type: ignore[arg-type]


def send(h: Harness, *drafts_: object) -> list[int]:
    replies = h.run(Send(tuple(drafts_), "s")) + h.drain()  # type: ignore[arg-type]
    return [n for r in replies if isinstance(r, SendAccepted) for n in r.sequence_numbers]


def receive(h: Harness, n: int = 1) -> list[Delivered]:
    return [r for r in h.run(Receive("c", n)) + h.drain() if isinstance(r, Delivered)]


def dead_letter(h: Harness, d: Delivered) -> None:
    assert d.lock_token is not None
    h.run(Settle(d.lock_token, Outcome.DEAD_LETTER, "t", (), "why", "because"))
    h.drain()


def test_every_dead_lettering_into_the_dead_letter_queue_keeps_the_number() -> None:
    h = harness(dead_letter_on_expiration=True)
    assert send(h, draft("client"), draft("abandoned"), draft("expires", ttl=1_000), draft("kept")) == [1, 2, 3, 4]
    first, second = receive(h, 2)
    dead_letter(h, first)
    assert second.lock_token is not None
    h.run(Settle(second.lock_token, Outcome.ABANDON, "t"))
    h.drain()
    (again,) = receive(h)  # the second delivery of message 2 (3 expires meanwhile: not yet)
    assert again.message.sequence_number == 2
    assert again.lock_token is not None
    h.run(Settle(again.lock_token, Outcome.ABANDON, "t"))  # MaxDeliveryCount reached: dead-lettered
    h.drain()
    h.at(2_000)
    h.run(Tick())  # 3 expired: moved to the dead-letter queue
    h.drain()
    assert sorted(h.store.dead) == [1, 2, 3]
    assert all(row.origin == number for number, row in h.store.dead.items())
    settles = [item for op in h.ops if isinstance(op, SettleOp) for item in op.items
               if item.outcome is Outcome.DEAD_LETTER]
    assert settles and all(item.keep_sequence_number for item in settles)
    moves = [op for op in h.ops if isinstance(op, MoveMessages) and op.to_dead_letter]
    assert moves and all(op.keep_sequence_numbers for op in moves)
    assert list(h.store.rows) == [4]


def test_a_forwarded_dead_letter_does_not_keep_its_number() -> None:
    h = harness(forward_dead_letters=DeadLetterForward(("elsewhere", 0), "src", None))
    send(h, draft("a"), draft("b"))
    (d,) = receive(h)
    dead_letter(h, d)
    (item,) = [item for op in h.ops if isinstance(op, SettleOp) for item in op.items]
    assert item.target == ("elsewhere", 0) and not item.keep_sequence_number
    assert h.store.dead == {}


def test_the_dead_letter_queue_delivers_a_kept_number_below_its_cursor_once_told_it_arrived() -> None:
    queue = harness()
    send(queue, *(draft(str(i)) for i in range(5)))
    held = {d.message.sequence_number: d for d in receive(queue, 5)}
    dead_letter(queue, held[4])
    # The dead-letter queue's own core reads the same rows the queue's dead-lettering wrote.
    dlq = Harness(harness(max_delivery_count=10).view, queue.store.other(dead_letter_of(queue.store.ref)))
    dlq.run(Arrived(1))
    dlq.drain()
    assert dlq.view.window.at_tail and dlq.view.window.cursor == 4 and list(dlq.view.window.records) == [4]
    # Message 2 is dead-lettered later: its number lies below the window's cursor.
    dead_letter(queue, held[2])
    assert sorted(queue.store.dead) == [2, 4]
    dlq.run(Arrived(1))
    dlq.drain()
    delivered = receive(dlq, 5)
    assert [d.message.sequence_number for d in delivered] == [2, 4]
    assert dlq.view.counts.active == 2


def test_a_fan_out_dead_letter_is_numbered_by_its_subscription() -> None:
    """A topic's copy planned into a subscription's dead-letter queue (a filter error) names the
    subscription's partition as ``numbered_by``: it takes the subscription's next number, so a message
    dead-lettered there later keeps its own without meeting it."""
    topic = Harness(new_view(CoreSettings(lock_duration=LOCK), 0, token_seed=3))
    body = MessageRecord(0, 0, None, None, None, None, None, None, 0, MessageState.ACTIVE, None, None, b"", 0, b"x")
    replies = topic.run(Publish((
        PublishEntry("m1", (PublishCopy("sub", body),)),
        PublishEntry("m2", (PublishCopy("sub/$deadletterqueue", body, numbered_by="sub"),)),
        PublishEntry("m3", (PublishCopy("sub", body),)),
    ), "p")) + topic.drain()
    assert any(isinstance(r, Published) for r in replies)
    (dead_append,) = [op for op in topic.ops if isinstance(op, AppendTo) and op.target == "sub/$deadletterqueue"]
    assert dead_append.numbered_by == "sub"
    # One append per partition: the subscription's two copies, then the dead letter, numbered after them.
    assert sorted(topic.store.other("sub").rows) == [1, 2]
    assert sorted(topic.store.other("sub/$deadletterqueue").rows) == [3]
    assert topic.store.other("sub").last == 3  # the subscription never gives 3 again
