"""What the sync and asyncio replicated clients share: no I/O, only decisions.

Theory of operation. A replicated receiver reads two copies of every message, one per namespace.
Each received copy is *admitted* here and gets one verdict:

- ``DELIVER``: the application gets it. In PeekLock its MessageId is now *in flight* (handed out,
  not settled); in ReceiveAndDelete its MessageId is recorded at once.
- ``SETTLE_QUIETLY``: its MessageId was recorded (a copy was completed); complete it, never
  abandon it, so it cannot cycle to the dead-letter queue (clarification 15).
- ``DROP``: ReceiveAndDelete copy of a recorded id; the broker already removed it.
- ``HOLD``: another copy with its MessageId is in flight; keep this one locked and settle it the
  way the application settles the copy it has.

When the application settles its copy, ``settled`` records the id if (and only if) the outcome is
``complete`` and returns the held copies to settle the same way. An abandoned copy records
nothing, so a redelivered copy is delivered again.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch, ServiceBusReceivedMessage
from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError

from sodalite.client.backlog import PING_CONTENT_TYPE
from sodalite.client.batch import KeepingMessageBatch
from sodalite.client.dedup import DuplicateFilter
from sodalite.client.failover import is_failover_error
from sodalite.errors import ConfigurationError, NotImplementedOperation


class ReplicationMode(enum.Enum):
    """ACTIVE: every send goes to both namespaces. PASSIVE: to the active one, the backup on failure."""

    ACTIVE = "active"
    PASSIVE = "passive"


def signals_unavailable(error: BaseException) -> bool:
    """True for the errors after which the namespace may be down: the paired client's failover list
    (clarification 15), shared so both modes agree."""
    return is_failover_error(error)


def settlement_outcome_is_assured(error: BaseException) -> bool:
    """A settlement that failed this way leaves a copy the filter will drop when it comes back."""
    if signals_unavailable(error) or isinstance(error, MessageLockLostError):
        return True
    # The SDK refuses to settle through a receiver whose link died with its connection: the lock went
    # with the link, so the copy comes back (and is dropped, its MessageId being recorded).
    return (isinstance(error, ValueError) and not isinstance(error, MessageAlreadySettled)
            and "shutdown" in str(error))


@dataclass(frozen=True, slots=True)
class ConnectionParts:
    endpoint: str
    entity_path: str | None


def parse_connection_string(value: object, role: str) -> ConnectionParts:
    """Check a Service Bus connection string enough to give a clear error naming ``role``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigurationError(f"the {role} connection string is missing")
    if not isinstance(value, str):
        raise ConfigurationError(f"the {role} connection string must be a str, not {type(value).__name__}")
    fields: dict[str, str] = {}
    for part in value.split(";"):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep:
            raise ConfigurationError(f"the {role} connection string is invalid: {part!r} is not key=value")
        fields[key.strip().lower()] = val.strip()
    endpoint = fields.get("endpoint", "")
    if not endpoint.startswith("sb://") or len(endpoint) <= len("sb://"):
        raise ConfigurationError(f"the {role} connection string is invalid: it needs Endpoint=sb://<host>")
    has_key = "sharedaccesskeyname" in fields and "sharedaccesskey" in fields
    if not has_key and "sharedaccesssignature" not in fields:
        raise ConfigurationError(f"the {role} connection string is invalid: it needs SharedAccessKeyName and "
                                 "SharedAccessKey, or SharedAccessSignature")
    return ConnectionParts(endpoint.rstrip("/").lower(), fields.get("entitypath"))


def check_pair(primary: object, secondary: object) -> None:
    first = parse_connection_string(primary, "primary")
    second = parse_connection_string(secondary, "secondary")
    if first == second:
        raise ConfigurationError("the primary and secondary connection strings name the same namespace; "
                                 "replication needs two")


def messages_of(message: ServiceBusMessage | Iterable[ServiceBusMessage] | ServiceBusMessageBatch,
                ) -> list[ServiceBusMessage]:
    """The messages of a send, each with a MessageId (a new one where it had none)."""
    if isinstance(message, KeepingMessageBatch):
        batch = message.messages
    elif isinstance(message, ServiceBusMessageBatch):
        raise TypeError("a replicated sender sends a batch made by its own create_message_batch() (an SDK "
                        "ServiceBusMessageBatch made elsewhere cannot be read back to send to both namespaces), "
                        "a ServiceBusMessage, or a list of them")
    else:
        batch = [message] if isinstance(message, ServiceBusMessage) else list(message)
    for each in batch:
        if not isinstance(each, ServiceBusMessage):
            raise TypeError(f"a replicated sender sends ServiceBusMessage objects, not {type(each).__name__}")
        if each.message_id is None:
            each.message_id = str(uuid.uuid4())
    return batch


