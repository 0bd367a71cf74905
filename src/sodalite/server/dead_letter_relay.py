"""Dead letters forwarded into another messaging store (ForwardDeadLetteredMessagesTo on the core).

Theory of operation. An entity on the partition core forwards its dead letters in the
dead-lettering's own store transaction when the target (past its ForwardTo chain) has a partition
in the same store (``DeadLetterForwarding.forward_to``). When it has none there (a partition of a
partitioned queue whose non-partitioned target lives in another store, a non-partitioned entity
whose target is in another store or partitioned) no transaction covers both, so the dead letters
take two steps, at least once, as a cross-store move does (``server/moves.py``):

1. The source's core forwards each dead letter into the source's OWN dead-letter queue
   (``DeadLetterForwarding.relay``, server/dead_letter_forwarding.py): one fenced settle or move,
   as a forward into the target would be, so the copy already carries the reason, description and
   ``x-opt-deadletter-source`` (the source's name, which marks it as one to relay), its delivery
   count reset and its enqueued time (at the hop limit: reason MaxTransferHopCountExceeded). It
   does not expire while it waits there (``DeadLetterForward.relayed``); its copy in the target
   expires as a direct forward's would (``model.copies.relayed_copy``: from its enqueued time, by
   the target's default time-to-live).
2. This relay, told whenever rows come into that dead-letter queue (and once when it starts, for
   what an earlier run left), reads the marked rows from the store, appends copies to the target
   (a partitioned target: the partition the message's key picks, as a send) together with one move
   key each (``<store>/<dead-letter queue>/<partition>/<sequence number>``) in one transaction of the
   target's store (``move_keys.append_keyed``), then deletes them from the dead-letter queue (a
   fenced ``MoveOut``: a row a receiver of the dead-letter queue holds locked stays), then forgets
   the keys of the rows deleted.

A crash after the target's commit leaves the row here and its key there: the next relay (at the
next start) finds the key, appends nothing, and deletes the row. A target that does not take them
(its store unavailable) leaves them in the dead-letter queue, tried again every
:data:`RETRY_SECONDS` and at the next dead letter. Between the steps the message is visible in the
source's dead-letter queue; a receiver there that completes it before the relay deletes it makes a
second copy (at least once, never lost). The relay reads the dead-letter queue from the lowest
number it has not finished; rows without the mark (dead-lettered before the forwarding was set, or
forwarded in from elsewhere) stay where they are.
"""

from __future__ import annotations

import asyncio
import logging

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode
from sodalite.model import partition_core as core
from sodalite.model.copies import relayed_copy
from sodalite.model.message import MessageRecord
from sodalite.model.store_ops import MoveItem
from sodalite.server import move_keys, wire
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.entity_settings import SubQueue
from sodalite.server.partitioned_actor import PartitionedCoreActor

log = logging.getLogger(__name__)

PAGE = 500  # dead-letter rows read (and relayed) at a time
RETRY_SECONDS = 5.0  # a relay that failed (a store unavailable) tries again after this long


def dead_letter_source(record: MessageRecord) -> str | None:
    """The record's ``x-opt-deadletter-source`` annotation, if it has one."""
    if not record.annotation_count or wire.DEAD_LETTER_SOURCE.encode() not in record.annotations:
        return None
    found = decode(amqp_message.encode_annotations(record.annotations, record.annotation_count)[3:])
    if not isinstance(found, dict):
        return None
    value = next((v for k, v in found.items() if str(k) == wire.DEAD_LETTER_SOURCE), None)
    return value if isinstance(value, str) else None


