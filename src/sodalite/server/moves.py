"""Moving messages between entities (resubmit, move, redrive) and purging them.

Theory of operation. A move takes messages by sequence number out of a source sub-queue (an
entity's own queue, whatever their state, or its dead-letter queues) and appends them to a target
queue or subscription, or fans them out into a topic. The message keeps its MessageId, its
properties and its body; its delivery count starts again at 0, the dead-letter reason and
description and ``x-opt-deadletter-source`` are removed, and a scheduled or deferred message
arrives active. The target's duplicate detection does not apply (a move is not a send). Locked
messages are skipped: someone is working on them.

Atomicity, per chunk of messages and per (source partition, target partition) pair:

* **same store** — the target's append and the source's delete are one store transaction, run in
  the source actor's batch (``commit_transaction``); the new records become visible in the target
  only after it commits, and a failed commit rebuilds the source from the store, where the
  messages still are.
* **across stores** — the target appends the messages together with one *move key* each
  (``<source store>/<source partition's path>/<partition>/<sequence number>``) in one transaction
  of its own store; only then does the source delete its copies; then the target forgets the
  keys. A crash after the target's commit leaves the source copy, and a retry of the move finds
  its key in the target and deletes the source copy without appending it again: never lost,
  never doubled.
* **into a topic** — each message fans out as a send to the topic would (every subscription's
  rules applied, actions, forwarding and filter dead-lettering included; the topic's duplicate
  detection not applied). The copies for actors in the source's store join the source's delete
  in one transaction; each actor in another store commits its copies with the source message's
  move key first, as above. A message no subscription takes leaves the source and goes nowhere,
  as a send would.

The messages leave the source's memory before either commit, so no receiver can lock them while
they move. Purge is the same without a target: a delete per chunk, locked messages skipped.

A source queue run by the version-2 core (``server/core_actor.py``, ``--core v2``) holds no
messages in memory: the selection reads the store page by page (:func:`select_messages`; the
console's browsing reads it the same way), and each chunk is fetched from the store by number,
its edits computed here (:func:`moved_draft`; a new enqueued time and the expiry the target's
time-to-live gives), and handed to the source sub-queue's core as one ``MoveOut``: a fenced
``MoveMessages`` that deletes the rows not locked at its ``now`` and appends them to the target
queue's partition in the SAME store transaction (or only deletes them, for a purge). The reply
comes after the commit; then the target's core is told ``Arrived`` and reads them. A target that is
a queue, subscription or topic on the core in the source's store takes that one transaction (a
topic into its own partition, whose activator fans each message out to the subscriptions as it
does a scheduled message that came due: the copies and the topic row's completion are one batch).

**Across paths and stores** (a source on the core into another store, a partitioned queue or the
version-1 path; a version-1 source into anything on the core) there is no single transaction. The
target appends the messages together with their move keys first, durably (:func:`_append_keyed`:
on the core ``CoreActor.append_moved``, one transaction of the target's store outside its core,
which is told ``Arrived``; on version 1 ``append_moved`` / ``append_moved_copies``); only then does
the source delete them, fenced (on the core: a ``MoveOut`` without target, which skips rows locked
at its time; on version 1 the rows left the source's memory before the append); then the keys of
the rows deleted are forgotten. At least once: a crash between the append and the delete leaves the
source copy, and so does a receiver that locked a row of a core source in between (logged); a
repeat of the move finds the key in the target and deletes the source copy without appending it
again. A partitioned queue or topic on the core as the target takes each message into the partition
its key picks (keyless ones round robin), as a send would: a topic partition takes them into its own
partition, whose activator fans them out.

**A partitioned queue on the core as the source**: each partition's core moves its own rows, as a
non-partitioned queue's does (the numbers name their partition); the selection reads the partitions
one by one from the store, and a purge deletes through each partition's core.
Known differences from the version-1 path: the copy keeps the row's own time-to-live and scheduled time
(only its expiry is capped by the target's default), and a row whose annotations a receiver
changed (abandon with properties) between the chunk's fetch and its move keeps the fetched ones.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode
from sodalite.errors import EntityNotFound, InvalidOperation
from sodalite.model.entities import SqlFilter
from sodalite.model.filters import CompiledFilter, compile_filter
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import LAST_INSTANT_MS, MessageDraft
from sodalite.model.store_ops import MoveItem as CoreMoveItem
from sodalite.server import wire
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.fanout import message_view
from sodalite.server.partition_actor import FanOut, PartitionActor, SubQueue, fan_out_ops
from sodalite.server.partitioned_actor import (
    OnCore,
    PartitionedActor,
    PartitionedCoreActor,
    each,
    partition_of_sequence_number,
    v1_only,
)
from sodalite.server.registry import TOPIC, Entity
from sodalite.store.port import AppendMessages, DeleteMessages, StoreOp

log = logging.getLogger(__name__)

CHUNK = 1000  # messages per transaction
Progress = Callable[[int, int], None]  # (done so far, total)
_ANNOTATIONS_TO_DROP = frozenset({wire.DEAD_LETTER_SOURCE})
# The broker's plan of a topic send's copies: (topic, drafts, topic partition index) -> copies per actor.
FanOutPlan = Callable[[Entity, list[MessageDraft], int | None], list[FanOut]]


@dataclass(frozen=True, slots=True)
class MoveResult:
    moved: int  # now in the target (or, for a purge, deleted)
    skipped: int  # asked for, but locked or not there


_DEAD_LETTER_KEYS = (wire.DEAD_LETTER_REASON, wire.DEAD_LETTER_DESCRIPTION)
_DEAD_LETTER_MARKS = tuple(k.encode() for k in _DEAD_LETTER_KEYS)


def moved_draft(record: MessageRecord) -> MessageDraft:
    """The record as it enters a move's target: every property kept but the dead-letter ones.

    Only the application-properties section is decoded and re-encoded, and only when it may hold a
    dead-letter property (an application-properties section that held nothing else goes, as the
    message had none before it was dead-lettered)."""
    tail = record.tail
    if any(mark in tail for mark in _DEAD_LETTER_MARKS):
        section = next((s for s in amqp_message.split_sections(tail)
                        if s.code == amqp_message.APPLICATION_PROPERTIES), None)
        value = amqp_message.section_value(tail, section) if section is not None else None
        if section is not None and isinstance(value, dict) and any(k in value for k in _DEAD_LETTER_KEYS):
            kept = {k: v for k, v in value.items() if k not in _DEAD_LETTER_KEYS}
            encoded = amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, kept) if kept else b""
            tail = tail[: section.start] + encoded + tail[section.end :]
    annotations, count = record.annotations, record.annotation_count
    if count and wire.DEAD_LETTER_SOURCE.encode() in annotations:
        current = decode(amqp_message.encode_annotations(annotations, count)[3:])
        if isinstance(current, dict):
            kept_annotations = {k: v for k, v in current.items() if str(k) not in _ANNOTATIONS_TO_DROP}
            annotations, count = amqp_message.map_entries(kept_annotations), len(kept_annotations)
    return MessageDraft(record.message_id, record.session_id, record.partition_key, record.time_to_live, None,
                        record.durable, record.priority, annotations, count, tail)


def _partition_of(actor: PartitionActor | PartitionedActor, sequence_number: int) -> PartitionActor | None:
    if not isinstance(actor, PartitionedActor):
        return actor
    index = partition_of_sequence_number(sequence_number)
    return actor.partitions[index] if index < len(actor.partitions) else None


def _by_partition(actor: PartitionActor | PartitionedActor,
                  sequence_numbers: Iterable[int]) -> list[tuple[PartitionActor, list[int]]]:
    groups: dict[int, tuple[PartitionActor, list[int]]] = {}
    for number in dict.fromkeys(sequence_numbers):
        partition = _partition_of(actor, number)
        if partition is not None:
            groups.setdefault(id(partition), (partition, []))[1].append(number)
    return list(groups.values())


def select(entity: Entity, sub: SubQueue, states: frozenset[MessageState] | None = None,
           sql_filter: str | None = None) -> list[int]:
    """Sequence numbers of the sub-queue's messages (in ``states``, matching ``sql_filter`` over
    their properties, when given), in order. A filter that does not parse raises FilterSyntaxError."""
    compiled = compile_filter(SqlFilter(sql_filter)) if sql_filter else None
    numbers: list[int] = []
    for partition in each(v1_only(entity.actor, "selecting messages")):
        assert isinstance(partition, PartitionActor)
        messages = partition.queues[sub].messages
        for seq in sorted(messages):
            record = messages[seq]
            if states is not None and record.state not in states:
                continue
            if compiled is not None and not compiled.matches(message_view(wire.forwarded_draft(record))):
                continue
            numbers.append(seq)
    return numbers


PAGE = 500  # rows per store read while selecting from a queue on the core


async def select_messages(entity: Entity, sub: SubQueue, states: frozenset[MessageState] | None = None,
                          sql_filter: str | None = None) -> list[int]:
    """:func:`select` for any entity: a queue on the core (each partition of a partitioned one, in
    order) is read from the store, page by page."""
    actor = entity.actor
    if not isinstance(actor, CoreActor | PartitionedCoreActor):
        return select(entity, sub, states, sql_filter)
    compiled = compile_filter(SqlFilter(sql_filter)) if sql_filter else None
    numbers: list[int] = []
    for partition in each(actor):
        assert isinstance(partition, CoreActor)
        numbers += await _select_on_core(partition, sub, states, compiled)
    return numbers


async def _select_on_core(actor: CoreActor, sub: SubQueue, states: frozenset[MessageState] | None,
                          compiled: CompiledFilter | None) -> list[int]:
    numbers: list[int] = []
    start = 0
    while True:
        page = await actor.peek(sub, start, PAGE, states=states if states is not None else ALL_STATES)
        if not page:
            return numbers
        numbers += [r.sequence_number for r in page
                    if compiled is None or compiled.matches(message_view(wire.forwarded_draft(r)))]
        start = page[-1].sequence_number + 1


def resolve_target(broker_route: Callable[[Entity], Entity], target: Entity) -> Entity:
    """Where a move into ``target`` lands: past its ForwardTo chain (a queue, subscription or topic)."""
    return broker_route(target)


def _check_target(target: Entity, records: Sequence[MessageRecord]) -> None:
    if target.requires_session and any(r.session_id is None for r in records):
        raise InvalidOperation(f"'{target.name}' requires sessions, and a message to move has no SessionId")


def _route_drafts(target: Entity, drafts: list[MessageDraft]) -> list[tuple[PartitionActor, list[int]]]:
    actor = v1_only(target.actor, "moving messages into it")
    if isinstance(actor, PartitionedActor):
        return actor.route(drafts)
    return [(actor, list(range(len(drafts))))]


async def move(source: Entity, sub: SubQueue, sequence_numbers: Sequence[int], target: Entity, *,
               store_name: Callable[[PartitionActor], str], states: frozenset[MessageState] | None = None,
               chunk: int = CHUNK, progress: Progress | None = None, fan_out: FanOutPlan | None = None) -> MoveResult:
    """Move the named messages from ``source``'s ``sub`` (those in ``states``, when given) into
    ``target`` (a queue, subscription or topic, already resolved past forwarding); see the module
    docstring for what is kept and how. A topic needs ``fan_out``, the broker's plan of a send's copies."""
    if target.kind == TOPIC and fan_out is None and not isinstance(target.actor, OnCore):
        raise InvalidOperation(f"'{target.name}' is a topic, and this move has no way to fan out into it")
    if isinstance(source.actor, CoreActor):
        return await _move_on_core(source.actor, sub, sequence_numbers, target, states, chunk, progress, fan_out)
    if isinstance(source.actor, PartitionedCoreActor):
        return await _move_from_partitions(source.actor, sub, sequence_numbers, target, states, chunk, progress,
                                           fan_out)
    groups = _by_partition(v1_only(source.actor, "moving messages"), sequence_numbers)
    for partition, numbers in groups:  # refuse up front what the target could never take
        messages = partition.queues[sub].messages
        _check_target(target, [messages[n] for n in numbers if n in messages])
    total = sum(len(numbers) for _, numbers in groups)
    moved = done = 0
    for partition, numbers in groups:
        for start in range(0, len(numbers), chunk):
            part = numbers[start : start + chunk]
            if isinstance(target.actor, OnCore):
                moved += await _move_chunk_keyed(partition, sub, part, target, store_name, states, fan_out)
            elif target.kind == TOPIC:
                assert fan_out is not None
                moved += await _move_chunk_to_topic(partition, sub, part, target, fan_out, store_name, states)
            else:
                moved += await _move_chunk(partition, sub, part, target, store_name, states)
            done += len(part)
            if progress is not None:
                progress(done, total)
    return MoveResult(moved, total - moved)


async def _move_chunk(source: PartitionActor, sub: SubQueue, numbers: list[int], target: Entity,
                      store_name: Callable[[PartitionActor], str], states: frozenset[MessageState] | None) -> int:
    records = source.take_for_move(sub, numbers, states)
    if not records:
        return 0
    drafts = [moved_draft(r) for r in records]
    try:
        routed = _route_drafts(target, drafts)
    except Exception:
        source.resynchronise()  # they are still stored: bring them back
        raise
    ops: list[StoreOp] = []
    forwarded: list[tuple[PartitionActor, SubQueue, MessageRecord]] = []
    elsewhere: list[tuple[PartitionActor, list[int]]] = []
    for partition, indexes in routed:
        if partition.worker is source.worker:
            appended = partition.accept_forwarded([drafts[i] for i in indexes])
            ops.append(AppendMessages(partition.ref, tuple(appended)))
            forwarded.extend((partition, SubQueue.MAIN, r) for r in appended)
        else:
            elsewhere.append((partition, indexes))
    source_ref = source.refs[sub]
    for partition, indexes in elsewhere:
        keys = [f"{store_name(source)}/{source_ref.entity}/{source_ref.partition}/{records[i].sequence_number}"
                for i in indexes]
        try:
            future, _ = partition.append_moved([drafts[i] for i in indexes], keys)
            await future
        except Exception:
            source.resynchronise()  # the target did not take them: they are still in the source's store
            raise
    ops.append(DeleteMessages(source_ref, tuple(r.sequence_number for r in records)))
    await source.commit_transaction(ops, forwarded)
    if elsewhere:  # a rebuild of the source while the target committed may have brought copies back
        source.queues[sub].take_unlocked(r.sequence_number for r in records)
    for partition, indexes in elsewhere:
        keys = [f"{store_name(source)}/{source_ref.entity}/{source_ref.partition}/{records[i].sequence_number}"
                for i in indexes]
        try:
            await partition.forget_move_keys(keys)
        except Exception:  # a key left behind costs a row, never a message
            log.warning("could not forget %d move keys in %s", len(keys), partition.ref)
    return len(records)


def _move_key(store_name: Callable[[PartitionActor], str], source: PartitionActor, sub: SubQueue,
              sequence_number: int) -> str:
    ref = source.refs[sub]
    return f"{store_name(source)}/{ref.entity}/{ref.partition}/{sequence_number}"


async def _move_chunk_to_topic(source: PartitionActor, sub: SubQueue, numbers: list[int], topic: Entity,
                               fan_out: FanOutPlan, store_name: Callable[[PartitionActor], str],
                               states: frozenset[MessageState] | None) -> int:
    """A chunk into a topic: each message's copies as a send would make them (rules applied, no
    duplicate detection). Copies for actors in the source's store join the source's delete in one
    transaction; each actor in another store first commits its copies under the source message's
    move key (one key per message and actor), as a move into a queue does."""
    records = source.take_for_move(sub, numbers, states)
    if not records:
        return 0
    drafts = [moved_draft(r) for r in records]
    partitioned = isinstance(topic.actor, PartitionedActor)
    here: list[FanOut] = []
    elsewhere: dict[int, tuple[PartitionActor, list[tuple[str, FanOut]]]] = {}
    try:
        ttl_cap = each(topic.actor)[0].settings.default_ttl
        for topic_partition, indexes in _route_drafts(topic, drafts):
            topic_partition.check_transactional_send([], stored_here=False)  # available, or refuse now
            index = topic_partition.ref.partition if partitioned else None
            for i in indexes:
                key = _move_key(store_name, source, sub, records[i].sequence_number)
                for target in fan_out(topic, [drafts[i]], index):
                    target.actor.check_transactional_send([], stored_here=False)
                    if target.actor.worker is source.worker:
                        here.append(target)
                    else:
                        elsewhere.setdefault(id(target.actor), (target.actor, []))[1].append((key, target))
        for actor, copies in elsewhere.values():
            await actor.append_moved_copies(copies, ttl_cap)
        ops, forwarded = fan_out_ops(here, ttl_cap)
    except Exception:
        source.resynchronise()  # they are still stored: bring them back
        raise
    ops.append(DeleteMessages(source.refs[sub], tuple(r.sequence_number for r in records)))
    await source.commit_transaction(ops, forwarded)
    if elsewhere:  # a rebuild of the source while the targets committed may have brought copies back
        source.queues[sub].take_unlocked(r.sequence_number for r in records)
    for actor, copies in elsewhere.values():
        try:
            await actor.forget_move_keys(list(dict.fromkeys(key for key, _ in copies)))
        except Exception:  # a key left behind costs a row, never a message
            log.warning("could not forget %d move keys in %s", len(copies), actor.ref)
    return len(records)


ForgetKeys = Callable[[list[str]], Awaitable[object]]


async def _append_keyed(target: Entity, drafts: list[MessageDraft], keys: list[str],
                        fan_out: FanOutPlan | None) -> list[tuple[ForgetKeys, list[str]]]:
    """Append ``drafts`` to ``target`` (any entity, on either path, in any store), each under its move
    key, durably; a key the target already has is skipped (an earlier attempt appended it). A topic
    on the core takes them into its own partition, whose activator fans them out with the rules
    (server/topic_actor.py); a topic on the version-1 path takes each message's copies as a send
    makes them (``fan_out``). Returns, per actor that took some, how to forget their keys."""
    actor = target.actor
    if isinstance(actor, CoreActor):
        await actor.append_moved(drafts, keys)
        return [(actor.forget_move_keys, keys)]
    if isinstance(actor, PartitionedCoreActor):
        forget: list[tuple[ForgetKeys, list[str]]] = []
        for core_partition, indexes in actor.route(drafts):
            part_keys = [keys[i] for i in indexes]
            await core_partition.append_moved([drafts[i] for i in indexes], part_keys)
            forget.append((core_partition.forget_move_keys, part_keys))
        return forget
    if target.kind == TOPIC:
        assert fan_out is not None
        partitioned = isinstance(actor, PartitionedActor)
        ttl_cap = each(actor)[0].settings.default_ttl
        groups: dict[int, tuple[PartitionActor, list[tuple[str, FanOut]]]] = {}
        for topic_partition, indexes in _route_drafts(target, drafts):
            topic_partition.check_transactional_send([], stored_here=False)  # available, or refuse now
            index = topic_partition.ref.partition if partitioned else None
            for i in indexes:
                for copy in fan_out(target, [drafts[i]], index):
                    copy.actor.check_transactional_send([], stored_here=False)
                    groups.setdefault(id(copy.actor), (copy.actor, []))[1].append((keys[i], copy))
        forget = []
        for into, copies in groups.values():
            await into.append_moved_copies(copies, ttl_cap)
            forget.append((into.forget_move_keys, list(dict.fromkeys(k for k, _ in copies))))
        return forget
    forget = []
    for partition, indexes in _route_drafts(target, drafts):
        part_keys = [keys[i] for i in indexes]
        future, _ = partition.append_moved([drafts[i] for i in indexes], part_keys)
        await future
        forget.append((partition.forget_move_keys, part_keys))
    return forget


async def _forget(forget: list[tuple[ForgetKeys, list[str]]], gone: set[str]) -> None:
    """Forget the keys of the source copies that are gone (a key left behind costs a row, never a message)."""
    for forget_keys, keys in forget:
        left = [k for k in keys if k in gone]
        if not left:
            continue
        try:
            await forget_keys(left)
        except Exception:
            log.warning("could not forget %d move keys", len(left))


async def _move_chunk_keyed(source: PartitionActor, sub: SubQueue, numbers: list[int], target: Entity,
                            store_name: Callable[[PartitionActor], str], states: frozenset[MessageState] | None,
                            fan_out: FanOutPlan | None) -> int:
    """A chunk from a version-1 entity into an entity on the core: out of the source's memory (no
    receiver can lock them meanwhile), appended to the target under their move keys, then deleted
    from the source's store, then the keys forgotten (see the module docstring)."""
    records = source.take_for_move(sub, numbers, states)
    if not records:
        return 0
    keys = [_move_key(store_name, source, sub, r.sequence_number) for r in records]
    try:
        forget = await _append_keyed(target, [moved_draft(r) for r in records], keys, fan_out)
    except Exception:
        source.resynchronise()  # the target did not take them (all): they are still in the source's store
        raise
    numbers_taken = tuple(r.sequence_number for r in records)
    await source.commit_transaction([DeleteMessages(source.refs[sub], numbers_taken)], [])
    source.queues[sub].take_unlocked(numbers_taken)  # a rebuild while the target committed may have brought them back
    await _forget(forget, set(keys))
    return len(records)


