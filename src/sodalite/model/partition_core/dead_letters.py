"""Where a dead letter goes and what it carries: the entity's dead-letter queue (keeping its number),
or the target of ForwardDeadLetteredMessagesTo (a new message there). Pure functions of the view."""

from __future__ import annotations

import uuid
from dataclasses import replace

from sodalite.model.message import MessageRecord
from sodalite.model.partition import LAST_INSTANT_MS, MAX_TRANSFER_HOP_COUNT_EXCEEDED
from sodalite.model.partition_core.settings import DeadLetterForward
from sodalite.model.partition_core.view import View
from sodalite.model.store_ops import AnnotationEdit, MoveItem, Outcome, SettleItem


def forwarded(view: View, now: int, record: MessageRecord,
              edit: AnnotationEdit | None) -> tuple[AnnotationEdit | None, int | None] | None:
    """A dead letter's edit and expiry where ForwardDeadLetteredMessagesTo sends it (None: no
    forwarding, it goes to the dead-letter queue): it names its source, and expires by the
    time-to-live that applies in the target (the message's, capped by the target's default) counted
    from now; at the hop limit it takes that reason instead and never expires."""
    forward = view.settings.forward_dead_letters
    if forward is None:
        return None
    base = edit if edit is not None else AnnotationEdit(record.annotations, record.annotation_count,
                                                        base_tail=record.tail)
    if forward.hop_limit is not None:
        return replace(base, dead_letter_reason=MAX_TRANSFER_HOP_COUNT_EXCEEDED,
                       dead_letter_description=forward.hop_limit, dead_letter_source=forward.source), None
    return replace(base, dead_letter_source=forward.source), forwarded_expiry(forward, record.time_to_live, now)


def forwarded_expiry(forward: DeadLetterForward, time_to_live: int | None, now: int) -> int | None:
    """When a dead letter forwarded ``now`` expires in the target: the message's time-to-live capped
    by the target's default (None: never; at the hop limit, a transfer dead-letter queue: never;
    waiting for a relay: never, until the relay stores it in the target)."""
    if forward.hop_limit is not None or forward.relayed:
        return None
    cap = forward.default_ttl
    effective = cap if time_to_live is None else (time_to_live if cap is None else min(time_to_live, cap))
    return None if effective is None else min(now + effective, LAST_INSTANT_MS)


def dead_letter_settle(view: View, now: int, record: MessageRecord, token: uuid.UUID,
                       edit: AnnotationEdit | None, *, give_back: bool) -> SettleItem:
    """A locked message's dead-lettering: to the dead-letter queue, or forwarded (:func:`forwarded`)
    in the same fenced settle, arriving with its delivery count reset and enqueued now. ``give_back``:
    the delivery the claim counted does not count (the copy keeps the count from before it)."""
    moved = forwarded(view, now, record, edit)
    if moved is None:
        return SettleItem(record.sequence_number, token, Outcome.DEAD_LETTER, edit, keep_sequence_number=True,
                          give_back_delivery=give_back)
    forward = view.settings.forward_dead_letters
    assert forward is not None
    return SettleItem(record.sequence_number, token, Outcome.DEAD_LETTER, moved[0], forward.target,
                      reset_delivery_count=True, enqueued_time=now, expires_at=moved[1])


def dead_letter_move(view: View, now: int, record: MessageRecord, edit: AnnotationEdit) -> MoveItem:
    """An unlocked message's dead-lettering (expiry, MaxDeliveryCount): a ``MoveMessages`` item to the
    dead-letter queue, or to where ForwardDeadLetteredMessagesTo sends it (the batch picks the target)."""
    moved = forwarded(view, now, record, edit)
    if moved is None:
        return MoveItem(record.sequence_number, edit)
    return MoveItem(record.sequence_number, moved[0], reset_delivery_count=True, enqueued_time=now,
                    expires_at=moved[1])


def service_edit(record: MessageRecord, reason: str, description: str,
                 properties: tuple[tuple[str, object], ...] = ()) -> AnnotationEdit:
    """The edit of a dead-lettering the service decides (expiry, MaxDeliveryCount)."""
    return AnnotationEdit(record.annotations, record.annotation_count, properties, reason, description,
                          base_tail=record.tail)
