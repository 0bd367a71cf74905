"""What the sync and asyncio ``ReplicatedClient`` share that is neither a decision nor I/O.

Theory of operation. Making an SDK handler opens nothing (the SDK connects on first use), so which
handlers a replicated client makes for an entity pair, and with what arguments, is the same code for
both shells: ``ClientPairs`` checks the client's arguments, makes the handlers from the shell's two
SDK clients (sync or asyncio) and hands each pair to the shell's own handler class (``_new_sender``
and the like), which does the I/O. ``ReceiverState``
is the state every replicated receiver starts with: two SDK receivers (made, not opened), their
``Turns``, the ``CopyTracker`` and the ``PeekMemory``. The decisions themselves are in
``replication_core``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import Generic, TypeVar

from azure.servicebus import ServiceBusSessionFilter

from sodalite.client.availability import Availability
from sodalite.client.dedup import DuplicateFilter
from sodalite.client.replication_core import (
    CopyTracker,
    EntityPair,
    PeekMemory,
    ReplicationMode,
    Roles,
    SdkClient,
    Turns,
    check_mode,
    check_pair,
    queue_pair,
    receives_and_deletes,
    session_to_ask,
    subscription_pair,
    topic_pair,
)

__all__ = ["ClientPairs", "Factories", "ProbeMakers", "ReceiverOptions", "ReceiverState", "SessionMakers",
           "session_factories"]

W = TypeVar("W")  # the SDK's sender (sync or asyncio)
R = TypeVar("R")  # the SDK's receiver
SND = TypeVar("SND")  # the shell's ReplicatedSender
RCV = TypeVar("RCV")  # the shell's ReplicatedReceiver
RQS = TypeVar("RQS")  # the shell's ReplicatedRequestSender
H = TypeVar("H")

Factories = tuple[Callable[[], R], Callable[[], R]]
SessionMakers = tuple[Callable[[str | ServiceBusSessionFilter], R], Callable[[str | ServiceBusSessionFilter], R]]
ProbeMakers = tuple[Callable[[], W], Callable[[], W]]  # a fresh sender to the entity in each namespace
ReceiverOptions = dict[str, object]  # the SDK's receiver keyword arguments, as the application gave them


class ClientPairs(ABC, Generic[W, R, SND, RCV, RQS]):
    """The getters of a replicated client: each makes one SDK handler per namespace."""

    def __init__(self, primary: str, secondary: str, mode: ReplicationMode, retry_interval: timedelta,
                 attempt_timeout: timedelta = timedelta(seconds=2)) -> None:
        check_pair(primary, secondary)  # before the SDK sees them: a clear error naming the bad one
        self.mode = check_mode(mode)
        self.retry_interval = retry_interval
        if attempt_timeout <= timedelta(0):
            raise ValueError(f"attempt_timeout must be positive, got {attempt_timeout}")
        self.attempt_timeout = attempt_timeout
        self.availability = Availability()  # which namespace is marked unavailable, per entity
        self._roles = Roles()
        self._handlers: list[SND | RCV | RQS] = []

    # -- what the shell provides: its two SDK clients, and its handler for each pair ----------------
    @property
    @abstractmethod
    def _sdk(self) -> tuple[SdkClient[W, R], SdkClient[W, R]]: ...

    @property
    @abstractmethod
    def _attempt_sdk(self) -> tuple[SdkClient[W, R], SdkClient[W, R]]:
        """The SDK clients senders use: the library's short retry policy (``availability``)."""

    @abstractmethod
    def _new_sender(self, senders: tuple[W, W], key: str, probes: ProbeMakers[W]) -> SND: ...

    @abstractmethod
    def _new_receiver(self, factories: Factories[R], duplicate_filter: DuplicateFilter | None,
                      kwargs: ReceiverOptions) -> RCV: ...

    @abstractmethod
    def _new_session_receiver(self, makers: SessionMakers[R], session: str | ServiceBusSessionFilter,
                              duplicate_filter: DuplicateFilter | None, kwargs: ReceiverOptions) -> RCV: ...

    @abstractmethod
    def _new_request_sender(self, requests: tuple[W, W], replies: tuple[R, R], reply_names: tuple[str, str]) -> RQS: ...

    # -- senders ---------------------------------------------------------------------------------
    def get_queue_sender(self, queue_name: str, *, secondary_queue_name: str | None = None, **kwargs: object) -> SND:
        return self._sender(queue_pair(queue_name, secondary_queue_name), kwargs)

    def get_topic_sender(self, topic_name: str, *, secondary_topic_name: str | None = None, **kwargs: object) -> SND:
        return self._sender(topic_pair(topic_name, secondary_topic_name), kwargs)

    def _sender(self, pair: EntityPair, kwargs: ReceiverOptions) -> SND:
        one, two = self._attempt_sdk
        probes: ProbeMakers[W] = (lambda: pair.sender(one, 0, **kwargs), lambda: pair.sender(two, 1, **kwargs))
        return self._keep(self._new_sender((probes[0](), probes[1]()), pair.key, probes))

    # -- receivers -------------------------------------------------------------------------------
    def get_queue_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                           duplicate_filter: DuplicateFilter | None = None, **kwargs: object) -> RCV:
        return self._receiver(queue_pair(queue_name, secondary_queue_name), duplicate_filter, kwargs)

    def get_subscription_receiver(self, topic_name: str, subscription_name: str, *,
                                  secondary_topic_name: str | None = None,
                                  secondary_subscription_name: str | None = None,
                                  duplicate_filter: DuplicateFilter | None = None, **kwargs: object) -> RCV:
        pair = subscription_pair(topic_name, subscription_name, secondary_topic_name, secondary_subscription_name)
        return self._receiver(pair, duplicate_filter, kwargs)

    def _receiver(self, pair: EntityPair, duplicate_filter: DuplicateFilter | None, kwargs: ReceiverOptions) -> RCV:
        # The attempt clients: a namespace that is down fails a receive (or an open) in a moment and
        # rests, instead of holding the receive for the application's whole retry chain.
        one, two = self._attempt_sdk
        session = kwargs.pop("session_id", None)
        if session is not None:
            if not isinstance(session, str | ServiceBusSessionFilter):
                raise TypeError(f"session_id is a str or ServiceBusSessionFilter, not {type(session).__name__}")
            makers: SessionMakers[R] = (lambda sid: pair.receiver(one, 0, session_id=sid, **kwargs),
                                        lambda sid: pair.receiver(two, 1, session_id=sid, **kwargs))
            return self._keep(self._new_session_receiver(makers, session, duplicate_filter, kwargs))
        factories: Factories[R] = (lambda: pair.receiver(one, 0, **kwargs), lambda: pair.receiver(two, 1, **kwargs))
        return self._keep(self._new_receiver(factories, duplicate_filter, kwargs))

    # -- request/reply ---------------------------------------------------------------------------
    def get_request_sender(self, queue_name: str, *, reply_queue_name: str, secondary_queue_name: str | None = None,
                           secondary_reply_queue_name: str | None = None) -> RQS:
        """Requests to a pair of queues (role-switching, relay pattern), replies on a reply queue."""
        one, two = self._sdk
        requests = queue_pair(queue_name, secondary_queue_name)
        replies = queue_pair(reply_queue_name, secondary_reply_queue_name)
        return self._keep(self._new_request_sender((requests.sender(one, 0), requests.sender(two, 1)),
                                                   (replies.receiver(one, 0), replies.receiver(two, 1)),
                                                   (replies.names[0][0], replies.names[1][0])))

    def get_request_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                             duplicate_filter: DuplicateFilter | None = None, **kwargs: object) -> RCV:
        """The service's side: both request queues, duplicates dropped; answer with ``receiver.reply``."""
        return self.get_queue_receiver(queue_name, secondary_queue_name=secondary_queue_name,
                                       duplicate_filter=duplicate_filter, **kwargs)

    def _keep(self, handler: H) -> H:
        """Keep ``handler`` (one of the shell's handlers) for the shell's ``close``; returns it."""
        self._handlers.append(handler)  # type: ignore[arg-type]
        return handler


