"""model/copies.py: what a message becomes where it is shown or copied outside its partition core."""

from __future__ import annotations

import uuid

from sodalite.model.copies import (
    NEVER,
    as_delivered,
    capped_expiry,
    copy_default_ttl,
    forwarded_copy,
    lock_usable,
    relayed_copy,
    sub_queue_settings,
    with_claim_counted,
)
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import LAST_INSTANT_MS
from sodalite.model.partition_core import CoreSettings, DeadLetterForward, HeldLock


def record(*, delivery_count: int = 0, ttl: int | None = None, enqueued: int = 1_000,
           state: MessageState = MessageState.ACTIVE) -> MessageRecord:
    return MessageRecord(7, enqueued, "m", None, None, ttl, None, None, delivery_count, state, None, None, b"", 0, b"t")


def test_a_receiver_is_shown_the_count_of_earlier_deliveries() -> None:
    assert as_delivered(record(delivery_count=3)).delivery_count == 2
    assert as_delivered(record(delivery_count=0)).delivery_count == 0


def test_a_copy_expires_by_its_own_time_to_live_capped_by_the_targets_default() -> None:
    assert capped_expiry(None, None, 100) is None
    assert capped_expiry(50, None, 100) == 150
    assert capped_expiry(None, 30, 100) == 130
    assert capped_expiry(50, 30, 100) == 130
    assert capped_expiry(10, 30, 100) == 110
    assert capped_expiry(LAST_INSTANT_MS, None, 100) == LAST_INSTANT_MS


def test_a_forwarded_dead_letter_starts_afresh_in_the_target() -> None:
    forward = DeadLetterForward(("target", 0), "source", default_ttl=60)
    copy = forwarded_copy(record(delivery_count=4, ttl=100), b"\x01", 1, forward, 5_000)
    assert (copy.delivery_count, copy.enqueued_time, copy.expires_at) == (0, 5_000, 5_060)
    assert (copy.annotations, copy.annotation_count) == (b"\x01", 1)
    at_hop_limit = DeadLetterForward(("target$Transfer/$DeadLetterQueue", 0), "source", 60, hop_limit="chain")
    assert forwarded_copy(record(ttl=100), b"", 0, at_hop_limit, 5_000).expires_at is None


def test_a_relayed_dead_letter_expires_from_its_dead_lettering_not_from_the_relay() -> None:
    forward = DeadLetterForward(("", 0), "source", default_ttl=60)
    copy = relayed_copy(record(delivery_count=2, ttl=100, enqueued=9_000, state=MessageState.DEFERRED), forward)
    assert (copy.sequence_number, copy.delivery_count, copy.state, copy.expires_at) == (
        0, 0, MessageState.ACTIVE, 9_060)


def test_a_dead_letter_queue_keeps_no_time_to_live_no_dead_lettering_and_no_duplicate_history() -> None:
    main = CoreSettings(lock_duration=30_000, default_ttl=1_000, max_delivery_count=3, dead_letter_on_expiration=True,
                        duplicate_window=60_000, requires_session=True, owner="n1", shared_store=True,
                        forward_dead_letters=DeadLetterForward(("t", 0), "s"))
    assert sub_queue_settings(main, dead_letter_queue=False) is main
    dlq = sub_queue_settings(main, dead_letter_queue=True)
    assert (dlq.lock_duration, dlq.owner) == (30_000, "n1")
    assert dlq.default_ttl is None and dlq.duplicate_window is None and dlq.forward_dead_letters is None
    assert not dlq.dead_letter_on_expiration and not dlq.abandon_counts and not dlq.requires_session
    assert dlq.max_delivery_count >= 1 << 30


def test_a_lock_settles_in_a_transaction_only_while_held_unsettled_and_live() -> None:
    token = uuid.uuid4()
    held = HeldLock(token, record(), 2_000, "receiver", MessageState.ACTIVE)
    assert lock_usable(held, 1_999)
    assert not lock_usable(held, 2_000)
    assert not lock_usable(None, 0)
    assert not lock_usable(HeldLock(token, record(), 2_000, "receiver", MessageState.ACTIVE, settling=True), 0)


def test_a_message_given_back_unseen_returns_with_its_claim_counted() -> None:
    shown = as_delivered(record(delivery_count=3))
    assert with_claim_counted(shown).delivery_count == 3
    assert with_claim_counted(record(delivery_count=0)).delivery_count == 1


def test_a_topics_copy_takes_the_lower_default_time_to_live() -> None:
    assert copy_default_ttl(None, None) is None
    assert copy_default_ttl(5_000, None) == 5_000
    assert copy_default_ttl(None, 7_000) == 7_000
    assert copy_default_ttl(5_000, 7_000) == 5_000
    assert copy_default_ttl(9_000, 7_000) == 7_000
    assert NEVER >= 1 << 30
