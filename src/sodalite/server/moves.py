"""Moving messages between entities (resubmit, move, redrive) and purging them.

Theory of operation. A move takes messages by sequence number out of a source sub-queue (an
entity's own queue, whatever their state, or its dead-letter queues) and appends them to a target
queue or subscription, or fans them out into a topic. The message keeps its MessageId, its
properties and its body; its delivery count starts again at 0, the dead-letter reason and
description and ``x-opt-deadletter-source`` are removed, and a scheduled or deferred message
arrives active. The target's duplicate detection does not apply (a move is not a send). Locked
messages are skipped: someone is working on them.

An entity's partition cores hold no messages in memory: the selection reads the store page by page
(:func:`select_messages`; the console's browsing reads it the same way), and each chunk is fetched
from the store by number, its edits computed here (:func:`moved_draft`; a new enqueued time and the
expiry the target's time-to-live gives), and handed to the source sub-queue's core as one
``MoveOut``: a fenced ``MoveMessages`` that deletes the rows not locked at its ``now`` and appends
them to the target queue's partition in the SAME store transaction (or only deletes them, for a
purge). The reply comes after the commit; then the target's core is told ``Arrived`` and reads
them. A target that is a queue, subscription or topic in the source's store takes that one
transaction (a topic into its own partition, whose activator fans each message out to the
subscriptions as it does a scheduled message that came due: the copies and the topic row's
completion are one batch).

**Across stores, and into a partitioned target** there is no single transaction. The target
appends the messages together with one *move key* each (``<source store>/<source partition's
path>/<partition>/<sequence number>``) first, durably (:func:`_append_keyed`:
``move_keys.append_moved``, one transaction of the target's store outside its core, which is told
``Arrived``); only then does the source delete them, fenced (a ``MoveOut`` without target, which
skips rows locked at its time); then the keys of the rows deleted are forgotten. At least once: a
crash between the append and the delete leaves the source copy, and so does a receiver that locked
a row in between (logged); a repeat of the move finds the key in the target and deletes the source
copy without appending it again. A partitioned queue as the target takes each message into the
partition its key picks (keyless ones round robin), as a send would. A topic as the target (in
another store, or partitioned) keeps nothing in its own partition: it plans each message's copies as
a send's (rules and actions as they are now, forwarding, filter dead letters; a partitioned topic in
the partition the message's key picks), and each store the copies go to stores them by one
transaction in which every partition keeps the message's key beside its copies
(``TopicActor.store_moved``, ``move_keys.store_keyed``); after the source's delete the keys are
forgotten, one batch per store. A message no subscription takes leaves the source, as a send would
drop it.

**A partitioned source**: each partition's core moves its own rows, as a non-partitioned queue's
does (the numbers name their partition); the selection reads the partitions one by one from the
store, and a purge deletes through each partition's core. The copy keeps the row's own time-to-live
and scheduled time (only its expiry is capped by the target's default), and a row whose annotations
a receiver changed (abandon with properties) between the chunk's fetch and its move keeps the
fetched ones. Purge is a fenced delete per chunk, locked messages skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode
from sodalite.errors import EntityNotFound, InvalidOperation
from sodalite.model.copies import capped_expiry
from sodalite.model.entities import SqlFilter
from sodalite.model.filters import CompiledFilter, compile_filter
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.model.partitioning import partition_of_sequence_number
from sodalite.model.store_ops import MoveItem as CoreMoveItem
from sodalite.server import wire
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.entity_settings import SubQueue
from sodalite.server.fanout import message_view
from sodalite.server.move_keys import MovedKeys, append_moved
from sodalite.server.partitioned_actor import PartitionedCoreActor, each
from sodalite.server.registry import Entity
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.store.port import ForgetMoveKeys

log = logging.getLogger(__name__)

CHUNK = 1000  # messages per transaction
Progress = Callable[[int, int], None]  # (done so far, total)
_ANNOTATIONS_TO_DROP = frozenset({wire.DEAD_LETTER_SOURCE})


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


PAGE = 500  # rows per store read while selecting from a queue on the core


async def select_messages(entity: Entity, sub: SubQueue, states: frozenset[MessageState] | None = None,
                          sql_filter: str | None = None) -> list[int]:
    """Sequence numbers of the sub-queue's messages (in ``states``, matching ``sql_filter`` over their
    properties, when given), in order, read from the store page by page (each partition of a
    partitioned entity in turn). A filter that does not parse raises FilterSyntaxError."""
    actor = entity.actor
    compiled = compile_filter(SqlFilter(sql_filter)) if sql_filter else None
    numbers: list[int] = []
    for partition in each(actor):
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


async def move(source: Entity, sub: SubQueue, sequence_numbers: Sequence[int], target: Entity, *,
               states: frozenset[MessageState] | None = None, chunk: int = CHUNK,
               progress: Progress | None = None) -> MoveResult:
    """Move the named messages from ``source``'s ``sub`` (those in ``states``, when given) into
    ``target`` (a queue, subscription or topic, already resolved past forwarding); see the module
    docstring for what is kept and how."""
    if isinstance(source.actor, PartitionedCoreActor):
        return await _move_from_partitions(source.actor, sub, sequence_numbers, target, states, chunk, progress)
    return await _move_on_core(source.actor, sub, sequence_numbers, target, states, chunk, progress)


async def _append_keyed(target: Entity, drafts: list[MessageDraft], keys: list[str]) -> list[MovedKeys]:
    """Append ``drafts`` to ``target`` (any entity, in any store), each under its move key, durably;
    a key the target already has is skipped (an earlier attempt appended it). A queue or subscription
    takes them in its partition (a partitioned one in the partition each key picks); a topic stores
    each message's copies in its subscriptions, with their keys, by one batch of each store
    (``TopicActor.store_moved``). Returns where each store keeps the keys."""
    actor = target.actor
    if isinstance(actor, TopicActor | PartitionedTopicActor):
        return await actor.store_moved(drafts, keys)
    if isinstance(actor, CoreActor):
        await append_moved(actor, drafts, keys)
        return [MovedKeys(actor.worker, {actor.refs[SubQueue.MAIN]: tuple(keys)})]
    placed: list[MovedKeys] = []
    for core_partition, indexes in actor.route(drafts):
        part_keys = tuple(keys[i] for i in indexes)
        await append_moved(core_partition, [drafts[i] for i in indexes], part_keys)
        placed.append(MovedKeys(core_partition.worker, {core_partition.refs[SubQueue.MAIN]: part_keys}))
    return placed


async def _forget(placed: list[MovedKeys], gone: set[str]) -> None:
    """Forget the keys of the source copies that are gone, one batch per store (a key left behind
    costs a row, never a message)."""
    for store in placed:
        ops = [ForgetMoveKeys(left, ref=ref) for ref, keys in store.keys.items()
               if (left := tuple(k for k in keys if k in gone))]
        if not ops:
            continue
        try:
            await store.worker.apply(ops)
        except Exception:
            log.warning("could not forget the move keys of %d partitions in '%s'", len(ops), store.worker.name)


def _core_move_item(record: MessageRecord, now: int, default_ttl: int | None) -> CoreMoveItem:
    """What a row becomes in a move's target queue: :func:`moved_draft`'s edits
    (only the parts that change are sent), count reset, enqueued now, expiring by the time-to-live
    that applies in the target (the message's, capped by the target's default)."""
    draft = moved_draft(record)
    annotations = draft.annotations if draft.annotations != record.annotations else None
    return CoreMoveItem(record.sequence_number, annotations=annotations,
                        annotation_count=draft.annotation_count if annotations is not None else 0,
                        tail=draft.tail if draft.tail != record.tail else None, reset_delivery_count=True,
                        enqueued_time=now, expires_at=capped_expiry(record.time_to_live, default_ttl, now))


async def _move_on_core(source: CoreActor, sub: SubQueue, sequence_numbers: Sequence[int], target: Entity,
                        states: frozenset[MessageState] | None, chunk: int,
                        progress: Progress | None) -> MoveResult:
    """A move from one partition core: per chunk, the rows read from the store, then one MoveOut
    into a queue, subscription or topic on the core in the same store (one transaction), or else
    the keyed append-then-delete (see the module docstring)."""
    destination = target.actor
    numbers = list(dict.fromkeys(sequence_numbers))
    if target.requires_session:  # refuse up front what the target could never take
        for start in range(0, len(numbers), chunk):
            rows = await source.fetch(sub, numbers[start : start + chunk])
            _check_target(target, [r.record for r in rows if states is None or r.record.state in states])
    same_store = destination if isinstance(destination, CoreActor) and destination.worker is source.worker else None
    moved = done = 0
    for start in range(0, len(numbers), chunk):
        part = numbers[start : start + chunk]
        rows = await source.fetch(sub, part)
        now = source.clock.now()
        records = [r.record for r in rows if (states is None or r.record.state in states) and not r.locked_at(now)]
        if records and same_store is not None:
            moved += await _move_in_store(source, sub, same_store, records, now)
        elif records:
            moved += await _move_keyed(source, sub, target, records)
        done += len(part)
        if progress is not None:
            progress(done, len(numbers))
    return MoveResult(moved, len(numbers) - moved)


async def _move_in_store(source: CoreActor, sub: SubQueue, destination: CoreActor, records: list[MessageRecord],
                         now: int) -> int:
    """One chunk into a queue, subscription or topic in the source's store: one MoveOut. Returns how many moved."""
    target_ref = destination.refs[SubQueue.MAIN]
    items = [_core_move_item(r, now, destination.settings.default_ttl) for r in records]
    taken = sum(1 for n in await source.move_out(sub, items, target_ref) if n is not None)
    if taken and destination is not source:  # into a sub-queue of its own: its runner said so
        destination.arrived(target_ref, taken)
    return taken


