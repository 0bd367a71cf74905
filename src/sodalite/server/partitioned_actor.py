"""A partitioned queue, topic or subscription: one PartitionActor per partition, behind one face.

Theory of operation (partitioned-entities seed). Each partition is its own actor, with its own
sequence numbers (the partition id in the upper 16 bits), locks, sessions and duplicate history,
kept in the messaging store the broker assigned it. This class routes every operation:

* a send goes where the message's partition key says: its SessionId, else its PartitionKey (the
  two must agree), else its MessageId when duplicate detection is on; keyless messages go
  round-robin to the next partition whose store is available, a batch staying together. A key
  that pins a message to an unavailable partition gets the store's retryable error;
* a receiver is registered with every partition; all run on one event loop and check its credit
  synchronously, so the first partition with a message delivers it and none delivers twice;
* a lock token is settled by the partition holding it, a sequence number (deferred, scheduled)
  by the partition its upper bits name, a session by the partition its id hashes to;
* peek continues from the partition of the sequence number it starts at, partition by partition;
* counts add up over the partitions whose store answers.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sodalite.errors import InvalidOperation, MessageLockLost, NotImplementedOperation, SodaliteError, StoreUnavailable
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server.partition_actor import PARTITION_SHIFT, Consumer, EntitySettings, PartitionActor, SubQueue, all_of
from sodalite.store.port import PartitionRef

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor


def partition_index(key: str, count: int) -> int:
    """The partition a key pins a message to; stable across restarts and processes."""
    return zlib.crc32(key.encode("utf-8")) % count


def partition_of_sequence_number(sequence_number: int) -> int:
    return sequence_number >> PARTITION_SHIFT


def partition_key(draft: MessageDraft, duplicate_detection: bool) -> str | None:
    """The seed's partition key: SessionId, else PartitionKey, else MessageId under duplicate detection.

    Raises InvalidOperation when SessionId and PartitionKey are both set and differ.
    """
    if draft.session_id is not None:
        if draft.partition_key is not None and draft.partition_key != draft.session_id:
            raise InvalidOperation(
                f"the PartitionKey '{draft.partition_key}' differs from the SessionId '{draft.session_id}'")
        return draft.session_id
    if draft.partition_key is not None:
        return draft.partition_key
    if duplicate_detection and draft.message_id is not None:
        return str(draft.message_id)
    return None


class _Sessions:
    """What the connection handler does to the session registry of a whole entity."""

    def __init__(self, partitions: Sequence[PartitionActor]) -> None:
        self._partitions = partitions

    def release(self, owner: Any) -> None:
        for partition in self._partitions:
            partition.sessions.release(owner)


class PartitionedActor:
    def __init__(self, partitions: Sequence[PartitionActor]) -> None:
        self.partitions = list(partitions)
        self.ref = PartitionRef(self.partitions[0].ref.entity, 0)  # names the entity (metrics, logs)
        self.sessions = _Sessions(self.partitions)
        self._next = 0  # the round-robin cursor for keyless sends
        for partition in self.partitions:
            partition.siblings_have_available = lambda sub, session_id, me=partition: any(
                p is not me and p.available and p.queues[sub].has_available(session_id) for p in self.partitions)

    # ---- the entity as a whole ----------------------------------------------------------------------

    @property
    def settings(self) -> EntitySettings:
        return self.partitions[0].settings

    @property
    def last_activity(self) -> int:
        return max(p.last_activity for p in self.partitions)

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

    def update_settings(self, settings: EntitySettings) -> None:
        for partition in self.partitions:
            partition.update_settings(settings)

    async def load(self) -> None:
        for partition in self.partitions:
            await partition.load()

    async def close(self) -> None:
        for partition in self.partitions:
            await partition.close()

    # ---- choosing a partition -----------------------------------------------------------------------

    def for_key(self, key: str) -> PartitionActor:
        return self.partitions[partition_index(key, len(self.partitions))]

    def for_sequence_number(self, sequence_number: int) -> PartitionActor:
        index = partition_of_sequence_number(sequence_number)
        if index >= len(self.partitions):
            raise MessageLockLost(f"no message with sequence number {sequence_number}")
        return self.partitions[index]

    def next_partition(self) -> PartitionActor:
        """The next partition whose store is available: a keyless send succeeds while any is."""
        count = len(self.partitions)
        for _ in range(count):
            partition = self.partitions[self._next % count]
            self._next += 1
            if partition.available:
                return partition
        raise StoreUnavailable(f"no partition of '{self.ref.entity}' is available; retry shortly")

    def route(self, drafts: Sequence[MessageDraft]) -> list[tuple[PartitionActor, list[int]]]:
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

    def _by_sequence_number(self, sequence_numbers: Sequence[int]) -> list[tuple[PartitionActor, list[int]]]:
        groups: dict[int, list[int]] = {}
        for number in sequence_numbers:
            groups.setdefault(partition_of_sequence_number(number), []).append(number)
        return [(self.partitions[i], numbers) for i, numbers in groups.items() if i < len(self.partitions)]

    # ---- sending ------------------------------------------------------------------------------------

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        return all_of([p.send([drafts[i] for i in indexes]) for p, indexes in self.route(drafts)])

    def schedule(self, drafts: list[MessageDraft]) -> tuple[asyncio.Future[None], list[int]]:
        numbers = [0] * len(drafts)
        futures = []
        for partition, indexes in self.route(drafts):
            future, assigned = partition.schedule([drafts[i] for i in indexes])
            futures.append(future)
            for i, number in zip(indexes, assigned, strict=False):
                numbers[i] = number
        return all_of(futures), [n for n in numbers if n]

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str,
                                     description: str) -> asyncio.Future[None]:
        return all_of([p.send_to_transfer_dead_letter([drafts[i] for i in indexes], reason, description)
                       for p, indexes in self.route(drafts)])

    def cancel_scheduled(self, sequence_numbers: list[int]) -> asyncio.Future[None]:
        return all_of([p.cancel_scheduled(numbers) for p, numbers in self._by_sequence_number(sequence_numbers)])

    # ---- settlement by lock token -------------------------------------------------------------------

    def holder(self, token: uuid.UUID) -> PartitionActor:
        """The partition holding the lock (MessageLockLost when none does)."""
        for partition in self.partitions:
            if partition.holds(token):
                return partition
        raise MessageLockLost("the lock token is unknown or the lock was lost")

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]:
        return self.holder(token).complete(token)

    def abandon(self, token: uuid.UUID, properties_to_modify: dict[Any, Any] | None = None) -> asyncio.Future[None]:
        return self.holder(token).abandon(token, properties_to_modify)

    def defer(self, token: uuid.UUID, properties_to_modify: dict[Any, Any] | None = None) -> asyncio.Future[None]:
        return self.holder(token).defer(token, properties_to_modify)

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None) -> asyncio.Future[None]:
        return self.holder(token).dead_letter(token, reason, description)

    def renew_lock(self, token: uuid.UUID) -> int:
        return self.holder(token).renew_lock(token)

    def release(self, token: uuid.UUID) -> None:
        for partition in self.partitions:
            if partition.holds(token):
                partition.release(token)
                return

    # ---- browsing and deferred messages -------------------------------------------------------------

    def peek(self, sub: SubQueue, from_sequence_number: int, count: int,
             session_id: str | None = None) -> list[MessageRecord]:
        """From the partition ``from_sequence_number`` names onwards, partition by partition; a
        partition whose store is unavailable is skipped (the seed: peek may return fewer)."""
        if session_id is not None:
            return self.for_key(session_id).peek(sub, from_sequence_number, count, session_id)
        first = min(partition_of_sequence_number(max(from_sequence_number, 0)), len(self.partitions) - 1)
        found: list[MessageRecord] = []
        for index in range(first, len(self.partitions)):
            partition = self.partitions[index]
            if len(found) >= count:
                break
            if not partition.available:
                continue
            start = from_sequence_number if index == first else index << PARTITION_SHIFT
            found += partition.peek(sub, start, count - len(found))
        return found

    def lock_deferred(self, sub: SubQueue, sequence_numbers: list[int],
                      owner: Any) -> tuple[asyncio.Future[None], list[tuple[MessageRecord, Lock]]]:
        futures, taken = [], []
        for partition, numbers in self._by_sequence_number(sequence_numbers):
            future, locked = partition.lock_deferred(sub, numbers, owner)
            futures.append(future)
            taken += locked
        return all_of(futures), taken

    def take_deferred(self, sub: SubQueue,
                      sequence_numbers: list[int]) -> tuple[asyncio.Future[None], list[MessageRecord]]:
        futures, records = [], []
        for partition, numbers in self._by_sequence_number(sequence_numbers):
            future, taken = partition.take_deferred(sub, numbers)
            futures.append(future)
            records += taken
        return all_of(futures), records

    # ---- receivers ----------------------------------------------------------------------------------

    def _consumer_partitions(self, consumer: Consumer) -> list[PartitionActor]:
        session_id = getattr(consumer, "session_id", None)
        return [self.for_key(session_id)] if isinstance(session_id, str) else self.partitions

    def add_consumer(self, consumer: Consumer) -> None:
        for partition in self._consumer_partitions(consumer):
            partition.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        for partition in self.partitions:
            partition.remove_consumer(consumer)

    def drop_owner(self, owner: Any) -> None:
        for partition in self.partitions:
            partition.drop_owner(owner)

    def credit_changed(self, consumer: Consumer) -> None:
        for partition in self._consumer_partitions(consumer):
            partition.credit_changed(consumer)

    # ---- sessions -----------------------------------------------------------------------------------

    def accept_session(self, owner: Any, session_id: str | None, timeout_ms: int) -> asyncio.Future[tuple[str, int]]:
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

        def answered(partition: PartitionActor, future: asyncio.Future[tuple[str, int]]) -> None:
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

    def cancel_session_wait(self, owner: Any) -> None:
        for partition in self.partitions:
            partition.cancel_session_wait(owner)

    def renew_session_lock(self, session_id: str) -> int:
        return self.for_key(session_id).renew_session_lock(session_id)

    def get_session_state(self, session_id: str) -> bytes | None:
        return self.for_key(session_id).get_session_state(session_id)

    def set_session_state(self, session_id: str, state: bytes | None) -> asyncio.Future[None]:
        return self.for_key(session_id).set_session_state(session_id, state)

    def list_sessions(self, updated_after: int | None) -> list[str]:
        return sorted({s for p in self.partitions if p.available for s in p.list_sessions(updated_after)})


def v1_only(actor: PartitionActor | PartitionedActor | CoreActor, what: str) -> PartitionActor | PartitionedActor:
    """``actor`` when it runs on the version-1 path; a queue on the version-2 core does not do
    ``what`` yet, and says so (amqp:not-implemented) instead of pretending."""
    if isinstance(actor, PartitionActor | PartitionedActor):
        return actor
    raise NotImplementedOperation(f"{what} is not available on a queue run by the version-2 core yet "
                                  "(serve with --core v1)")


def each(actor: PartitionActor | PartitionedActor | CoreActor) -> list[PartitionActor | CoreActor]:
    """The partition actors behind an entity's actor."""
    return list(actor.partitions) if isinstance(actor, PartitionedActor) else [actor]


def at_index(any_actor: PartitionActor | PartitionedActor | CoreActor, index: int | None,
             pick: Callable[[PartitionedActor], PartitionActor] | None = None) -> PartitionActor:
    """The partition ``index`` of a partitioned actor (modulo its count), or ``pick``'s choice when
    there is no index; a non-partitioned actor is its own single partition. A queue on the
    version-2 core takes no forwarded or fanned-out copies yet (NotImplementedOperation)."""
    actor = v1_only(any_actor, "auto-forwarding into it")
    if not isinstance(actor, PartitionedActor):
        return actor
    if index is not None:
        return actor.partitions[index % len(actor.partitions)]
    if pick is not None:
        return pick(actor)
    return actor.next_partition()
