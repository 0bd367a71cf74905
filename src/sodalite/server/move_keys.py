"""Messages a move brings in from another transaction, appended under their move keys.

Rules:

1. A move that cannot be one transaction with its source (from another store, or into a
   partitioned entity) appends in the target first, each message with its move key
   (``<source store>/<source partition>/<sequence number>``), in one transaction of the target's
   store outside the cores (as another node's rows: each partition's core is told ``Arrived`` after
   the commit). Only then does the source delete them; then the keys are forgotten.
2. A key the partition already has means an earlier attempt stored that message: it is skipped,
   so a retry after a crash between the append and the source's delete does not double it. A
   message's copies in one partition share its key: all or none of them.
3. The target's duplicate detection does not apply (a move is not a send). A dead-letter copy is
   numbered by its entity's partition, as a ``Publish`` numbers it.
4. Every partition is checked available before anything is stored (StoreUnavailable, nothing stored).
5. Copies for several stores are stored by ONE batch of each store, every batch run to its end; the
   first failure is raised after all have ended (a batch that committed keeps its keys, so a repeat
   skips it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.server.core_copies import KeyedCopy
from sodalite.server.entity_settings import SubQueue
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import Append, ForgetMoveKeys, PartitionRef, RememberMoveKeys

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor


@dataclass(frozen=True, slots=True)
class MovedKeys:
    """The move keys one store keeps for a move's copies, per partition: forgotten once the source
    copies are gone (``server/moves.py``)."""

    worker: StoreWorker
    keys: dict[PartitionRef, tuple[str, ...]]


async def append_moved(actor: CoreActor, drafts: Sequence[MessageDraft], keys: Sequence[str]) -> int:
    """A move's messages into ``actor``'s own queue (rules 1-3); a topic's own partition takes them as
    it takes scheduled messages that came due (its activator fans them out). Returns how many were
    appended."""
    actor._runner(SubQueue.MAIN)  # available, or StoreUnavailable
    actor._note_use()
    now = actor.clock.now()
    records = [core.record_for(d, now, actor.settings.default_ttl) for d in drafts]
    return await append_keyed(actor, SubQueue.MAIN, records, keys)


async def append_keyed(actor: CoreActor, sub: SubQueue, records: Sequence[MessageRecord],
                       keys: Sequence[str]) -> int:
    """Unnumbered ``records`` into ``actor``'s ``sub``, each under its key (rules 1-4); how many were new."""
    actor._runner(sub)  # available, or StoreUnavailable
    appended = await store_keyed([((actor, sub, r), k) for r, k in zip(records, keys, strict=True)])
    return sum(appended.values())


async def store_keyed(copies: Sequence[KeyedCopy]) -> dict[PartitionRef, int]:
    """ONE transaction of the store the ``copies`` go to (all in one store, ValueError otherwise),
    rules 1-4. Returns how many copies each partition took now."""
    if not copies:
        return {}
    worker = copies[0][0][0].worker
    groups: dict[PartitionRef, tuple[CoreActor, SubQueue, list[tuple[MessageRecord, str]]]] = {}
    for (actor, sub, record), key in copies:
        if actor.worker is not worker:
            raise ValueError(f"{actor.ref.entity} is not in the messaging store '{worker.name}'")
        actor._runner(sub)  # available, or StoreUnavailable
        groups.setdefault(actor.refs[sub], (actor, sub, []))[2].append((record, key))

    def append() -> dict[PartitionRef, int]:
        ops: list[Append | RememberMoveKeys] = []
        taken: dict[PartitionRef, int] = {}
        for ref, (actor, sub, items) in groups.items():
            known = set(worker.store.partition_meta(ref).move_keys)
            fresh = [(r, k) for r, k in items if k not in known]
            if not fresh:
                continue
            numbered_by = actor.refs[SubQueue.MAIN] if sub is SubQueue.DEAD_LETTER else None
            ops.append(Append(tuple(r for r, _ in fresh), numbered_by=numbered_by, ref=ref))
            ops.append(RememberMoveKeys(tuple(dict.fromkeys(k for _, k in fresh)), ref=ref))
            taken[ref] = len(fresh)
        if ops:
            worker.store.apply(ops)
        return taken

    taken = await worker.call(append)
    for ref, count in taken.items():
        groups[ref][0].arrived(ref, count)
    return taken


async def store_keyed_copies(copies: Sequence[KeyedCopy]) -> list[MovedKeys]:
    """Keyed copies for any stores, by ONE batch of each (rule 5). Returns each store's keys, per partition."""
    by_store: dict[StoreWorker, list[KeyedCopy]] = {}
    for keyed in copies:
        by_store.setdefault(keyed[0][0].worker, []).append(keyed)
    results = await asyncio.gather(*(store_keyed(group) for group in by_store.values()), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    placed = []
    for worker, group in by_store.items():
        keys: dict[PartitionRef, dict[str, None]] = {}
        for (actor, sub, _), key in group:
            keys.setdefault(actor.refs[sub], {})[key] = None
        placed.append(MovedKeys(worker, {ref: tuple(k) for ref, k in keys.items()}))
    return placed


async def forget_move_keys(actor: CoreActor, keys: Sequence[str], sub: SubQueue = SubQueue.MAIN) -> None:
    """The source copies of moved messages are gone: their keys are no longer needed (rule 1)."""
    await actor.worker.apply([ForgetMoveKeys(tuple(keys), ref=actor.refs[sub])])