async def _move_keyed(source: CoreActor, sub: SubQueue, target: Entity, records: list[MessageRecord]) -> int:
    """One chunk that cannot be one transaction: appended in the target under move keys, deleted
    here, the keys of those deleted forgotten. Returns how many moved."""
    ref = source.refs[sub]
    key_prefix = f"{source.worker.name}/{ref.entity}/{ref.partition}/"
    keys = [f"{key_prefix}{r.sequence_number}" for r in records]
    # The append, the delete and the forgetting are one cross-store operation for a backup
    # (server/backup.py): it finds the chunk wholly in the source or wholly in the target.
    async with source.worker.gate.spanning():
        forget = await _append_keyed(target, [moved_draft(r) for r in records], keys)
        deleted = [n for n in await source.move_out(sub, [CoreMoveItem(r.sequence_number) for r in records], None)
                   if n is not None]
        await _forget(forget, {f"{key_prefix}{n}" for n in deleted})
    if len(deleted) < len(records):
        log.warning("move from %s: %d messages were locked by a receiver while they were copied into %s; "
                    "they stay in both until the move is repeated, which removes the source copies "
                    "without copying them again (their move keys are kept)", ref.entity,
                    len(records) - len(deleted), target.name)
    return len(deleted)


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
                                progress: Progress | None) -> MoveResult:
    """A move from a partitioned queue on the core: each partition's core moves its own rows
    (:func:`_move_on_core`), the progress told over all of them."""
    groups, unknown = _by_core_partition(source, sequence_numbers)
    total = sum(len(numbers) for _, numbers in groups) + unknown
    moved = skipped = done = 0
    for partition, numbers in groups:
        def told(count: int, _: int, base: int = done) -> None:
            if progress is not None:
                progress(base + count, total)

        result = await _move_on_core(partition, sub, numbers, target, states, chunk, told)
        moved, skipped, done = moved + result.moved, skipped + result.skipped, done + len(numbers)
    return MoveResult(moved, skipped + unknown)


