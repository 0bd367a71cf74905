"""The one exception hierarchy of Sodalite.

Every error a client can see is a subclass of :class:`SodaliteError`. Each class states, as data,
the AMQP condition it is reported with, the HTTP status the management plane uses, and whether a
client may retry. Layers raise these; only the edges (the AMQP server, the HTTP admin API)
translate them into wire errors. The conditions are the ones the official ``azure-servicebus`` SDK
maps to its exception classes (sdk-wire-contract.md section 9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class SodaliteError(Exception):
    """Base of every error a client can see. A subclass gives its row of the error table in its class
    line (``class X(Base, condition=..., http_status=..., retryable=...)``); what it leaves out it
    inherits from its base."""

    condition: ClassVar[str] = "amqp:internal-error"
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = True

    def __init_subclass__(cls, *, condition: str | None = None, http_status: int | None = None,
                          retryable: bool | None = None) -> None:
        super().__init_subclass__()
        for name, value in (("condition", condition), ("http_status", http_status), ("retryable", retryable)):
            if value is not None:
                setattr(cls, name, value)

    def __init__(self, description: str = "") -> None:
        super().__init__(description)
        self.description = description or self.__class__.__doc__ or self.condition


class EntityNotFound(SodaliteError, condition="amqp:not-found", http_status=404, retryable=False):
    """The messaging entity does not exist."""


class EntityAlreadyExists(SodaliteError, condition="com.microsoft:entity-already-exists", http_status=409,
                          retryable=True):
    """An entity (or rule) of that name already exists."""


class Unauthorized(SodaliteError, condition="amqp:unauthorized-access", http_status=401, retryable=False):
    """The token is missing, invalid, expired or does not cover the entity."""


class Forbidden(Unauthorized, http_status=403):
    """The token is valid but lacks the right the operation needs (HTTP faces answer 403)."""


class MessageSizeExceeded(SodaliteError, condition="amqp:link:message-size-exceeded", http_status=413, retryable=False):
    """The message is larger than the entity allows."""


class QuotaExceeded(SodaliteError, condition="amqp:resource-limit-exceeded", http_status=403, retryable=False):
    """An entity or namespace quota is exhausted."""


class ServerBusy(SodaliteError, condition="com.microsoft:server-busy", http_status=503, retryable=True):
    """The broker or one of its messaging stores cannot take the request now; retry later."""


class OperationTimeout(SodaliteError, condition="com.microsoft:timeout", http_status=408, retryable=True):
    """The operation did not complete in time."""


class MessageLockLost(SodaliteError, condition="com.microsoft:message-lock-lost", http_status=410, retryable=False):
    """The lock on the message is lost: it expired, or the lock token is unknown."""


#: Service Bus's words for a lost message lock, which the SDKs' own tests compare (the Go SDK's
#: ``TestReceiverRenewLock`` looks for the first sentence and the start of the second).
LOCK_SUPPLIED_INVALID = ("The lock supplied is invalid. Either the lock expired, or the message has already been "
                         "removed from the queue, or was received by a different receiver instance.")


class MessageNotFound(SodaliteError, condition="com.microsoft:message-not-found", http_status=404, retryable=True):
    """No message with the given sequence number or lock token exists."""


class SessionLockLost(SodaliteError, condition="com.microsoft:session-lock-lost", http_status=410, retryable=False):
    """The session lock is lost."""


class SessionCannotBeLocked(SodaliteError, condition="com.microsoft:session-cannot-be-locked", http_status=409,
                            retryable=True):
    """The session is locked by another receiver."""


class InvalidOperation(SodaliteError, condition="amqp:not-allowed", http_status=400, retryable=False):
    """The operation is not valid in the entity's current state."""


class NotImplementedOperation(SodaliteError, condition="amqp:not-implemented", http_status=501, retryable=False):
    """Sodalite does not implement this operation yet."""


class ArgumentError(SodaliteError, condition="com.microsoft:argument-error", http_status=400, retryable=False):
    """A request argument is missing or malformed."""


class PayloadTooLarge(ArgumentError, http_status=413):
    """An HTTP request body is over the API's limit."""


class InternalError(SodaliteError, condition="amqp:internal-error", http_status=500, retryable=True):
    """An unexpected failure inside the broker."""


class ConfigurationError(SodaliteError, condition="com.microsoft:argument-error", http_status=400, retryable=False):
    """The configuration is invalid; the message names the offending field."""


class OutboxCorrupt(ConfigurationError):
    """A client-side outbox file is damaged or is not an outbox; nothing is read from or written to it.

    Retrying cannot help, so it is reported like the other bad-input errors (argument-error)."""


class StoreUnavailable(ServerBusy):
    """A messaging store cannot be reached; the partitions it holds are unavailable."""


class StoreFull(QuotaExceeded):
    """The messaging store's disk is full: new messages are refused until space is freed; stored
    ones can still be received and settled."""


class TransactionUnknown(SodaliteError, condition="amqp:transaction:unknown-id", http_status=404, retryable=True):
    """The transaction id is unknown: never declared on this connection, or already discharged.

    The SDK treats every ``amqp:transaction:*`` condition as a retryable ServiceBusError, so we agree."""


class TransactionRolledBack(SodaliteError, condition="amqp:transaction:rollback", http_status=409, retryable=True):
    """The transaction could not be committed (a lock enlisted in it was lost, say) and was rolled back."""


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One row of the error table, as the edges see it."""

    name: str
    condition: str
    http_status: int
    retryable: bool


def error_table() -> list[ErrorRow]:
    """Every error class as data, for the edges and for the tests that pin the conditions."""
    rows: list[ErrorRow] = []
    stack: list[type[SodaliteError]] = [SodaliteError]
    while stack:
        cls = stack.pop()
        rows.append(ErrorRow(cls.__name__, cls.condition, cls.http_status, cls.retryable))
        stack.extend(cls.__subclasses__())
    return sorted(rows, key=lambda r: r.name)


class FilterSyntaxError(ArgumentError):
    """A SQL filter or rule action expression is malformed; the message names the position."""

    def __init__(self, description: str = "", *, position: int | None = None, near: str | None = None) -> None:
        super().__init__(description)
        self.position = position  # character offset into the expression (0-based)
        self.near = near  # the offending token's text; None at the end of the input


class FilterEvaluationError(SodaliteError, condition="amqp:internal-error", http_status=500, retryable=True):
    """A SQL filter or rule action could not be evaluated against a message.

    Service Bus documents no AMQP condition for this (the .NET FilterException and
    RuleActionException carry none), so it is reported as an internal error. The SDK retries
    ``amqp:internal-error``, so the class says retryable to agree with it; in practice the error
    never reaches a client: the topic's fan-out catches it per subscription.
    """


class SecondaryUnavailable(ServerBusy):
    """The paired client's secondary namespace cannot be reached (its backlog queues are there)."""


class FailoverExhausted(ServerBusy):
    """Neither the primary entity nor any backlog queue in the secondary namespace took the message."""


class BacklogQueueSetupFailed(Unauthorized):
    """A backlog queue could not be read or created in the secondary namespace; its key needs Manage."""


class PairedClientClosed(InvalidOperation):
    """The paired client is closed, or faulted because one of its two namespace clients closed or faulted."""