def _core_move_item(record: MessageRecord, now: int, default_ttl: int | None) -> CoreMoveItem:
    """What a row becomes in a move's target queue: the version-1 path's :func:`moved_draft` edits
    (only the parts that change are sent), count reset, enqueued now, expiring by the time-to-live
    that applies in the target (the message's, capped by the target's default)."""
    draft = moved_draft(record)
    ttl = record.time_to_live
    effective = default_ttl if ttl is None else (ttl if default_ttl is None else min(ttl, default_ttl))
    annotations = draft.annotations if draft.annotations != record.annotations else None
    return CoreMoveItem(record.sequence_number, annotations=annotations,
                        annotation_count=draft.annotation_count if annotations is not None else 0,
                        tail=draft.tail if draft.tail != record.tail else None, reset_delivery_count=True,
                        enqueued_time=now,
                        expires_at=None if effective is None else min(now + effective, LAST_INSTANT_MS))


async def _move_on_core(source: CoreActor, sub: SubQueue, sequence_numbers: Sequence[int], target: Entity,
                        states: frozenset[MessageState] | None, chunk: int, progress: Progress | None,
                        fan_out: FanOutPlan | None) -> MoveResult:
    """A move from a queue on the core: per chunk, the rows read from the store, then one MoveOut
    into a queue, subscription or topic on the core in the same store (one transaction), or else
    the keyed append-then-delete (see the module docstring)."""
    destination = target.actor
    numbers = list(dict.fromkeys(sequence_numbers))
    if target.requires_session:  # refuse up front what the target could never take
        for start in range(0, len(numbers), chunk):
            rows = await source.fetch(sub, numbers[start : start + chunk])
            _check_target(target, [r.record for r in rows if states is None or r.record.state in states])
    same_store = isinstance(destination, CoreActor) and destination.worker is source.worker
    ref = source.refs[sub]
    key_prefix = f"{source.worker.name}/{ref.entity}/{ref.partition}/"
    moved = done = 0
    for start in range(0, len(numbers), chunk):
        part = numbers[start : start + chunk]
        rows = await source.fetch(sub, part)
        now = source.clock.now()
        records = [r.record for r in rows if (states is None or r.record.state in states) and not r.locked_at(now)]
        if records and same_store:
            assert isinstance(destination, CoreActor)
            target_ref = destination.refs[SubQueue.MAIN]
            items = [_core_move_item(r, now, destination.settings.default_ttl) for r in records]
            taken = sum(1 for n in await source.move_out(sub, items, target_ref) if n is not None)
            moved += taken
            if taken and destination is not source:  # into a sub-queue of its own: its runner said so
                destination.arrived(target_ref, taken)
        elif records:
            keys = [f"{key_prefix}{r.sequence_number}" for r in records]
            forget = await _append_keyed(target, [moved_draft(r) for r in records], keys, fan_out)
            deleted = [n for n in await source.move_out(sub, [CoreMoveItem(r.sequence_number) for r in records],
                                                        None) if n is not None]
            moved += len(deleted)
            if len(deleted) < len(records):
                log.warning("move from %s: %d messages were locked by a receiver while they were copied into %s; "
                            "they stay in both until the move is repeated, which removes the source copies "
                            "without copying them again (their move keys are kept)", ref.entity,
                            len(records) - len(deleted), target.name)
            await _forget(forget, {f"{key_prefix}{n}" for n in deleted})
        done += len(part)
        if progress is not None:
            progress(done, len(numbers))
    return MoveResult(moved, len(numbers) - moved)