async def _purge_on_core(actor: CoreActor, sub: SubQueue, states: frozenset[MessageState] | None,
                         numbers: list[int], chunk: int, progress: Progress | None = None,
                         base: int = 0, total: int = 0) -> MoveResult:
    deleted = 0
    for start in range(0, len(numbers), chunk):
        part = numbers[start : start + chunk]
        if states is not None:  # only those still in the states asked for
            part = [r.record.sequence_number for r in await actor.fetch(sub, part) if r.record.state in states]
        if part:
            deleted += sum(1 for n in await actor.move_out(sub, [CoreMoveItem(n) for n in part], None)
                           if n is not None)
        if progress is not None:
            progress(base + min(start + chunk, len(numbers)), total or len(numbers))
    return MoveResult(deleted, len(numbers) - deleted)


async def purge(entity: Entity, sub: SubQueue, states: frozenset[MessageState] | None = None, *,
                sequence_numbers: Sequence[int] | None = None, chunk: int = 5000,
                progress: Progress | None = None) -> MoveResult:
    """Delete the sub-queue's unlocked messages (those in ``states``, or named, when given); ``progress``
    hears (looked at so far, total) after each chunk."""
    actor = entity.actor
    if sequence_numbers is None:
        numbers = await select_messages(entity, sub, states)
    else:
        numbers = list(dict.fromkeys(sequence_numbers))
    if progress is not None:
        progress(0, len(numbers))
    if isinstance(actor, PartitionedCoreActor):
        groups, unknown = _by_core_partition(actor, numbers)
        results: list[MoveResult] = []
        for partition, part in groups:
            done = sum(r.moved + r.skipped for r in results)
            results.append(await _purge_on_core(partition, sub, states, part, chunk, progress, done, len(numbers)))
        return MoveResult(sum(r.moved for r in results), sum(r.skipped for r in results) + unknown)
    return await _purge_on_core(actor, sub, states, numbers, chunk, progress)


def require_entity(found: Entity | None, path: str) -> Entity:
    if found is None:
        raise EntityNotFound(f"the messaging entity '{path}' could not be found")
    return found

