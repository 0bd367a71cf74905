"""A partitioned queue, topic or subscription: one actor per partition, behind one face.

Theory of operation (partitioned-entities seed). Each partition is its own actor, with its own
sequence numbers (the partition id in the upper 16 bits: the store numbers partition i after
``i << 48``, store/port.py ``numbering_base``), locks, sessions and duplicate history, kept in the
messaging store the broker assigned it. :class:`Partitioned` routes every operation, whichever
actor runs the partitions (the :class:`Partition` protocol is what it calls on them):

* a send goes where the message's partition key says: its SessionId, else its PartitionKey (the
  two must agree), else its MessageId when duplicate detection is on; keyless messages go
  round-robin to the next partition whose store is available, a batch staying together. A key
  that pins a message to an unavailable partition gets the store's retryable error;
* a lock token is settled by the partition holding it, a sequence number (deferred, scheduled)
  by the partition its upper bits name, a session by the partition its id hashes to;
* peek continues from the partition of the sequence number it starts at, partition by partition,
  skipping a partition whose store is unavailable (the seed: a peek may return fewer);
* counts add up over the partitions whose store answers.

The face is :class:`PartitionedCoreActor`: partitioned queues and subscriptions on the partition core
(``CoreActor`` per partition; a partitioned topic runs on its subclass
``topic_actor.PartitionedTopicActor``, a ``TopicActor`` per partition). A core claims messages in
the store for the credit it was given and delivers them after the claim (ReceiveAndDelete: the
delete) committed, so credit cannot be checked at delivery time: a delivery the link cannot take
would be released (PeekLock), or lost (ReceiveAndDelete, deleted already). Handing every core the
link's whole credit would let N
partitions claim N times it. So the credit is split, and never over-granted: a receiver has one
:class:`_Share` per partition (the consumer that partition's core sees), and the shares together
never hold more than the link's credit. Credit goes only to partitions whose core has ready
messages in its window (``CoreActor.ready``), as many as it has, starting at a rotating partition;
the core claims them at once. What no partition can use stays with the receiver (its pool) and is
handed out when a partition has messages: at once after a send or a settlement through this
actor, and by a poll every ``POOL_POLL_SECONDS`` while some receiver has a pool (messages that come
back by a lapsed lock, activate, or arrive by a read of the store). Credit a core holds but did not
use (its window emptied under it, e.g. an expired message) is withdrawn (``CoreActor.withdraw_credit``,
claims in flight still deliver) and handed out again. A drain first hands the pool out, waits until
the cores that got credit delivered, withdraws what is left and then answers. A session receiver
holds one session, in one partition, and gives that partition's core its whole credit.
Accept-next-session asks every available partition; the first grant wins and the other partitions'
waits are withdrawn (a grant that raced it is released).

Store outages: the operator's switch (``Broker.set_store_online``) suspends and resumes the cores of
a store. A store that fails on its own (a database gone) is found by a send's commit failing: every
partition of the entity in that store is suspended, so keyless sends go to the other stores'
partitions at once and keyed ones get the retryable error, and is resumed when the store answers
a read again (asked every ``RECHECK_SECONDS``).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    MessageLockLost,
    MessageNotFound,
    SodaliteError,
    StoreUnavailable,
)
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.model.partitioning import (
    first_sequence_number,
    partition_index,
    partition_key,
    partition_of_sequence_number,
)
from sodalite.server.core_actor import AnnotationEdits, CoreActor, Receiver, Taken
from sodalite.server.entity_settings import Consumer, EntitySettings, SubQueue, all_of
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef

POOL_POLL_SECONDS = 0.05  # how often credit no partition could use is offered again
RECHECK_SECONDS = 1.0  # how often a partition whose store failed a commit asks it again


class _OwnerRelease(Protocol):
    def release(self, owner: Receiver) -> object: ...


class Partition(Protocol):
    """What :class:`Partitioned` calls on each partition's actor (``CoreActor``)."""

    ref: PartitionRef
    worker: StoreWorker
    settings: EntitySettings

    @property
    def sessions(self) -> _OwnerRelease: ...

    @property
    def available(self) -> bool: ...

    @property
    def last_activity(self) -> int: ...

    @property
    def accessed_at(self) -> int | None: ...

    def counts(self) -> dict[str, int]: ...

    def size_in_bytes(self) -> int: ...

    def note_activity(self) -> None: ...

    def is_idle(self, now: int, idle_for: int) -> bool: ...

    def update_settings(self, settings: EntitySettings) -> asyncio.Future[None]: ...

    async def load(self) -> None: ...

    async def drained(self, timeout: float = 5.0) -> None: ...

    async def close(self) -> None: ...

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]: ...

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str,
                                     description: str) -> asyncio.Future[None]: ...

    def cancel_scheduled(self, sequence_numbers: list[int]) -> asyncio.Future[None]: ...

    def holds(self, token: uuid.UUID) -> bool: ...

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]: ...

    def abandon(self, token: uuid.UUID,
                properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]: ...

    def defer(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]: ...

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None,
                    properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]: ...

    def release(self, token: uuid.UUID) -> None: ...

    def unsent(self, sub: SubQueue, records: Sequence[MessageRecord]) -> None: ...

    def add_consumer(self, consumer: Receiver) -> None: ...

    def remove_consumer(self, consumer: Receiver) -> None: ...

    def credit_changed(self, consumer: Receiver) -> None: ...

    def accept_session(self, owner: Receiver, session_id: str | None,
                       timeout_ms: int) -> asyncio.Future[tuple[str, int]]: ...

    def cancel_session_wait(self, owner: Receiver) -> None: ...

    def set_session_state(self, session_id: str, state: bytes | None) -> asyncio.Future[None]: ...

    async def list_sessions(self, updated_after: int | None) -> list[str]: ...


