"""The pure partition core of a queue, sessions included: ``decide(view, command, now) -> Decision``.

Rules (docs/partition-core.md tells the why and each feature in full):

1. ``decide`` reads no clock and does no I/O. It updates the view in place and returns it with the
   store operations to apply as ONE batch (``batch_id``), at most one read, the replies to send now,
   and ``next_due``, when to be called again with :class:`Tick` (None: no timer).
2. The caller applies batches and runs reads one at a time, in the order decided (a decision's batch
   before its read), and feeds back :class:`StoreResults`, :class:`StoreFailed`, :class:`WindowRead`
   or :class:`CountsRead` in that order.
3. Durable before said: a reply that says something happened waits for the commit of the batch that
   makes it so (a send's numbers, a delivery's claim, a settlement, a renewal, a session lock).
4. A fenced operation the store refused is a reply (:class:`LockLost`, :class:`SessionLockLost`),
   never an exception. A failed batch changes nothing in the store: its requests are answered
   :class:`ServerBusy` and its messages are found again by the next read.
5. Memory is bounded, not the backlog: a window of the next ready messages (capped in bytes), the
   locks granted, the consumers' credit, duplicate history within its window, a bounded list of
   scheduled times, counts. The window is complete up to its cursor; claims name sequence numbers and
   the store fences them, so a stale window never delivers a message twice.
6. A message whose lock ended (abandon, release, lapse) or that came back is next in line by number.
   Expired or used-up messages are never handed out: dead-lettered or dropped where they are met.
7. Sessions: only the holder of a session gets its messages, in order; their locks ride on the
   session lock, which renews them and whose lapse ends them.
8. All-or-none operations (cancel scheduled, receive deferred by number, a transaction) change
   nothing unless every part applies.

Inside, one module per feature; each command has one handler, and each operation a batch carries
leaves a continuation that reads its own result and failure:

- ``commands``, ``replies``, ``settings``: the vocabulary; ``view``: the state, one sub-record per
  feature; ``turn``: what one call collects; ``decide``: the dispatch table and the batch.
- ``sending`` (send, schedule, publish, cancel, landed rows, unsent deliveries put back),
  ``window`` (reads, the window, claims), ``receivers`` (credit), ``settling`` (settle, renew,
  lapse), ``dead_letters`` (where a dead letter goes), ``deferral`` (receive by number),
  ``sessions`` (the sessions sub-machine), ``timers`` (what falls due), ``maintenance`` (settings
  updates, complete-through, moves out, counts read back), ``transactions``.
"""

from sodalite.model.partition_core.commands import (
    AcceptSession,
    Arrived,
    CancelScheduled,
    CloseConsumer,
    Command,
    CompleteThrough,
    CountsRead,
    DueInStore,
    GetSessionState,
    Landed,
    MoveOut,
    Publish,
    PublishCopy,
    PublishEntry,
    Receive,
    ReceiveDeferred,
    RefreshCounts,
    RenewLock,
    RenewSessionLock,
    Schedule,
    Send,
    SetSessionState,
    Settle,
    StoreAvailable,
    StoreFailed,
    StoreResults,
    StoreUnavailable,
    Tick,
    Touch,
    Transact,
    Unsent,
    UpdateSettings,
    WindowRead,
)
from sodalite.model.partition_core.dead_letters import forwarded_expiry
from sodalite.model.partition_core.decide import decide
from sodalite.model.partition_core.replies import (
    CompletedThrough,
    Decision,
    DeferredMessage,
    DeferredReceived,
    Delivered,
    IdleExpired,
    LockLost,
    LockRenewed,
    MessageNotFound,
    MovedOut,
    NoSessionAvailable,
    Published,
    ReadCounts,
    ReadWindow,
    Refused,
    Reply,
    ScheduledCancelled,
    SendAccepted,
    ServerBusy,
    SessionAccepted,
    SessionCannotBeLocked,
    SessionLockLost,
    SessionLost,
    SessionRenewed,
    SessionState,
    SessionStateSet,
    SettingsUpdated,
    SettlementDone,
)
from sodalite.model.partition_core.sending import record_for
from sodalite.model.partition_core.settings import Consumer, CoreSettings, DeadLetterForward, ReceiveMode, ReplyTo
from sodalite.model.partition_core.view import Counts, HeldLock, HeldSession, View, new_view

__all__ = [
    "AcceptSession",
    "Arrived",
    "CancelScheduled",
    "CloseConsumer",
    "Command",
    "CompleteThrough",
    "CompletedThrough",
    "Consumer",
    "CoreSettings",
    "Counts",
    "CountsRead",
    "DeadLetterForward",
    "Decision",
    "DeferredMessage",
    "DeferredReceived",
    "Delivered",
    "DueInStore",
    "GetSessionState",
    "HeldLock",
    "HeldSession",
    "IdleExpired",
    "Landed",
    "LockLost",
    "LockRenewed",
    "MessageNotFound",
    "MoveOut",
    "MovedOut",
    "NoSessionAvailable",
    "Publish",
    "PublishCopy",
    "PublishEntry",
    "Published",
    "ReadCounts",
    "ReadWindow",
    "Receive",
    "ReceiveDeferred",
    "ReceiveMode",
    "RefreshCounts",
    "Refused",
    "RenewLock",
    "RenewSessionLock",
    "Reply",
    "ReplyTo",
    "Schedule",
    "ScheduledCancelled",
    "Send",
    "SendAccepted",
    "ServerBusy",
    "SessionAccepted",
    "SessionCannotBeLocked",
    "SessionLockLost",
    "SessionLost",
    "SessionRenewed",
    "SessionState",
    "SessionStateSet",
    "SetSessionState",
    "SettingsUpdated",
    "Settle",
    "SettlementDone",
    "StoreAvailable",
    "StoreFailed",
    "StoreResults",
    "StoreUnavailable",
    "Tick",
    "Touch",
    "Transact",
    "Unsent",
    "UpdateSettings",
    "View",
    "WindowRead",
    "decide",
    "forwarded_expiry",
    "new_view",
    "record_for",
]
