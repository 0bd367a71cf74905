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

The rest of what the sync and asyncio shells would otherwise each decide is here too: the entity
pair a getter names (``EntityPair``), the active namespace per entity (``Roles``), how a receiver
takes turns between the namespaces (``Turns``), what an operation tried on each namespace does
with a failure (``Attempts``: an error about the message is raised at once, availability errors
move on to the other namespace and are raised, last chained to first, when none answered), how an
active send ends (``active_send_result``), and the small facts of settling, sessions and replies.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSessionFilter,
)
from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError, OperationTimeoutError

from sodalite.client.backlog import PING_CONTENT_TYPE, MalformedField, connection_string_fields
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
    try:
        fields = {key.lower(): val for key, val in connection_string_fields(value).items()}
    except MalformedField as error:
        raise ConfigurationError(f"the {role} connection string is invalid: {error.part!r} is not key=value"
                                 ) from None
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


# ---- what the sync and asyncio shells share beyond the copies: names, roles, turns, failures -------

PRIMARY, SECONDARY = 0, 1

R_co = TypeVar("R_co", covariant=True)
W_co = TypeVar("W_co", covariant=True)


class SdkClient(Protocol[W_co, R_co]):
    """The part of an SDK ``ServiceBusClient`` (sync or asyncio) that makes handlers; making one opens
    nothing, so choosing what to make is shared and only opening and using it is the shells' I/O."""

    def get_queue_sender(self, queue_name: str, **kwargs: Any) -> W_co: ...
    def get_topic_sender(self, topic_name: str, **kwargs: Any) -> W_co: ...
    def get_queue_receiver(self, queue_name: str, **kwargs: Any) -> R_co: ...
    def get_subscription_receiver(self, topic_name: str, subscription_name: str, **kwargs: Any) -> R_co: ...


@dataclass(frozen=True, slots=True)
class EntityPair:
    """One entity in each namespace: ``kind`` "queue", "topic" or "subscription"; ``names[i]`` is its
    path in namespace ``i`` (a subscription's: topic, subscription), the primary's by default."""

    kind: str
    names: tuple[tuple[str, ...], tuple[str, ...]]

    @property
    def key(self) -> str:
        """The entity's key in the client's ``Roles``: every sender to the pair shares its role."""
        return f"{self.kind}:{'/'.join(self.names[0])}|{'/'.join(self.names[1])}"

    def sender(self, client: SdkClient[W_co, R_co], index: int, **kwargs: object) -> W_co:
        name = self.names[index][0]
        return client.get_topic_sender(name, **kwargs) if self.kind == "topic" else client.get_queue_sender(name,
                                                                                                            **kwargs)

    def receiver(self, client: SdkClient[W_co, R_co], index: int, **kwargs: object) -> R_co:
        if self.kind == "subscription":
            topic, subscription = self.names[index]
            return client.get_subscription_receiver(topic, subscription, **kwargs)
        return client.get_queue_receiver(self.names[index][0], **kwargs)


def queue_pair(name: str, secondary: str | None) -> EntityPair:
    return EntityPair("queue", ((name,), (secondary or name,)))


def topic_pair(name: str, secondary: str | None) -> EntityPair:
    return EntityPair("topic", ((name,), (secondary or name,)))


def subscription_pair(topic: str, subscription: str, secondary_topic: str | None,
                      secondary_subscription: str | None) -> EntityPair:
    return EntityPair("subscription", ((topic, subscription),
                                       (secondary_topic or topic, secondary_subscription or subscription)))


def check_mode(mode: object) -> ReplicationMode:
    if not isinstance(mode, ReplicationMode):
        raise ConfigurationError(f"mode must be a ReplicationMode, not {mode!r}")
    return mode


def receives_and_deletes(kwargs: Mapping[str, object]) -> bool:
    """Whether a receiver made with ``kwargs`` is in ReceiveAndDelete mode (PeekLock is the SDK's default)."""
    return kwargs.get("receive_mode") in (ServiceBusReceiveMode.RECEIVE_AND_DELETE, "receiveanddelete")


class Roles:
    """Which namespace is active, per entity key, for one client (passive replication and relays).
    The lock makes it safe for the sync client's threads; under asyncio it is never contended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, int] = {}

    def active(self, key: str) -> int:
        with self._lock:
            return self._active.setdefault(key, PRIMARY)

    def switch_from(self, key: str, failed: int) -> None:
        """The backup took what ``failed`` could not: it is the active one now (once, if two senders race)."""
        with self._lock:
            if self._active.get(key, PRIMARY) == failed:
                self._active[key] = 1 - failed


class Attempts:
    """The failures of one operation tried on each namespace in turn.

    ``failed`` re-raises an error that does not say the namespace may be unavailable (it is about
    the message or the caller: trying the other namespace would not help), chained to the first
    namespace's availability error if there was one; ``give_up`` raises the last availability error
    chained to the first once no namespace answered.
    """

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def failed(self, error: BaseException) -> None:
        if not signals_unavailable(error):
            if self.errors:
                raise error from self.errors[0]
            raise error
        self.errors.append(error)

    def give_up(self) -> NoReturn:
        if not self.errors:
            raise RuntimeError("give_up() without a failure")
        raise self.errors[-1] from self.errors[0]


def batch_limit(limits: list[int], attempts: Attempts) -> int:
    """A replicated batch's size limit: the smaller of the entities' that answered."""
    if not limits:
        attempts.give_up()
    return min(limits)


@dataclass(frozen=True, slots=True)
class ActiveSendResult:
    """How an active send ended: ``error`` to raise (both copies failed; chained to ``cause``), or the
    copy that failed while the other was sent (``lost``: its namespace index, ``lost_error``) to log."""

    error: BaseException | None = None
    cause: BaseException | None = None
    lost: int | None = None
    lost_error: BaseException | None = None


def active_send_result(first: BaseException | None, second: BaseException | None) -> ActiveSendResult:
    """An active send succeeds when one copy was accepted; both failing raises the secondary's error."""
    if first is not None and second is not None:
        return ActiveSendResult(error=second, cause=first)
    if first is not None:
        return ActiveSendResult(lost=PRIMARY, lost_error=first)
    if second is not None:
        return ActiveSendResult(lost=SECONDARY, lost_error=second)
    return ActiveSendResult()


