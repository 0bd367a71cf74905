"""The store operations the pure partition core emits, and the store's answers. Data only.

These are the store port v2 operations (``docs/store-port.md``, issue 14 item 1) as the partition core
(``model/partition_core.py``) speaks them. They live in ``model`` because the layer contract puts
``sodalite.store`` above ``sodalite.model``: the model may not import the store. Each class maps
1:1 onto the port operation of the same name; the differences are only what the core cannot or
need not know:

- no ``ref``: a core decides for one partition, and the caller adds its ``PartitionRef``;
- the dead-letter target is a flag (``to_dead_letter``): the caller names the entity's
  ``$deadletterqueue`` partition; another target (a move into another queue) is named by
  (entity path, partition), which the caller makes a ``PartitionRef``;
- annotations are an :class:`AnnotationEdit` (the row's current annotations and tail plus what to
  set): encoding AMQP is the server's business, so the caller encodes the edit into the port's
  ``annotations`` bytes and ``annotation_count`` and, for a dead-letter reason, a new ``tail``.

Results mirror the port's results one per operation, in order.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Hashable
from dataclasses import dataclass

from sodalite.model.message import MessageRecord, MessageState


class Outcome(enum.Enum):
    """How a :class:`SettleItem` ends a locked message's delivery."""

    COMPLETE = "complete"  # delete the message
    ABANDON = "abandon"  # clear the lock; the delivery still counts
    RELEASE = "release"  # clear the lock and give the delivery back (count - 1, not below 0)
    DEFER = "defer"  # clear the lock; the message becomes DEFERRED
    DEAD_LETTER = "dead_letter"  # delete here, append to ``dead_letter_to`` (its own number, or a new one)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored message with its lock as the store holds it now.

    ``record.delivery_count`` is the count as stored (a claim has already incremented it). The lock
    fields are all None when the message was never claimed or its lock was cleared; a lapsed lock
    (``locked_until <= now``) may still be shown here, and is as good as no lock.
    """

    record: MessageRecord
    lock_token: uuid.UUID | None = None
    locked_until: int | None = None
    lock_owner: str | None = None

    def locked_at(self, now: int) -> bool:
        return self.lock_token is not None and self.locked_until is not None and self.locked_until > now


@dataclass(frozen=True, slots=True)
class AnnotationEdit:
    """What to write over a row: ``base`` (the row's encoded client annotations, ``base_count``
    entries), ``properties`` to set (properties-to-modify, opaque to the core) and, when given, the
    dead-letter reason and description the service or the client set. Service Bus carries all of
    them as application properties, which live in the row's tail: ``base_tail`` is that tail as the
    core read it, for the caller to write them into (an edit that sets any and has no ``base_tail``
    cannot be written)."""

    base: bytes
    base_count: int
    properties: tuple[tuple[str, object], ...] = ()
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    base_tail: bytes | None = None
    dead_letter_source: str | None = None  # written as x-opt-deadletter-source (a forwarded dead letter)


@dataclass(frozen=True, slots=True)
class Gate:
    """Which of an append's messages this core's :class:`ClaimMessageIds` of the same batch
    (``claim``) must have taken: per message, the MessageId its send was checked under (None:
    stored whatever). A topic's copy is checked under the sent message's id, which a rule action may
    have changed in the copy."""

    claim: uuid.UUID
    message_ids: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class Append:
    """Store ``messages``; the store numbers them (their own ``sequence_number`` is ignored). With a
    ``gate``, a message whose id the claim did not take is skipped: its number is 0."""

    messages: tuple[MessageRecord, ...]
    gate: Gate | None = None


@dataclass(frozen=True, slots=True)
class AppendTo:
    """Store ``messages`` in another partition, numbered there: a topic's copies for its
    subscriptions, in the topic's transaction. ``target`` is the caller's name for that partition
    (the server's ``PartitionRef``), opaque here. Answered by :class:`Appended`."""

    target: Hashable
    messages: tuple[MessageRecord, ...]
    gate: Gate | None = None  # as :attr:`Append.gate` (the history is this core's: the topic's)
    # The partition whose counter numbers them (the caller's name; None: ``target``'s own): a
    # subscription's dead-letter queue is numbered by the subscription (the port's ``numbered_by``).
    numbered_by: Hashable | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """Lock up to ``len(tokens)`` rows of ``state`` not locked and not expired at ``now``, in
    sequence-number order (only ``sequence_numbers`` when given); the i-th row taken gets ``tokens[i]``."""

    now: int
    locked_until: int
    owner: str
    tokens: tuple[uuid.UUID, ...]
    sequence_numbers: tuple[int, ...] | None = None
    state: MessageState = MessageState.ACTIVE
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class SettleItem:
    """One settlement. A DEAD_LETTER item goes to the entity's dead-letter queue, or, with ``target``
    (entity path, partition: ForwardDeadLetteredMessagesTo, a partition of the same store), there,
    with its delivery count reset if asked and the copy's ``enqueued_time`` (None: the row's) and
    ``expires_at`` (None: never) in the target."""

    sequence_number: int
    lock_token: uuid.UUID
    outcome: Outcome
    edit: AnnotationEdit | None = None
    target: tuple[str, int] | None = None
    reset_delivery_count: bool = False
    enqueued_time: int | None = None
    expires_at: int | None = None
    # Into the entity's own dead-letter queue: the message keeps its sequence number there.
    keep_sequence_number: bool = False
    # DEAD_LETTER that ends a delivery without counting it (a client's dead-lettering, or a claim that
    # found the deliveries used up): the copy keeps the count from before the claim (stored - 1, not
    # below 0), as a complete or a defer would. An abandon or a lapsed lock counts, and keeps it.
    give_back_delivery: bool = False


@dataclass(frozen=True, slots=True)
class Settle:
    """Settle locked rows, each fenced by its token and ``locked_until > now``; DEAD_LETTER goes to
    the entity's dead-letter queue. ``all_or_none``: an item that does not apply fails the whole
    batch, which then changes nothing (a transaction's settlements: the caller is told which item)."""

    now: int
    items: tuple[SettleItem, ...]
    all_or_none: bool = False


@dataclass(frozen=True, slots=True)
class RenewLocks:
    now: int
    locked_until: int
    items: tuple[tuple[int, uuid.UUID], ...]


@dataclass(frozen=True, slots=True)
class MoveItem:
    """One row to move: ``edit`` when the core writes a dead-letter reason (the caller encodes it),
    or, for a move the server prepared (resubmit, move into another queue), the copy's replacement
    ``annotations`` (with ``annotation_count``) and ``tail`` already encoded, each None to keep the
    row's, whether its delivery count starts again at 0, and its ``enqueued_time`` (None: the row's)
    and ``expires_at`` in the target (the port's :class:`MoveItem`)."""

    sequence_number: int
    edit: AnnotationEdit | None = None
    annotations: bytes | None = None
    annotation_count: int = 0
    tail: bytes | None = None
    reset_delivery_count: bool = False
    enqueued_time: int | None = None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class MoveMessages:
    """Delete rows not locked at ``now``; with ``to_dead_letter`` append them to the dead-letter queue,
    with ``target`` (entity path, partition: another partition of the same store) append them there."""

    now: int
    items: tuple[MoveItem, ...]
    to_dead_letter: bool
    target: tuple[str, int] | None = None
    keep_sequence_numbers: bool = False  # the rows keep their numbers in the target (a dead-letter queue)


@dataclass(frozen=True, slots=True)
class Activate:
    """Make up to ``limit`` SCHEDULED rows whose time has come ACTIVE (time, then number, order)."""

    now: int
    limit: int


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete every row numbered <= ``through_sequence_number``, in any state, except those locked at
    ``now`` (complete-through); answered by :class:`Purged`."""

    now: int
    through_sequence_number: int


@dataclass(frozen=True, slots=True)
class CancelScheduled:
    """Delete the SCHEDULED rows ``sequence_numbers``, all or none: if one of them is not a SCHEDULED
    row of this partition unlocked at ``now`` (never there, gone, activated, deferred, being taken),
    nothing changes and :class:`Unscheduled` names those. One operation, so the check and the delete
    are one store transaction (another node may activate or cancel the same rows)."""

    now: int
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RememberMessageIds:
    entries: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ForgetMessageIds:
    message_ids: tuple[str, ...]
    seen_before: int | None = None  # only entries seen before this time (another node may have taken one again)


@dataclass(frozen=True, slots=True)
class PruneMessageIds:
    """Drop every history entry seen before ``seen_before``, whoever took it (on a shared store this
    core's detector knows only the ids it took)."""

    seen_before: int


@dataclass(frozen=True, slots=True)
class ClaimMessageIds:
    """Duplicate detection by the store: each id not seen since ``now - window_ms`` is taken (seen at
    ``now``, marked ``claim``); the others are duplicates. Answered by :class:`IdsClaimed`."""

    now: int
    window_ms: int
    claim: uuid.UUID
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimSession:
    """Take the lock of session ``session_id`` unless someone holds it at ``now``; with None, the free
    session with the lowest-numbered ready message (nothing when there is none)."""

    now: int
    token: uuid.UUID
    locked_until: int
    owner: str
    session_id: str | None


@dataclass(frozen=True, slots=True)
class RenewSession:
    """Extend a session lock held with ``token`` and not lapsed at ``now``; answered by :class:`Renewed`."""

    now: int
    session_id: str
    token: uuid.UUID
    locked_until: int


@dataclass(frozen=True, slots=True)
class ReleaseSession:
    """Drop a session lock held with ``token``; answered by :class:`Renewed`."""

    session_id: str
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class PutSessionState:
    """Set a session's state (with the time it changed) or clear it (``state`` None); answered by :class:`Done`."""

    session_id: str
    state: bytes | None
    updated_at: int


@dataclass(frozen=True, slots=True)
class Restore:
    """Put rows back exactly as they were before a claim took them: each record under its own
    ``sequence_number`` (a number the partition gave it, so never a reuse), with its state,
    delivery count, times, annotations and tail, unlocked. A ReceiveAndDelete delivery whose
    delete committed but whose transfer was never written (its link, session or connection went
    away first) comes back in place this way. A number the partition holds already is left as
    it is. Answered by :class:`Restored`."""

    messages: tuple[MessageRecord, ...]


StoreOp = (Append | AppendTo | Claim | Settle | RenewLocks | MoveMessages | Activate | RememberMessageIds
           | ForgetMessageIds | PruneMessageIds | ClaimMessageIds | ClaimSession | RenewSession | ReleaseSession
           | PutSessionState | Purge | CancelScheduled | Restore)


@dataclass(frozen=True, slots=True)
class Appended:
    """The numbers :class:`Append` assigned, one per message, in order (0 for a message skipped as a
    duplicate: see :attr:`Append.gate`)."""

    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Claimed:
    """The rows a :class:`Claim` took, in sequence-number order, with their new lock and count."""

    messages: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class Settled:
    """Per :class:`SettleItem`, in order: True when it applied."""

    applied: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Renewed:
    """Per item, in order: True when the lock was held and is now renewed (or released)."""

    applied: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Moved:
    """Per :class:`MoveItem`: the number in the target (the old number when there is no target),
    or None when the message was gone or locked."""

    sequence_numbers: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Activated:
    """The activated messages, in order of scheduled time then sequence number, as now stored."""

    messages: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class SessionClaimed:
    """The session now locked by :class:`ClaimSession`, or None when it took nothing."""

    session_id: str | None


@dataclass(frozen=True, slots=True)
class Purged:
    """How many rows :class:`Purge` deleted (all states together: the port says no more)."""

    count: int


@dataclass(frozen=True, slots=True)
class Unscheduled:
    """The answer to :class:`CancelScheduled`: the numbers asked (each once, in the order asked) that
    were not SCHEDULED rows free to take. Empty: every row named was deleted; else nothing was."""

    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Restored:
    """Per message of :class:`Restore`, in order: True when it was put back (False: its number
    was held already)."""

    applied: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Done:
    """The result of an operation that returns nothing (every operation kept from the port's version 1)."""


@dataclass(frozen=True, slots=True)
class IdsClaimed:
    """Per id of :class:`ClaimMessageIds`, in order: True when it was taken (not a duplicate)."""

    fresh: tuple[bool, ...]


OpResult = (Appended | Claimed | Settled | Renewed | Moved | Activated | SessionClaimed | Done | Purged | IdsClaimed
            | Unscheduled | Restored)
