"""From the partition core's store operations (``model/store_ops.py``) to the port's (``store/port.py``).

The shapes match 1:1 (``model/store_ops.py`` says why they are two modules); what the mapping adds
is only what the core does not know:

- the :class:`~sodalite.store.port.PartitionRef` of the partition it decides for, on every op (an
  ``AppendTo`` names its own: a topic's copies for a subscription);
- the dead-letter partition a ``Settle`` DEAD_LETTER item or a ``MoveMessages(to_dead_letter=True)``
  goes to (the caller names the entity's ``$deadletterqueue`` partition), and the ``PartitionRef``
  of a ``MoveMessages`` target or a ``Settle`` item's target (ForwardDeadLetteredMessagesTo) named
  (entity, partition);
- the annotations and, for a dead-letter reason, the tail of an
  :class:`~sodalite.model.store_ops.AnnotationEdit`, encoded by ``encode_edit`` (encoding AMQP is
  the server's business; this layer may not import the AMQP codec).

Results need no mapping: the port's result classes are the model's (``port.Appended is
store_ops.Appended``, and so on), except ``Purged``, which the port defines for itself (its v1
callers use it): :func:`to_core_result` turns the port's into the model's.
"""

from __future__ import annotations

from collections.abc import Callable

from sodalite.model import store_ops as core
from sodalite.store import port

EditEncoder = Callable[[core.AnnotationEdit], tuple[bytes, int, bytes | None]]
"""An edit as the port stores it: (encoded annotation map entries, entry count, the new tail or None
to keep the row's)."""


def to_port_op(op: core.StoreOp, ref: port.PartitionRef, dead_letter: port.PartitionRef,
               encode_edit: EditEncoder) -> port.StoreOp:
    """The port operation for the core's ``op`` on partition ``ref``."""

    def encoded(edit: core.AnnotationEdit | None) -> tuple[bytes | None, int, bytes | None]:
        return (None, 0, None) if edit is None else encode_edit(edit)

    def gate(dedup: core.Gate | None) -> port.DedupGate | None:  # the history is the core's own
        return None if dedup is None else port.DedupGate(ref, dedup.claim, dedup.message_ids)

    match op:
        case core.Append():
            return port.Append(ref, op.messages, gate(op.gate))
        case core.AppendTo():
            if not isinstance(op.target, port.PartitionRef):
                raise TypeError(f"an AppendTo names its partition by a PartitionRef, not {op.target!r}")
            if op.numbered_by is not None and not isinstance(op.numbered_by, port.PartitionRef):
                raise TypeError(f"an AppendTo names its numbering partition by a PartitionRef, not {op.numbered_by!r}")
            return port.Append(op.target, op.messages, gate(op.gate), op.numbered_by)
        case core.Claim():
            return port.Claim(ref, op.now, op.locked_until, op.owner, op.tokens, session_id=op.session_id,
                              sequence_numbers=op.sequence_numbers, state=op.state)
        case core.Settle():
            items = []
            for item in op.items:
                annotations, count, tail = encoded(item.edit)
                to = dead_letter if item.target is None else port.PartitionRef(*item.target)
                items.append(port.SettleItem(
                    item.sequence_number, item.lock_token, item.outcome, annotations, count,
                    to if item.outcome is core.Outcome.DEAD_LETTER else None, tail,
                    item.reset_delivery_count, item.enqueued_time, item.expires_at, item.keep_sequence_number,
                    item.give_back_delivery))
            return port.Settle(ref, op.now, tuple(items), op.all_or_none)
        case core.RenewLocks():
            return port.RenewLocks(ref, op.now, op.locked_until, op.items)
        case core.MoveMessages():
            moves = []
            for move in op.items:
                if move.edit is not None:
                    annotations, count, tail = encoded(move.edit)
                else:
                    annotations, count, tail = move.annotations, move.annotation_count, move.tail
                moves.append(port.MoveItem(move.sequence_number, annotations, count, move.reset_delivery_count, tail,
                                           move.enqueued_time, move.expires_at))
            if op.to_dead_letter and op.target is not None:
                raise ValueError("a move goes to the dead-letter queue or to a target, not both")
            target = dead_letter if op.to_dead_letter else None if op.target is None else port.PartitionRef(*op.target)
            return port.MoveMessages(ref, op.now, tuple(moves), target, op.keep_sequence_numbers)
        case core.Activate():
            return port.Activate(ref, op.now, op.limit)
        case core.RememberMessageIds():
            return port.RememberMessageIds(ref, op.entries)
        case core.ForgetMessageIds():
            return port.ForgetMessageIds(ref, op.message_ids, op.seen_before)
        case core.PruneMessageIds():
            return port.PruneMessageIds(ref, op.seen_before)
        case core.ClaimMessageIds():
            return port.ClaimMessageIds(ref, op.now, op.window_ms, op.claim, op.message_ids)
        case core.ClaimSession():
            return port.ClaimSession(ref, op.now, op.token, op.locked_until, op.owner, op.session_id)
        case core.RenewSession():
            return port.RenewSession(ref, op.now, op.session_id, op.token, op.locked_until)
        case core.ReleaseSession():
            return port.ReleaseSession(ref, op.session_id, op.token)
        case core.PutSessionState():
            return port.PutSessionState(ref, op.session_id, op.state, op.updated_at)
        case core.Purge():
            return port.Purge(ref, op.now, op.through_sequence_number)
        case core.CancelScheduled():
            return port.CancelScheduled(ref, op.now, op.sequence_numbers)
        case core.Restore():
            return port.Restore(ref, op.messages)


def to_core_result(result: port.OpResult) -> core.OpResult:
    """The port's result as the core reads it (only ``Purged`` is a class of its own in the port)."""
    if isinstance(result, port.Purged):
        return core.Purged(result.count)
    if isinstance(result, port.IdleDeleted | port.RuleWritten):
        raise TypeError("DeleteIdleEntity and rule operations are the broker's, never a core's")
    return result
