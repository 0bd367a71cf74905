"""What :func:`~sodalite.model.partition_core.decide` answers: replies to send, reads to run, the decision."""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sodalite.model.message import MessageRecord
from sodalite.model.partition_core.settings import Consumer, ReplyTo
from sodalite.model.store_ops import Outcome, StoreOp

if TYPE_CHECKING:
    from sodalite.model.partition_core.view import View


@dataclass(frozen=True, slots=True)
class Answer:
    """A reply to one request: ``reply_to`` is the command's, handed back unchanged."""

    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class LockAnswer(Answer):
    """An answer about the message lock ``token``."""

    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class SessionAnswer(Answer):
    """An answer about the session ``session_id``."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """Hand ``message`` to ``consumer``; ``lock_token`` None for ReceiveAndDelete."""

    consumer: Consumer
    message: MessageRecord
    lock_token: uuid.UUID | None
    locked_until: int | None


@dataclass(frozen=True, slots=True)
class SendAccepted(Answer):
    """The send (or schedule) is durable; ``sequence_numbers`` of the messages stored (no duplicate
    or ping has one)."""

    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Published(Answer):
    """A :class:`Publish` is durable: per target, its copies as the store numbered them
    (duplicates left out; empty when nothing was stored)."""

    stored: tuple[tuple[Hashable, tuple[MessageRecord, ...]], ...]


@dataclass(frozen=True, slots=True)
class SettlementDone(LockAnswer):
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class LockLost(LockAnswer):
    """The lock ``token`` is not held (it lapsed, was ended or was never this core's): nothing of the
    request happened (com.microsoft:message-lock-lost)."""


@dataclass(frozen=True, slots=True)
class LockRenewed(LockAnswer):
    locked_until: int


@dataclass(frozen=True, slots=True)
class ScheduledCancelled(Answer):
    sequence_numbers: tuple[int, ...]  # every number asked, each once: all were scheduled and are now gone


@dataclass(frozen=True, slots=True)
class ServerBusy(Answer):
    """The store is unavailable or the batch failed: nothing of this request happened."""


@dataclass(frozen=True, slots=True)
class SettingsUpdated(Answer):
    """An :class:`UpdateSettings` is in force; ``dropped`` are the lock tokens it ended (their release
    committed, or, if its batch failed or the store was down, unusable until they lapse at their time)."""

    dropped: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class IdleExpired:
    """AutoDeleteOnIdle came: the caller deletes the entity."""


@dataclass(frozen=True, slots=True)
class Refused(Answer):
    """The request is not valid here (InvalidOperation): nothing of it happened."""

    reason: str


@dataclass(frozen=True, slots=True)
class SessionAccepted(Answer):
    """``consumer`` holds ``session_id`` until ``locked_until`` (the lock is durable)."""

    consumer: Consumer
    session_id: str
    locked_until: int


@dataclass(frozen=True, slots=True)
class SessionCannotBeLocked(SessionAnswer):
    """The named session is locked by another receiver (com.microsoft:session-cannot-be-locked)."""


@dataclass(frozen=True, slots=True)
class NoSessionAvailable(Answer):
    """No session with a ready message came before ``wait_until`` (com.microsoft:timeout)."""


@dataclass(frozen=True, slots=True)
class SessionLockLost(SessionAnswer):
    """A request needed a session lock that is not held (com.microsoft:session-lock-lost); ``token``
    names the message of a refused settlement."""

    token: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class SessionLost:
    """``consumer`` lost its session (the lock lapsed or the store refused a renewal): the caller
    detaches it with com.microsoft:session-lock-lost."""

    consumer: Consumer
    session_id: str


@dataclass(frozen=True, slots=True)
class SessionRenewed(SessionAnswer):
    locked_until: int


@dataclass(frozen=True, slots=True)
class SessionState(SessionAnswer):
    state: bytes | None


@dataclass(frozen=True, slots=True)
class SessionStateSet(SessionAnswer):
    """The new state is durable."""


@dataclass(frozen=True, slots=True)
class DeferredMessage:
    """One message of a :class:`DeferredReceived`: PeekLock gives its lock (``lock_token``,
    ``locked_until``), ReceiveAndDelete None for both (it is deleted already)."""

    message: MessageRecord
    lock_token: uuid.UUID | None
    locked_until: int | None


@dataclass(frozen=True, slots=True)
class DeferredReceived(Answer):
    """The answer to :class:`ReceiveDeferred`, in the order asked (each number once): the locks are
    durable (PeekLock), or the messages are deleted (ReceiveAndDelete)."""

    messages: tuple[DeferredMessage, ...]


@dataclass(frozen=True, slots=True)
class MessageNotFound(Answer):
    """``sequence_numbers`` name no deferred message that is free to take (gone, not deferred, or
    locked): nothing of the :class:`ReceiveDeferred` happened (com.microsoft:message-not-found). Also
    the answer to a :class:`CancelScheduled` naming a number that is not a scheduled message free to
    take (below 1, as a scheduled ping's 0; unknown, gone, activated, deferred): nothing of it happened."""

    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CompletedThrough(Answer):
    """The :class:`CompleteThrough` is durable: ``count`` messages went (all states together)."""

    count: int


@dataclass(frozen=True, slots=True)
class MovedOut(Answer):
    """The :class:`MoveOut` is durable: per item, in order, the message's number in the target (its
    old number when deleted), or None when it was not taken (gone, locked, or named twice)."""

    sequence_numbers: tuple[int | None, ...]


Reply = (Delivered | SendAccepted | SettlementDone | LockLost | LockRenewed | ScheduledCancelled | ServerBusy
         | IdleExpired | Refused | SessionAccepted | SessionCannotBeLocked | NoSessionAvailable | SessionLockLost
         | SessionLost | SessionRenewed | SessionState | SessionStateSet
         | DeferredReceived | MessageNotFound | CompletedThrough | Published | MovedOut | SettingsUpdated)


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """Read ``count`` ACTIVE rows numbered from ``from_sequence_number`` on and answer with WindowRead."""

    from_sequence_number: int
    count: int


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """Read the partition's counters (``store.counts(ref)``) and answer with :class:`CountsRead`. Asked
    for after a :class:`~sodalite.model.store_ops.Purge` committed: its result is one total, so the
    counts per state are read back (the read runs after every batch decided before it, and its
    answer comes before any decided after it, so it replaces the view's counts exactly)."""


@dataclass(frozen=True, slots=True)
class Decision:
    view: View
    store_ops: tuple[StoreOp, ...]
    batch_id: int | None  # names store_ops in StoreResults / StoreFailed; None when there are none
    read: ReadWindow | ReadCounts | None  # at most one read
    replies: tuple[Reply, ...]
    next_due: int | None