P = TypeVar("P", bound=Partition)


class _Sessions(Generic[P]):
    """What the connection handler does to the session registry of a whole entity."""

    def __init__(self, partitions: Sequence[P]) -> None:
        self._partitions = partitions

    def release(self, owner: Receiver) -> None:
        for partition in self._partitions:
            partition.sessions.release(owner)


class Partitioned(Generic[P]):
    """The routing every partitioned entity shares (see the module docstring)."""

    def __init__(self, partitions: Sequence[P]) -> None:
        self.partitions: list[P] = list(partitions)
        self.ref = PartitionRef(self.partitions[0].ref.entity, 0)  # names the entity (metrics, logs)
        self.sessions = _Sessions(self.partitions)
        self._next = 0  # the round-robin cursor for keyless sends

    # ---- the entity as a whole ----------------------------------------------------------------------

    @property
    def settings(self) -> EntitySettings:
        return self.partitions[0].settings

    @property
    def last_activity(self) -> int:
        return max(p.last_activity for p in self.partitions)

    @property
    def accessed_at(self) -> int | None:
        return max((at for p in self.partitions if (at := p.accessed_at) is not None), default=None)

    @property
    def available(self) -> bool:
        """False when any partition's store is unavailable (the entity's availability is then Limited)."""
        return all(p.available for p in self.partitions)

    def counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for partition in self.partitions:
            if partition.available:
                for name, value in partition.counts().items():
                    total[name] = total.get(name, 0) + value
        return total or {"active": 0, "scheduled": 0, "dead_letter": 0, "transfer_dead_letter": 0, "transfer": 0}

    def size_in_bytes(self) -> int:
        return sum(p.size_in_bytes() for p in self.partitions if p.available)

    def note_activity(self) -> None:
        for partition in self.partitions:
            partition.note_activity()

    def is_idle(self, now: int, idle_for: int) -> bool:
        return all(p.is_idle(now, idle_for) for p in self.partitions)

    def update_settings(self, settings: EntitySettings) -> asyncio.Future[None]:
        """Every partition takes the settings and drops its locks; done once all of them did."""
        waits = [partition.update_settings(settings) for partition in self.partitions]

        async def all_done() -> None:
            await asyncio.gather(*waits)

        return asyncio.ensure_future(all_done())

    async def load(self) -> None:
        for partition in self.partitions:
            await partition.load()

    async def drained(self, timeout: float = 5.0) -> None:
        for partition in self.partitions:
            await partition.drained(timeout)

    async def close(self) -> None:
        for partition in self.partitions:
            await partition.close()

    # ---- choosing a partition -----------------------------------------------------------------------

    def for_key(self, key: str) -> P:
        return self.partitions[partition_index(key, len(self.partitions))]

    def for_sequence_number(self, sequence_number: int) -> P:
        index = partition_of_sequence_number(sequence_number)
        if index >= len(self.partitions):
            raise MessageLockLost(f"no message with sequence number {sequence_number}")
        return self.partitions[index]

    def _peek_order(self, from_sequence_number: int) -> Iterator[tuple[P, int]]:
        """Where a peek from ``from_sequence_number`` reads, in order: the partition that number
        names from it, then each later partition from its first number; a partition whose store is
        unavailable is skipped (the seed: peek may return fewer)."""
        first = min(partition_of_sequence_number(max(from_sequence_number, 0)), len(self.partitions) - 1)
        for index in range(first, len(self.partitions)):
            partition = self.partitions[index]
            if partition.available:
                yield partition, from_sequence_number if index == first else first_sequence_number(index)

    def next_partition(self) -> P:
        """The next partition whose store is available: a keyless send succeeds while any is."""
        count = len(self.partitions)
        for _ in range(count):
            partition = self.partitions[self._next % count]
            self._next += 1
            if partition.available:
                return partition
        raise StoreUnavailable(f"no partition of '{self.ref.entity}' is available; retry shortly")

    def route(self, drafts: Sequence[MessageDraft]) -> list[tuple[P, list[int]]]:
        """Which partition takes each draft, as (partition, indexes into ``drafts``); keyless drafts
        of one send share one partition. Checks every chosen partition is available before any
        message is accepted, so a send is never half taken."""
        dedup = self.settings.duplicate_detection_window is not None
        groups: dict[int, list[int]] = {}
        keyless: list[int] = []
        for i, draft in enumerate(drafts):
            key = partition_key(draft, dedup)
            if key is None:
                keyless.append(i)
            else:
                groups.setdefault(partition_index(key, len(self.partitions)), []).append(i)
        routed = [(self.partitions[index], indexes) for index, indexes in groups.items()]
        if keyless:
            routed.append((self.next_partition(), keyless))
        for partition, _ in routed:
            if not partition.available:
                raise StoreUnavailable(
                    f"partition {partition.ref.partition} of '{self.ref.entity}', which the message's partition key "
                    "pins it to, is unavailable; retry shortly")
        return routed

    def _by_sequence_number(self, sequence_numbers: Sequence[int]) -> list[tuple[P, list[int]]]:
        groups: dict[int, list[int]] = {}
        for number in sequence_numbers:
            groups.setdefault(partition_of_sequence_number(number), []).append(number)
        return [(self.partitions[i], numbers) for i, numbers in groups.items() if i < len(self.partitions)]

    # ---- sending ------------------------------------------------------------------------------------

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        return all_of([p.send([drafts[i] for i in indexes]) for p, indexes in self.route(drafts)])

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str,
                                     description: str) -> asyncio.Future[None]:
        return all_of([p.send_to_transfer_dead_letter([drafts[i] for i in indexes], reason, description)
                       for p, indexes in self.route(drafts)])

    def cancel_scheduled(self, sequence_numbers: list[int]) -> asyncio.Future[None]:
        """Each partition cancels the numbers its bits name all or none (one store transaction each);
        a number naming no partition of the entity cancels nothing at all. Numbers of several
        partitions are not one transaction: a partition missing one refuses only its own (docs/limits.md)."""
        unknown = [n for n in sequence_numbers if not 0 <= partition_of_sequence_number(n) < len(self.partitions)]
        if unknown:
            refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            refused.set_exception(MessageNotFound("Messages not found. Missing sequence numbers: "
                                                  f"{', '.join(str(n) for n in unknown)} (no partition of "
                                                  "this entity numbers them; nothing was done)"))
            return refused
        return all_of([p.cancel_scheduled(numbers) for p, numbers in self._by_sequence_number(sequence_numbers)])

    # ---- settlement by lock token -------------------------------------------------------------------

    def holder(self, token: uuid.UUID) -> P:
        """The partition holding the lock (MessageLockLost when none does)."""
        for partition in self.partitions:
            if partition.holds(token):
                return partition
        raise MessageLockLost(LOCK_SUPPLIED_INVALID)

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]:
        return self.holder(token).complete(token)

    def abandon(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self.holder(token).abandon(token, properties_to_modify)

    def defer(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self.holder(token).defer(token, properties_to_modify)

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None,
                    properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self.holder(token).dead_letter(token, reason, description, properties_to_modify)

    def release(self, token: uuid.UUID) -> None:
        for partition in self.partitions:
            if partition.holds(token):
                partition.release(token)
                return

    def unsent(self, sub: SubQueue, records: Sequence[MessageRecord]) -> None:
        """ReceiveAndDelete messages whose transfers were never written: back into their partitions."""
        by_partition: dict[int, list[MessageRecord]] = {}
        for record in records:
            by_partition.setdefault(partition_of_sequence_number(record.sequence_number), []).append(record)
        for index, taken in by_partition.items():
            if 0 <= index < len(self.partitions):
                self.partitions[index].unsent(sub, taken)

    # ---- sessions -----------------------------------------------------------------------------------

    def accept_session(self, owner: Receiver, session_id: str | None,
                       timeout_ms: int) -> asyncio.Future[tuple[str, int]]:
        """A named session in its partition; the next available one from whichever partition has one
        first (every partition is asked; the first grant wins and the others are withdrawn)."""
        if session_id is not None:
            return self.for_key(session_id).accept_session(owner, session_id, timeout_ms)
        loop = asyncio.get_running_loop()
        combined: asyncio.Future[tuple[str, int]] = loop.create_future()
        asked = [p for p in self.partitions if p.available]
        if not asked:
            raise StoreUnavailable(f"no partition of '{self.ref.entity}' is available; retry shortly")
        failures: list[BaseException] = []

        def answered(partition: P, future: asyncio.Future[tuple[str, int]]) -> None:
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                failures.append(exc)
                if len(failures) == len(asked) and not combined.done():
                    combined.set_exception(exc)
                return
            if combined.done():
                partition.sessions.release(owner)  # granted in the same turn as the winner: give it back
                return
            self._granted(owner, partition)
            combined.set_result(future.result())
            for other in asked:
                if other is not partition:
                    other.cancel_session_wait(owner)

        for partition in asked:
            try:
                future = partition.accept_session(owner, None, timeout_ms)
            except SodaliteError as exc:
                failures.append(exc)
                continue
            future.add_done_callback(lambda f, p=partition: answered(p, f))  # type: ignore[misc]
        if len(failures) == len(asked) and not combined.done():
            combined.set_exception(failures[0])
        return combined

    def _granted(self, owner: Receiver, partition: P) -> None:
        """``partition`` granted ``owner`` the next session (a hook for the faces)."""

    def cancel_session_wait(self, owner: Receiver) -> None:
        for partition in self.partitions:
            partition.cancel_session_wait(owner)

    def set_session_state(self, session_id: str, state: bytes | None) -> asyncio.Future[None]:
        return self.for_key(session_id).set_session_state(session_id, state)

    async def list_sessions(self, updated_after: int | None) -> list[str]:
        found: set[str] = set()
        for partition in self.partitions:
            if partition.available:
                found.update(await partition.list_sessions(updated_after))
        return sorted(found)


class _Share:
    """One partition's part of a receiver's credit: the consumer that partition's core sees (see
    the module docstring). ``allotted`` is what the core was given for it and has not delivered
    yet, claimed or not (read back from the core before each hand-out: ``CoreActor.given``)."""

    __slots__ = ("allotted", "peek_lock", "receiver", "session_id", "sub_queue")

    def __init__(self, receiver: Consumer) -> None:
        self.receiver = receiver  # the link (links.LinkConsumer)
        self.allotted = 0
        self.sub_queue: SubQueue = receiver.sub_queue  # a receiver's sub-queue and mode are fixed at its attach
        self.peek_lock: bool = receiver.peek_lock
        self.session_id: str | None = None

    def credit(self) -> int:
        return min(self.allotted, self.receiver.credit())

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        self.allotted = max(self.allotted - 1, 0)
        self.receiver.deliver(record, lock)

    def drain_requested(self) -> bool:
        return False  # the partitioned actor drains the link across its partitions

    def drained(self) -> None:
        pass

    def session_lost(self) -> None:
        pass  # a share never holds a session


class PartitionedCoreActor(Partitioned[CoreActor]):
    """A partitioned queue on the partition core: one ``CoreActor`` per partition (module docstring)."""

    def __init__(self, partitions: Sequence[CoreActor]) -> None:
        super().__init__(partitions)
        self._shares: dict[Consumer, list[_Share]] = {}  # per receiver link that holds no session
        self._session_partition: dict[Receiver, CoreActor] = {}  # a session receiver -> the partition granting it
        self._draining: set[Consumer] = set()
        self._cursor = 0  # where the next credit hand-out starts
        self._poller: asyncio.Task[None] | None = None
        self._rechecks: dict[str, asyncio.Task[None]] = {}  # store name -> the task asking it again
        self._closed = False

    async def close(self) -> None:
        self._closed = True  # (closing fails what is in flight: that is no store failing)
        for task in [self._poller, *self._rechecks.values()]:
            if task is not None:
                task.cancel()
        await super().close()

    # ---- sending and scheduling ---------------------------------------------------------------------

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        futures = []
        for partition, indexes in self.route(drafts):
            future = partition.send([drafts[i] for i in indexes])
            future.add_done_callback(functools.partial(self._sent, partition))
            futures.append(future)
        combined = all_of(futures)
        combined.add_done_callback(self._offer_soon)
        return combined

    def _sent(self, partition: CoreActor, future: asyncio.Future[None]) -> None:
        if not self._closed and not future.cancelled() and isinstance(future.exception(), StoreUnavailable):
            self._store_failed(partition)

    def _store_failed(self, partition: CoreActor) -> None:
        """``partition``'s store failed a commit: its partitions go out of service (keyless sends go
        to the other stores' partitions, keyed ones get the retryable error) until the store answers
        again (for the whole store at once: the seed's outage is a messaging store's)."""
        worker = partition.worker
        if worker.name in self._rechecks:
            return
        out = [p for p in self.partitions if p.worker is worker and p.available]
        if not out:
            return
        for each_one in out:
            each_one.suspend()
        self._rechecks[worker.name] = asyncio.get_running_loop().create_task(
            self._recheck(worker, out), name=f"recheck {self.ref.entity} in {worker.name}")

    async def _recheck(self, worker: StoreWorker, out: list[CoreActor]) -> None:
        try:
            while any(not p.available for p in out):  # (the operator's switch may resume them meanwhile)
                await asyncio.sleep(RECHECK_SECONDS)
                if worker.offline:
                    continue  # switched offline by the operator: switching it online resumes them
                try:
                    await worker.call(lambda: worker.store.counts(out[0].ref))
                except Exception:  # still failing, however it says so: ask again
                    continue
                for partition in out:
                    if not partition.available:
                        partition.resume()
                return
        finally:
            self._rechecks.pop(worker.name, None)

    def schedule(self, drafts: list[MessageDraft]) -> asyncio.Future[list[int]]:
        """ScheduleMessage: the numbers, in the drafts' order, once every partition's share is durable."""
        routed = self.route(drafts)
        futures = [p.schedule([drafts[i] for i in indexes]) for p, indexes in routed]

        async def numbered() -> list[int]:
            numbers = [0] * len(drafts)
            for (_, indexes), assigned in zip(routed, await asyncio.gather(*futures), strict=True):
                for i, number in zip(indexes, assigned, strict=True):
                    numbers[i] = number
            return numbers

        return asyncio.ensure_future(numbered())

    # ---- settlement ---------------------------------------------------------------------------------

    def abandon(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        future = super().abandon(token, properties_to_modify)
        future.add_done_callback(self._offer_soon)  # the message is ready again
        return future

    def renew_lock(self, token: uuid.UUID) -> asyncio.Future[int]:
        return self.holder(token).renew_lock(token)

    # ---- browsing and deferred messages -------------------------------------------------------------

    async def peek(self, sub: SubQueue, from_sequence_number: int, count: int,
                   session_id: str | None = None) -> list[MessageRecord]:
        """As version 1's: from the partition ``from_sequence_number`` names onwards, partition by
        partition, skipping a partition whose store is unavailable."""
        if session_id is not None:
            return await self.for_key(session_id).peek(sub, from_sequence_number, count, session_id)
        found: list[MessageRecord] = []
        for partition, start in self._peek_order(from_sequence_number):
            if len(found) >= count:
                break
            found += await partition.peek(sub, start, count - len(found))
        return found

    def receive_deferred(self, sub: SubQueue, sequence_numbers: list[int], peek_lock: bool,
                         session_id: str | None) -> asyncio.Future[list[Taken]]:
        """Deferred messages by number from the partitions their numbers name, all or none: when a
        partition does not have every number asked of it, the locks the others took are released."""
        unknown = [n for n in sequence_numbers if partition_of_sequence_number(n) >= len(self.partitions)]
        if unknown:
            raise MessageNotFound("no deferred message with the sequence number(s) "
                                  f"{', '.join(str(n) for n in unknown)}")
        groups = self._by_sequence_number(sequence_numbers)
        futures = [p.receive_deferred(sub, numbers, peek_lock, session_id) for p, numbers in groups]

        async def together() -> list[Taken]:
            answers = await asyncio.gather(*futures, return_exceptions=True)
            failure = next((a for a in answers if isinstance(a, BaseException)), None)
            if failure is None:
                order = {n: i for i, n in enumerate(sequence_numbers)}
                taken = [item for answer in answers if not isinstance(answer, BaseException) for item in answer]
                return sorted(taken, key=lambda item: order.get(item[0].sequence_number, 0))
            for (partition, _), answer in zip(groups, answers, strict=True):
                if not isinstance(answer, BaseException):
                    for _, token, _ in answer:
                        if token is not None:
                            partition.release(token)
            raise failure

        return asyncio.ensure_future(together())

    # ---- receivers: the credit split (module docstring) -----------------------------------------------

    def _pinned(self, consumer: Consumer) -> CoreActor | None:
        """The one partition a session receiver takes messages from (None: a receiver without a session)."""
        if consumer.session_id is None:
            return None
        return self._session_partition.get(consumer) or self.for_key(consumer.session_id)

    def add_consumer(self, consumer: Consumer) -> None:
        pinned = self._pinned(consumer)
        if pinned is not None:
            pinned.add_consumer(consumer)
            return
        shares = self._shares.get(consumer)
        if shares is None:
            shares = self._shares[consumer] = [_Share(consumer) for _ in self.partitions]
        for partition, share in zip(self.partitions, shares, strict=True):
            partition.add_consumer(share)
        self._offer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        """A receiver left: its shares go; a session receiver's session, or its wait for one, ends."""
        shares = self._shares.pop(consumer, None)
        self._session_partition.pop(consumer, None)
        self._draining.discard(consumer)
        for index, partition in enumerate(self.partitions):
            if shares is not None:
                partition.remove_consumer(shares[index])
            else:
                partition.cancel_session_wait(consumer)

    def credit_changed(self, consumer: Consumer) -> None:
        pinned = self._pinned(consumer)
        if pinned is not None:
            pinned.credit_changed(consumer)
            return
        if consumer not in self._shares:
            return
        self._offer(consumer)
        if consumer.drain_requested() and consumer not in self._draining:
            self._draining.add(consumer)
            asyncio.get_running_loop().create_task(self._drain(consumer))

    def _offer(self, consumer: Consumer) -> None:
        """Hand ``consumer``'s free credit to partitions with ready messages; take back what a core
        holds without a message to use it on. Never more out than the link's credit."""
        shares = self._shares.get(consumer)
        if shares is None or self._closed:
            return
        sub = consumer.sub_queue
        for partition, share in zip(self.partitions, shares, strict=True):
            share.allotted = partition.given(share)  # a delivery the link refused was given back too
            if share.allotted > 0 and partition.ready(sub) == 0:
                share.allotted -= partition.withdraw_credit(share)
        free = consumer.credit() - sum(share.allotted for share in shares)
        count = len(self.partitions)
        start = self._cursor
        for step in range(count):
            if free <= 0:
                break
            index = (start + step) % count
            partition = self.partitions[index]
            ready = partition.ready(sub) if partition.available else 0
            if ready <= 0:
                continue
            given = min(free, ready)
            shares[index].allotted += given
            free -= given
            self._cursor = index + 1
            partition.credit_changed(shares[index])  # the core claims them now
        if free > 0 and consumer not in self._draining:
            self._poll()

    def _offer_all(self) -> None:
        for consumer in list(self._shares):
            if consumer not in self._draining:
                self._offer(consumer)

    def _offer_soon(self, _: asyncio.Future[None]) -> None:
        self._offer_all()

    def _poll(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_pools(),
                                                                  name=f"credit pools {self.ref.entity}")

    async def _poll_pools(self) -> None:
        """While some receiver has credit no partition could use, offer it again now and then."""
        while True:
            await asyncio.sleep(POOL_POLL_SECONDS)
            waiting = [c for c, shares in self._shares.items()
                       if c not in self._draining and c.credit() > sum(s.allotted for s in shares)]
            if not waiting:
                return
            for consumer in waiting:
                self._offer(consumer)

    async def _drain(self, consumer: Consumer) -> None:
        """Answer a drain: what is ready was handed out (credit_changed did that); once the cores
        that got credit have delivered, take back what they hold unused, and say drained."""
        try:
            shares = self._shares.get(consumer)
            if shares is None:
                return
            sub = consumer.sub_queue
            await asyncio.gather(*(p.caught_up(sub) for p, s in zip(self.partitions, shares, strict=True)
                                   if s.allotted > 0))
            for partition, share in zip(self.partitions, shares, strict=True):
                share.allotted -= partition.withdraw_credit(share)
        finally:
            self._draining.discard(consumer)
        if consumer in self._shares and consumer.drain_requested():
            consumer.drained()

    # ---- sessions -----------------------------------------------------------------------------------

    def _granted(self, owner: Receiver, partition: CoreActor) -> None:
        self._session_partition[owner] = partition

    def renew_session_lock(self, session_id: str) -> asyncio.Future[int]:
        return self.for_key(session_id).renew_session_lock(session_id)

    def get_session_state(self, session_id: str) -> asyncio.Future[bytes | None]:
        return self.for_key(session_id).get_session_state(session_id)


AnyPartitioned = PartitionedCoreActor
EntityActor = CoreActor | PartitionedCoreActor  # what an entity runs on


def each(actor: EntityActor) -> list[CoreActor]:
    """The partition actors behind an entity's actor."""
    if isinstance(actor, PartitionedCoreActor):
        return list(actor.partitions)
    return [actor]