class DeadLetterRelay:
    """Carries ``source``'s dead letters marked with ``name`` into ``target`` (module docstring):
    a queue or subscription on the core (``CoreActor``) or a partitioned one (its sub-queue ``sub``:
    the main queue, or the transfer dead-letter queue at the hop limit)."""

    def __init__(self, source: CoreActor, name: str, target: CoreActor | PartitionedCoreActor,
                 sub: SubQueue, hop_limit: str | None = None) -> None:
        self.source, self.name, self.target, self.sub, self.hop_limit = source, name, target, sub, hop_limit
        self._cursor = 0  # the lowest dead-letter number not known to be done
        self._wanted = False
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._stopped = False
        self._failing = False

    def same_as(self, target: CoreActor | PartitionedCoreActor, sub: SubQueue, hop_limit: str | None) -> bool:
        return self.target is target and self.sub is sub and self.hop_limit == hop_limit

    def _target_ttl(self) -> int | None:
        target = self.target
        return (target.partitions[0] if isinstance(target, PartitionedCoreActor) else target).settings.default_ttl

    def start(self) -> None:
        self.source.on_dead_letters = self.wake
        self.wake()  # what an earlier run (or a failed attempt) left

    def stop(self) -> None:
        self._stopped = True
        if self.source.on_dead_letters == self.wake:
            self.source.on_dead_letters = None
        if self._retry is not None:
            self._retry.cancel()
        if self._task is not None:
            self._task.cancel()

    def wake(self) -> None:
        """Rows came into the dead-letter queue: relay what is marked (once a run in flight ends)."""
        if self._stopped:
            return
        self._wanted = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dead-letter relay {self.name}")

    async def idle(self) -> None:
        """Wait until nothing is being relayed (tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        while self._wanted and not self._stopped:
            self._wanted = False
            try:
                await self._relay_all()
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the target or the source's store is away: the rows stay here
                if not self._failing:  # once per outage, not every retry
                    log.warning("forwarding dead letters of %s: %s; they stay in its dead-letter queue and are "
                                "tried again", self.name, exc)
                self._failing = True
                if self._retry is None and not self._stopped:
                    self._retry = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._retried)

    def _retried(self) -> None:
        self._retry = None
        self.wake()

    async def _relay_all(self) -> None:
        while True:
            page = await self.source.peek(SubQueue.DEAD_LETTER, self._cursor, PAGE, states=ALL_STATES)
            if not page:
                return
            marked = [r.sequence_number for r in page if dead_letter_source(r) == self.name]
            if marked:
                await self._relay(marked)
            self._cursor = page[-1].sequence_number + 1

    async def _relay(self, numbers: list[int]) -> None:
        # Copy, delete and forget as one cross-store operation: a backup finds it wholly done or not begun.
        async with self.source.worker.gate.spanning():
            await self._relay_now(numbers)

    async def _relay_now(self, numbers: list[int]) -> None:
        source = self.source
        now = source.clock.now()
        rows = [r.record for r in await source.fetch(SubQueue.DEAD_LETTER, numbers) if not r.locked_at(now)]
        if not rows:
            return
        ref = source.refs[SubQueue.DEAD_LETTER]
        prefix = f"{source.worker.name}/{ref.entity}/{ref.partition}/"
        keys = [f"{prefix}{r.sequence_number}" for r in rows]
        # Each copy expires as a forward into the target at its dead-lettering would have made it
        # (its enqueued time): the message's time-to-live capped by the target's default.
        forward = core.DeadLetterForward(("", 0), self.name, self._target_ttl(), self.hop_limit)
        copies = [relayed_copy(r, forward) for r in rows]
        placed: list[tuple[CoreActor, list[str]]] = []
        if isinstance(self.target, PartitionedCoreActor):
            routed = self.target.route([wire.forwarded_draft(r) for r in rows])
        else:
            routed = [(self.target, list(range(len(rows))))]
        for partition, indexes in routed:
            part_keys = [keys[i] for i in indexes]
            await move_keys.append_keyed(partition, self.sub, [copies[i] for i in indexes], part_keys)
            placed.append((partition, part_keys))
        deleted = await source.move_out(SubQueue.DEAD_LETTER, [MoveItem(r.sequence_number) for r in rows], None)
        gone = {f"{prefix}{n}" for n in deleted if n is not None}
        if len(gone) < len(rows):
            log.warning("forwarding dead letters of %s: %d were locked by a receiver of its dead-letter queue "
                        "meanwhile; they are in both until it settles them", self.name, len(rows) - len(gone))
        for partition, part_keys in placed:
            done = [k for k in part_keys if k in gone]
            if done:
                try:
                    await move_keys.forget_move_keys(partition, done, self.sub)
                except Exception:  # a key left behind costs a row, never a message
                    log.warning("could not forget %d move keys in %s", len(done), partition.ref)