class Turns:
    """How a replicated receiver takes turns between the namespaces.

    Each round tries the namespace that delivered last first, and every fourth round the other one
    first, so neither starves. A namespace whose receive failed with an availability error rests
    for ``retry_interval``. Each try gets a short slice of the caller's wait (``probe_wait``), so a
    namespace with nothing does not keep the other's messages waiting. Times are monotonic seconds.
    """

    def __init__(self, retry_interval: float) -> None:
        self.retry_interval = retry_interval
        self.down_until = [0.0, 0.0]
        self._next = PRIMARY
        self._rounds = 0

    def order(self) -> list[int]:
        """The namespaces to try in this round, in order."""
        self._rounds += 1
        order = [self._next, 1 - self._next]
        if self._rounds % 4 == 0:
            order.reverse()
        return order

    def slice_for(self, index: int, now: float, deadline: float | None, probe_wait: float) -> float | None:
        """How long to wait on namespace ``index`` now; None while it rests."""
        if self.down_until[index] > now:
            return None
        return probe_wait if deadline is None else max(0.05, min(probe_wait, deadline - now))

    def delivered(self, index: int) -> None:
        self._next = index

    def down(self, index: int, now: float) -> None:
        self.down_until[index] = now + self.retry_interval

    def idle_pause(self, now: float) -> float:
        """How long to sleep after a round that delivered nothing: a moment when both namespaces rest."""
        if all(until > now for until in self.down_until):
            return min(0.2, self.retry_interval)
        return 0.0


def expired(deadline: float | None, now: float) -> bool:
    return deadline is not None and now >= deadline


def receive_deadline(max_wait_time: float | None, default: float | None, now: float) -> float | None:
    wait = max_wait_time if max_wait_time is not None else default
    return None if wait is None else now + wait


def admit_all(tracker: CopyTracker[S], copies: Iterable[ServiceBusReceivedMessage],
              source: S) -> tuple[list[ServiceBusReceivedMessage], list[ServiceBusReceivedMessage]]:
    """The copies of one receive: those for the application, and those to complete quietly."""
    delivered: list[ServiceBusReceivedMessage] = []
    quiet: list[ServiceBusReceivedMessage] = []
    for copy in copies:
        verdict = tracker.admit(copy, source)
        if verdict is Verdict.DELIVER:
            delivered.append(copy)
        elif verdict is Verdict.SETTLE_QUIETLY:
            quiet.append(copy)
    return delivered, quiet


_SETTLE_METHODS = {Outcome.COMPLETE: "complete_message", Outcome.ABANDON: "abandon_message",
                   Outcome.DEAD_LETTER: "dead_letter_message", Outcome.DEFER: "defer_message"}


def settle_method(outcome: Outcome) -> str:
    """The SDK receiver's method that settles a copy with ``outcome`` (sync and asyncio alike)."""
    return _SETTLE_METHODS[outcome]


def settle_options(outcome: Outcome, options: Mapping[str, object]) -> dict[str, object]:
    """The keyword arguments of that method: only dead-lettering takes any (reason, description)."""
    return dict(options) if outcome is Outcome.DEAD_LETTER else {}


def held_to_settle(held: list[tuple[ServiceBusReceivedMessage, tuple[int, R_co]]],
                   current: Sequence[object]) -> list[tuple[ServiceBusReceivedMessage, R_co]]:
    """Of the held copies, those whose receiver is still the current one (a replaced receiver's link
    is gone with its namespace: those copies come back when their locks expire)."""
    return [(copy, receiver) for copy, (index, receiver) in held if receiver is current[index]]


def session_at_start(session: object) -> str | None:
    """A session receiver's session id: None until a NEXT_AVAILABLE_SESSION receiver picks one."""
    return None if session == NEXT_AVAILABLE_SESSION else str(session)


def session_to_ask(session_id: str | None) -> str | ServiceBusSessionFilter:
    return NEXT_AVAILABLE_SESSION if session_id is None else session_id


def earliest(times: Iterable[datetime | None]) -> datetime | None:
    """The earliest of the known times (a session's lock holds until the first namespace's expires)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def reply_queue(request: ServiceBusReceivedMessage, reply: ServiceBusMessage) -> str:
    """Where a reply to ``request`` goes (its ReplyTo); marks ``reply`` as the request's answer."""
    if not request.reply_to:
        raise ConfigurationError("the request has no ReplyTo; there is nowhere to send the reply")
    reply.correlation_id = request.message_id
    return request.reply_to


def with_message_id(message: ServiceBusMessage) -> ServiceBusMessage:
    """A request keeps one MessageId across endpoints, so its reply can be matched wherever it went."""
    if message.message_id is None:
        message.message_id = str(uuid.uuid4())
    return message


def no_reply(message: ServiceBusMessage, timeout: float, index: int) -> OperationTimeoutError:
    return OperationTimeoutError(message=f"no reply to request {message.message_id} within {timeout} s "
                                         f"from request endpoint {index}")
