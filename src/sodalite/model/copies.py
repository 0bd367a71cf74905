"""What a message becomes where it is shown or copied outside its own partition core. Pure functions.

Rules:

1. A receiver is shown the count of EARLIER deliveries: the store counted this delivery when it
   claimed the message, so the record it hands out is one ahead (:func:`as_delivered`); a message
   given back unseen (never written to its receiver) returns with that claim counted
   (:func:`with_claim_counted`).
2. A copy that enters another entity as a new message there (a move, a dead letter forwarded by
   ForwardDeadLetteredMessagesTo) starts its delivery count at 0, is enqueued now, and expires by
   the time-to-live that applies in the target: the message's own, capped by the target's default
   (:func:`capped_expiry`; neither: it never expires).
3. A forwarded dead letter is made by :func:`forwarded_copy`: rule 2, with the expiry
   ``forwarded_expiry`` gives (none at the hop limit or while it waits for a relay). A relay into
   another store makes its copy by :func:`relayed_copy`: active, unnumbered, counted afresh, and
   expiring as a direct forward at its dead-lettering would have (from its enqueued time).
4. An entity's dead-letter queues observe no time-to-live, never dead-letter, keep no duplicate
   history, and an abandon there does not raise the delivery count (:func:`sub_queue_settings`).
5. A lock can settle inside a transaction only while it is held, not being settled, and not
   lapsed (:func:`lock_usable`).
6. A topic's copy is stored with the lower of its destination's default time-to-live and the
   topic's (:func:`copy_default_ttl`; either may be unset); an entity without MaxDeliveryCount
   never dead-letters for deliveries (:data:`NEVER`).
"""

from __future__ import annotations

from dataclasses import replace

from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import LAST_INSTANT_MS
from sodalite.model.partition_core import CoreSettings, DeadLetterForward, HeldLock, forwarded_expiry

NEVER = 1 << 30  # a delivery count no message reaches: "never dead-letter for deliveries"


def as_delivered(record: MessageRecord) -> MessageRecord:
    """The record as a receiver is shown it (rule 1)."""
    if record.delivery_count <= 0:
        return record
    return replace(record, delivery_count=record.delivery_count - 1)


def with_claim_counted(record: MessageRecord) -> MessageRecord:
    """A message taken by a claim as the receiver was shown it, given back with the claim counted (rule 1)."""
    return record.with_delivery_count(record.delivery_count + 1)


def copy_default_ttl(target_default: int | None, topic_default: int | None) -> int | None:
    """The default time-to-live a topic's copy is stored with in its destination (rule 6)."""
    return topic_default if target_default is None else (
        target_default if topic_default is None else min(target_default, topic_default))


def capped_expiry(time_to_live: int | None, target_default: int | None, now: int) -> int | None:
    """When a copy made ``now`` expires in a target whose default time-to-live is ``target_default`` (rule 2)."""
    effective = target_default if time_to_live is None else (
        time_to_live if target_default is None else min(time_to_live, target_default))
    return None if effective is None else min(now + effective, LAST_INSTANT_MS)


def forwarded_copy(record: MessageRecord, annotations: bytes, annotation_count: int, forward: DeadLetterForward,
                   now: int) -> MessageRecord:
    """``record`` as a dead letter forwarded ``now`` to ``forward``'s target, carrying ``annotations``
    (with its ``x-opt-deadletter-source``, encoded by the caller) (rule 3)."""
    return replace(record, annotations=annotations, annotation_count=annotation_count, delivery_count=0,
                   enqueued_time=now, expires_at=forwarded_expiry(forward, record.time_to_live, now))


def relayed_copy(record: MessageRecord, forward: DeadLetterForward) -> MessageRecord:
    """A dead letter waiting for the relay, as it is appended in the target (rule 3)."""
    return replace(record, sequence_number=0, delivery_count=0, state=MessageState.ACTIVE,
                   expires_at=forwarded_expiry(forward, record.time_to_live, record.enqueued_time))


def sub_queue_settings(main: CoreSettings, dead_letter_queue: bool) -> CoreSettings:
    """The core's settings for one sub-queue of an entity whose own queue has ``main`` (rule 4);
    ForwardDeadLetteredMessagesTo applies to the entity's own queue only."""
    if not dead_letter_queue:
        return main
    return CoreSettings(lock_duration=main.lock_duration, default_ttl=None, max_delivery_count=NEVER,
                        dead_letter_on_expiration=False, owner=main.owner, abandon_counts=False)


def lock_usable(lock: HeldLock | None, now: int) -> bool:
    """Whether a lock can still settle in a transaction (rule 5)."""
    return lock is not None and not lock.settling and lock.locked_until > now