class Verdict(enum.Enum):
    DELIVER = "deliver"
    SETTLE_QUIETLY = "settle-quietly"
    DROP = "drop"
    HOLD = "hold"


class Outcome(enum.Enum):
    COMPLETE = "complete"
    ABANDON = "abandon"
    DEAD_LETTER = "dead-letter"
    DEFER = "defer"


S = TypeVar("S")


class CopyTracker(Generic[S]):
    """The bookkeeping of one replicated receiver; ``S`` identifies the namespace a copy came from."""

    def __init__(self, duplicates: DuplicateFilter, receive_and_delete: bool) -> None:
        self.duplicates = duplicates
        self.receive_and_delete = receive_and_delete
        self._in_flight: set[str] = set()
        self._held: dict[str, list[tuple[ServiceBusReceivedMessage, S]]] = {}
        self._source: dict[int, tuple[ServiceBusReceivedMessage, S]] = {}

    def admit(self, message: ServiceBusReceivedMessage, source: S) -> Verdict:
        message_id = message.message_id
        if message.content_type == PING_CONTENT_TYPE:
            return Verdict.DROP if self.receive_and_delete else Verdict.SETTLE_QUIETLY
        if self.receive_and_delete:
            if message_id is not None:
                if message_id in self.duplicates:
                    return Verdict.DROP
                self.duplicates.record(message_id)
            return Verdict.DELIVER
        if message_id is not None:
            if message_id in self.duplicates:
                return Verdict.SETTLE_QUIETLY
            if message_id in self._in_flight:
                self._held.setdefault(message_id, []).append((message, source))
                return Verdict.HOLD
            self._in_flight.add(message_id)
        self._source[id(message)] = (message, source)
        return Verdict.DELIVER

    def source_of(self, message: ServiceBusReceivedMessage) -> S:
        entry = self._source.get(id(message))
        if entry is None or entry[0] is not message:
            raise ValueError("this message was not received through this replicated receiver, or is settled")
        return entry[1]

    def settled(self, message: ServiceBusReceivedMessage,
                outcome: Outcome) -> list[tuple[ServiceBusReceivedMessage, S]]:
        """The application settled its copy: record on complete; the held copies to settle alike."""
        self._source.pop(id(message), None)
        message_id = message.message_id
        if message_id is None:
            return []
        if outcome is Outcome.COMPLETE:
            self.duplicates.record(message_id)
        self._in_flight.discard(message_id)
        return self._held.pop(message_id, [])

    def forget_source(self, source: S) -> None:
        """Copies held from a receiver that is gone can no longer be settled; their locks expire."""
        for message_id, held in list(self._held.items()):
            kept = [entry for entry in held if entry[1] != source]
            if kept:
                self._held[message_id] = kept
            else:
                del self._held[message_id]


DEFERRED_NOT_BUILT = ("receive_deferred_messages is not built for replicated receivers: a deferred message has a "
                      "different sequence number in each namespace; use one SDK receiver per namespace")


def refuse_sequence_number(sequence_number: int | None) -> None:
    if sequence_number is not None:
        raise NotImplementedOperation("a replicated receiver peeks without a sequence_number: sequence numbers "
                                      "differ between the two namespaces; each peek continues where the last "
                                      "one stopped")


class PeekMemory:
    """The MessageIds a replicated receiver's peeks returned, so the other namespace's copy is left out
    (bounded: the oldest are forgotten first); ids the receiver recorded as completed are left out too."""

    def __init__(self, duplicates: DuplicateFilter, limit: int = 100_000) -> None:
        self._duplicates = duplicates
        self._limit = limit
        self._seen: dict[str, None] = {}

    def fresh(self, copies: Iterable[ServiceBusReceivedMessage]) -> list[ServiceBusReceivedMessage]:
        kept: list[ServiceBusReceivedMessage] = []
        for copy in copies:
            if copy.content_type == PING_CONTENT_TYPE:
                continue
            message_id = copy.message_id
            if message_id is not None:
                if message_id in self._seen or message_id in self._duplicates:
                    continue
                self._seen[message_id] = None
                while len(self._seen) > self._limit:
                    del self._seen[next(iter(self._seen))]
            kept.append(copy)
        return kept
