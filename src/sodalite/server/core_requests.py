"""Requests to a partition core, typed by the answer they wait for.

Rules:

1. A request is the future its caller awaits, of one class per kind of answer (:data:`Request`):
   it goes to the core as the command's ``reply_to`` and comes back, unchanged, in the reply that
   answers it. So a reply resolves its own request with the value its class promises, statically
   typed, with nothing allocated besides the future itself. The actor keeps the requests still
   waiting (:class:`Pending`) only to fail them when it closes.
2. An answer reaches a request only if it is of the class the answer is for (:func:`answer`);
   anything else the core hands back as ``reply_to`` (its own settlements, a release nobody waits
   for) is no request and is left alone. A request answered (or cancelled by its caller) stays so.
3. The core's refusals are data (replies); :func:`refusal` turns each into the error the client
   hears, with the Service Bus condition the error carries.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Hashable
from typing import TypeVar

from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    OperationTimeout,
    SessionCannotBeLocked,
    SessionLockLost,
    SodaliteError,
    StoreFull,
    StoreUnavailable,
)
from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord

T = TypeVar("T")

Taken = tuple[MessageRecord, uuid.UUID | None, int | None]
"""A message received by number: its record, its lock token (None: deleted), locked until."""


class Done(asyncio.Future[None]):
    """Answered once what was asked is durable: a send, a settlement, a publish, a session state set,
    a transaction, a cancel of scheduled messages, a settings update."""

    __slots__ = ()


class Numbers(asyncio.Future[list[int]]):
    """Answered with the sequence numbers a schedule gave its messages."""

    __slots__ = ()


class Until(asyncio.Future[int]):
    """Answered with when a renewed lock (a message's or a session's) ends, in ms since the epoch."""

    __slots__ = ()


class Count(asyncio.Future[int]):
    """Answered with how many messages a complete-through removed."""

    __slots__ = ()


class Granted(asyncio.Future[tuple[str, int]]):
    """Answered with the session granted and when its lock ends."""

    __slots__ = ()


class StateRead(asyncio.Future[bytes | None]):
    """Answered with a session's state (None: it has none)."""

    __slots__ = ()


class Received(asyncio.Future[list[Taken]]):
    """Answered with the deferred messages received by number."""

    __slots__ = ()


class MovedOut(asyncio.Future[tuple[int | None, ...]]):
    """Answered, per item of a move out, with its number in the target (or its own, deleted) or None."""

    __slots__ = ()


Request = Done | Numbers | Until | Count | Granted | StateRead | Received | MovedOut


R = TypeVar("R", bound=Request)


class Pending:
    """The requests an actor sent to its cores and has not heard answered (rules 1 and 2)."""

    __slots__ = ("_requests",)

    def __init__(self) -> None:
        self._requests: set[Hashable] = set()

    def __bool__(self) -> bool:
        return bool(self._requests)

    def add(self, request: R) -> R:
        self._requests.add(request)
        return request

    def answer(self, reply_to: Hashable, kind: type[asyncio.Future[T]], value: T) -> None:
        """Resolve ``reply_to`` with ``value`` if it is a request of ``kind`` still waiting."""
        if isinstance(reply_to, kind):
            self._requests.discard(reply_to)
            if not reply_to.done():
                reply_to.set_result(value)

    def fail(self, reply_to: Hashable, error: BaseException) -> None:
        """Fail ``reply_to`` with ``error`` if it is a request still waiting."""
        if isinstance(reply_to, asyncio.Future):
            self._requests.discard(reply_to)
            if not reply_to.done():
                reply_to.set_exception(error)

    def fail_all(self, error: BaseException) -> None:
        for request in list(self._requests):
            self.fail(request, error)


Refusal = (core.LockLost | core.ServerBusy | core.Refused | core.SessionCannotBeLocked | core.NoSessionAvailable
           | core.SessionLockLost | core.MessageNotFound)
"""The core's replies that refuse a request."""


def refusal(reply: Refusal, store: str, store_full: bool) -> SodaliteError:
    """The error ``reply`` is for the client (rule 3). ``store`` names the messaging store;
    ``store_full``: it refused a batch for lack of disk space."""
    match reply:
        case core.LockLost():
            return MessageLockLost(LOCK_SUPPLIED_INVALID)
        case core.ServerBusy():
            # A batch the store refused for lack of disk space made the worker full before this
            # answer: the sender hears it as the quota error, not as a retryable busy.
            if store_full:
                return StoreFull(f"the messaging store '{store}' is full: new messages are refused until space "
                                 "is freed (receiving and settling go on)")
            return StoreUnavailable(f"the messaging store '{store}' did not take the request; retry shortly")
        case core.Refused():
            return InvalidOperation(reply.reason)
        case core.SessionCannotBeLocked():
            return SessionCannotBeLocked(f"the session '{reply.session_id}' is locked by another receiver")
        case core.NoSessionAvailable():
            return OperationTimeout("no session became available in time")
        case core.SessionLockLost():
            return SessionLockLost(f"the lock on session '{reply.session_id}' was lost")
    # MessageNotFound: Service Bus's words for a cancel of an unknown number (Azure/azure-service-bus#239)
    missing = ", ".join(str(n) for n in reply.sequence_numbers)
    return MessageNotFound(f"Messages not found. Missing sequence numbers: {missing} "
                           "(no deferred or scheduled message free to take has them; nothing was done)")
