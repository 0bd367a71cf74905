"""Copies one entity's core stores into others: a topic's copies, transfer dead letters.

Rules:

1. A copy names the entity on the core it goes to, the sub-queue there and the record, unnumbered
   (:data:`Copy`). The core that stores it does so in ONE batch of its store (a ``Publish``: ``AppendTo``
   per target partition), so the copies of a send exist together or not at all.
2. A dead letter made for an entity is numbered by that entity's own partition, so it never takes a
   number a message dead-lettered there keeps.
3. Only once that batch committed is each destination's core told the rows landed
   (:meth:`Landing.landed`), so a receiver waiting there gets them at once; the store is the truth
   meanwhile.
4. A topic's copies for another store are stored, before the topic's own batch, by a target's core
   in that store, as a ``Publish`` without MessageIds (the topic applied its duplicate detection):
   :func:`store_copies`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord
from sodalite.server.core_requests import Done
from sodalite.server.entity_settings import SubQueue
from sodalite.store.port import PartitionRef

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor

Copy = tuple["CoreActor", SubQueue, MessageRecord]
"""A message to store in a sub-queue of an entity on the core (a topic's copy, a transfer dead letter), unnumbered."""
KeyedCopy = tuple[Copy, str]
"""A copy a move stores, with its move key (``server/move_keys.py``)."""
Planned = Sequence[tuple[str | None, Sequence[Copy]]]
"""Per message: its MessageId (for duplicate detection, or None) and its copies."""


class Landing:
    """Where the copies a core's ``Publish`` stored land: each destination's actor, as it is now."""

    __slots__ = ("_targets",)

    def __init__(self) -> None:
        self._targets: dict[PartitionRef, tuple[CoreActor, SubQueue]] = {}

    def entries(self, planned: Planned) -> tuple[core.PublishEntry, ...]:
        """The core's entries for ``planned``, each destination remembered for :meth:`landed` (rules 1, 2)."""
        entries = []
        for message_id, copies in planned:
            made = []
            for actor, sub, record in copies:
                target = actor.refs[sub]
                self._targets[target] = (actor, sub)
                made.append(core.PublishCopy(target, record,
                                             actor.refs[SubQueue.MAIN] if sub is SubQueue.DEAD_LETTER else None))
            entries.append(core.PublishEntry(message_id, tuple(made)))
        return tuple(entries)

    def landed(self, reply: core.Published) -> None:
        """The ``Publish`` committed: tell each destination's core its rows landed (rule 3)."""
        for target, records in reply.stored:
            found = self._targets.get(target) if isinstance(target, PartitionRef) else None
            if found is not None:
                found[0].land(found[1], records)


def store_copies(actor: CoreActor, copies: Sequence[Copy]) -> Done:
    """Rule 4: ``copies`` (each into a sub-queue of an entity on the core in ``actor``'s store) as ONE
    batch of that store made by ``actor``'s core; answered once durable (the rows then land), or
    failed as a send to ``actor`` would fail."""
    actor._check_send([])
    return actor.submit_publish(actor.landing.entries([(None, copies)]))