class ReceiverState(Generic[R]):
    """What a replicated receiver holds, sync or asyncio: the SDK receivers and the bookkeeping."""

    def __init__(self, retry_interval: timedelta, factories: Factories[R], duplicate_filter: DuplicateFilter | None,
                 kwargs: ReceiverOptions) -> None:
        self._factories = factories
        self._receivers: list[R] = [factories[0](), factories[1]()]
        self._opened = [False, False]
        self._turns = Turns(retry_interval.total_seconds())
        self._owns_filter = duplicate_filter is None
        self.duplicate_filter = duplicate_filter if duplicate_filter is not None else DuplicateFilter()
        self._tracker: CopyTracker[tuple[int, R]] = CopyTracker(self.duplicate_filter, receives_and_deletes(kwargs))
        wait = kwargs.get("max_wait_time")
        self._max_wait_time = float(wait) if isinstance(wait, int | float) else None
        self.probe_wait = 0.5  # seconds each namespace is given per turn while the other has nothing
        self._peeked = PeekMemory(self.duplicate_filter)

    def _renewed(self, index: int) -> R:
        """Namespace ``index``'s receiver is replaced by a fresh one (the caller closed the old)."""
        self._receivers[index] = self._factories[index]()
        self._opened[index] = False
        return self._receivers[index]


def session_factories(makers: SessionMakers[R], session_id: Callable[[], str | None]) -> Factories[R]:
    """A session receiver's factories: each asks for the session picked so far, or the next available."""
    return (lambda: makers[0](session_to_ask(session_id())), lambda: makers[1](session_to_ask(session_id())))

