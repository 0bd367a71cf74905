"""A messaging store kept in dictionaries: for tests, development and fault injection.

It enforces the same rules as the durable adapters so that the contract suite can hold every
adapter to one behaviour:

* ``apply`` is all-or-nothing: the batch is applied to copies, which replace the live state only
  when every operation succeeded;
* appending a sequence number that the partition already holds fails the whole batch (the
  durable adapters reject it as a primary-key violation);
* every integer must fit a signed 64-bit column, and every message id of the duplicate-detection
  history must be encodable as UTF-8 (a lone surrogate is not);
* entity properties are stored as JSON text and decoded afresh on every load, so what comes back
  is what a durable adapter would return (tuples become lists, a caller mutating a loaded dict
  changes nothing);
* entity paths compare case-insensitively (ASCII only, like SQLite's ``NOCASE``), both for
  entity definitions and for the partitions that hold their messages and duplicate-detection
  history; deleting an entity also deletes its sub-queues' partitions (``<path>/$...``).

* the operations and reads are plain loops over these dictionaries, written to be
  obviously right rather than fast: this adapter is the reference the contract suite's
  differential test holds the durable adapters to (counts and next-due times are recomputed
  from the messages on every read).

Nothing survives the process, of course: a new ``MemoryStore`` starts empty.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.store import port
from sodalite.store.memory.handlers import (
    HANDLERS,
    _Batch,
    _key,
    _Partition,
    _PartitionKey,
    _StoredEntity,
)


class MemoryStore:
    """The store port over plain dictionaries; see the module docstring for the rules it enforces."""

    def __init__(self) -> None:
        self._opened = False
        self._closed = False
        self._partitions: dict[_PartitionKey, _Partition] = {}
        self._entities: dict[str, _StoredEntity] = {}  # keyed by _fold(path)
        # Subscriptions' rules: (_fold(subscription path), _fold(rule name)) -> (position, rule JSON)
        self._rules: dict[tuple[str, str], tuple[int, str]] = {}
        # AutoDeleteOnIdle registrations: (_fold(path), node) -> (last activity, receivers, refreshed at)
        self._activity: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._fail_next: Exception | None = None

    # -- test hooks -------------------------------------------------------------------------------

    def fail_next_apply(self, exc: Exception) -> None:
        """Make the next :meth:`apply` raise StoreUnavailable (caused by ``exc``) and apply nothing."""
        self._fail_next = exc

    # -- the port ---------------------------------------------------------------------------------

    def open(self) -> None:
        if self._closed:
            raise StoreUnavailable("the memory store is closed")
        self._opened = True

    def apply(self, batch: Sequence[port.StoreOp]) -> tuple[port.OpResult, ...]:
        self._require_open()
        if self._fail_next is not None:
            exc, self._fail_next = self._fail_next, None
            if isinstance(exc, StoreUnavailable):
                raise exc
            raise StoreUnavailable(f"injected store failure: {exc}") from exc
        batch = port.prepare_batch(batch)
        t = _Batch(self._partitions, self._entities, self._activity, self._rules)
        results: list[port.OpResult] = []
        for index, op in enumerate(batch):
            results.append(HANDLERS[type(op)](t, op))
            port.check_all_or_none(index, op, results[-1])  # raising leaves the store as it was
        # Every operation succeeded: publish the new state in one step.
        self._partitions = t.partitions
        self._entities = t.entities
        self._activity = t.activity
        self._rules = t.rules
        return tuple(results)

    def load_entities(self) -> list[port.EntityRecord]:
        self._require_open()
        records = []
        for folded, e in sorted(self._entities.items()):
            properties = json.loads(e.properties_json)
            if e.kind == port.SUBSCRIPTION_KIND:
                mine = sorted((position, name, rule) for (sub, name), (position, rule) in self._rules.items()
                              if sub == folded)
                properties["Rules"] = [json.loads(rule) for _, _, rule in mine]
            records.append(port.EntityRecord(path=e.path, kind=e.kind, properties=properties))
        return records

    def stats(self, ref: port.PartitionRef) -> port.PartitionStats:
        self._require_open()
        part = self._partitions.get(_key(ref))
        if part is None:
            return port.PartitionStats(message_count=0, size_in_bytes=0)
        return port.PartitionStats(
            message_count=len(part.messages),
            size_in_bytes=sum(m.size for m in part.messages.values()),
        )

    # -- reads: plain scans, the reference the durable adapters are held to -------------

    def peek(self, ref: port.PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[port.StoredMessage, ...]:
        part = self._read(ref)
        found: list[port.StoredMessage] = []
        for n in sorted(part.messages):
            if len(found) >= count:
                break
            m = part.messages[n]
            if (n >= from_sequence_number and (states is None or m.state in states)
                    and (session_id is None or m.session_id == session_id)):
                found.append(part.stored(n))
        return tuple(found)

    def session_ids(self, ref: port.PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        part = self._read(ref)
        return tuple(sorted({m.session_id for m in part.messages.values()
                             if m.session_id is not None and m.state in states}))

    def fetch(self, ref: port.PartitionRef, sequence_numbers: Sequence[int]) -> tuple[port.StoredMessage, ...]:
        part = self._read(ref)
        return tuple(part.stored(n) for n in sorted(set(sequence_numbers)) if n in part.messages)

    def counts(self, ref: port.PartitionRef) -> port.PartitionCounts:
        part = self._read(ref)
        states = [m.state for m in part.messages.values()]
        return port.PartitionCounts(
            active=states.count(MessageState.ACTIVE),
            scheduled=states.count(MessageState.SCHEDULED),
            deferred=states.count(MessageState.DEFERRED),
            size_in_bytes=sum(m.size for m in part.messages.values()),
            last_sequence_number=part.last_sequence_number,
            first_sequence_number=min(part.messages, default=None),
        )

    def next_due_many(self, refs: Sequence[port.PartitionRef], now: int) -> tuple[int | None, ...]:
        return tuple(self.next_due(ref, now) for ref in refs)

    def counts_many(self, refs: Sequence[port.PartitionRef]) -> tuple[port.PartitionCounts, ...]:
        return tuple(replace(self.counts(ref), first_sequence_number=None) for ref in refs)

    def next_due(self, ref: port.PartitionRef, now: int) -> int | None:
        part = self._read(ref)
        times: list[int] = []
        for n, m in part.messages.items():
            if m.state == MessageState.SCHEDULED and m.scheduled_enqueue_time is not None:
                times.append(m.scheduled_enqueue_time)
            lock = part.locks.get(n)
            if lock is not None and lock.until > now:
                times.append(lock.until)
            elif m.expires_at is not None:
                times.append(m.expires_at)
        times.extend(lock.until for lock in part.session_locks.values() if lock.until > now)
        return min(times, default=None)

    def partition_meta(self, ref: port.PartitionRef) -> port.PartitionMeta:
        part = self._read(ref)
        return port.PartitionMeta(
            counts=self.counts(ref),
            duplicate_history=tuple(sorted(part.history.items(), key=lambda item: (item[1], item[0]))),
            session_states=tuple((sid, state, at) for sid, (state, at) in sorted(part.session_states.items())),
            move_keys=tuple(sorted(part.move_keys)),
        )

    def _read(self, ref: port.PartitionRef) -> _Partition:
        self._require_open()
        return self._partitions.get(_key(ref)) or _Partition()

    def maintain(self) -> bool:
        return True  # memory is never full here

    def close(self) -> None:
        self._closed = True
        self._partitions = {}
        self._entities = {}
        self._rules = {}

    # -- internals --------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("the memory store is closed")
        if not self._opened:
            raise StoreUnavailable("the memory store is not open: call open() first")