def _by_core_partition(actor: PartitionedCoreActor, sequence_numbers: Iterable[int]) -> tuple[
        list[tuple[CoreActor, list[int]]], int]:
    """The numbers grouped by the partition they name, in order; and how many name none."""
    groups: dict[int, list[int]] = {}
    unknown = 0
    for number in dict.fromkeys(sequence_numbers):
        index = partition_of_sequence_number(number)
        if index < len(actor.partitions):
            groups.setdefault(index, []).append(number)
        else:
            unknown += 1
    return [(actor.partitions[i], groups[i]) for i in sorted(groups)], unknown


async def _move_from_partitions(source: PartitionedCoreActor, sub: SubQueue, sequence_numbers: Sequence[int],
                                target: Entity, states: frozenset[MessageState] | None, chunk: int,
                                progress: Progress | None, fan_out: FanOutPlan | None) -> MoveResult:
    """A move from a partitioned queue on the core: each partition's core moves its own rows
    (:func:`_move_on_core`), the progress told over all of them."""
    groups, unknown = _by_core_partition(source, sequence_numbers)
    total = sum(len(numbers) for _, numbers in groups) + unknown
    moved = skipped = done = 0
    for partition, numbers in groups:
        def told(count: int, _: int, base: int = done) -> None:
            if progress is not None:
                progress(base + count, total)

        result = await _move_on_core(partition, sub, numbers, target, states, chunk, told, fan_out)
        moved, skipped, done = moved + result.moved, skipped + result.skipped, done + len(numbers)
    return MoveResult(moved, skipped + unknown)


async def _purge_on_core(actor: CoreActor, sub: SubQueue, states: frozenset[MessageState] | None,
                         numbers: list[int], chunk: int) -> MoveResult:
    deleted = 0
    for start in range(0, len(numbers), chunk):
        part = numbers[start : start + chunk]
        if states is not None:  # only those still in the states asked for
            part = [r.record.sequence_number for r in await actor.fetch(sub, part) if r.record.state in states]
        if part:
            deleted += sum(1 for n in await actor.move_out(sub, [CoreMoveItem(n) for n in part], None)
                           if n is not None)
    return MoveResult(deleted, len(numbers) - deleted)


async def purge(entity: Entity, sub: SubQueue, states: frozenset[MessageState] | None = None, *,
                sequence_numbers: Sequence[int] | None = None, chunk: int = 5000) -> MoveResult:
    """Delete the sub-queue's unlocked messages (those in ``states``, or named, when given)."""
    actor = entity.actor
    if isinstance(actor, CoreActor | PartitionedCoreActor):
        if sequence_numbers is None:
            numbers = await select_messages(entity, sub, states)
        else:
            numbers = list(dict.fromkeys(sequence_numbers))
        if isinstance(actor, CoreActor):
            return await _purge_on_core(actor, sub, states, numbers, chunk)
        groups, unknown = _by_core_partition(actor, numbers)
        results = [await _purge_on_core(partition, sub, states, part, chunk) for partition, part in groups]
        return MoveResult(sum(r.moved for r in results), sum(r.skipped for r in results) + unknown)
    numbers = list(sequence_numbers) if sequence_numbers is not None else select(entity, sub, states)
    deleted = 0
    for partition, group in _by_partition(v1_only(entity.actor, "purging"), numbers):
        for start in range(0, len(group), chunk):
            taken = partition.take_for_move(sub, group[start : start + chunk], states)
            if taken:
                await partition.commit_transaction(
                    [DeleteMessages(partition.refs[sub], tuple(r.sequence_number for r in taken))], [])
                deleted += len(taken)
    return MoveResult(deleted, len(numbers) - deleted)


def require_entity(found: Entity | None, path: str) -> Entity:
    if found is None:
        raise EntityNotFound(f"the messaging entity '{path}' could not be found")
    return found

