"""Where an entity's dead letters go: ForwardDeadLetteredMessagesTo, as the broker resolved it.

Rules:

1. Within one store the main queue's core dead-letters straight into the target's partition
   instead of the entity's own dead-letter queue, in the same fenced settle or move
   (:meth:`DeadLetterForwarding.forward_to`); the runner reports the move (``on_moved``) and the
   target's core is told ``Arrived``.
2. A target in another store (or partitioned) gets them in two steps: the core forwards them into
   the entity's OWN dead-letter queue, each copy marked with its ``x-opt-deadletter-source`` and not
   expiring there (:meth:`DeadLetterForwarding.relay`), and the broker's relay
   (``server/dead_letter_relay.py``) carries them over under move keys.
3. Where the target's forwarding chain reached the hop limit, the target is the transfer
   dead-letter queue where it stopped, the copy carries reason MaxTransferHopCountExceeded and the
   chain's description, and never expires.
4. A dead letter another core's batch makes for this entity (a topic's copy that failed its
   filter) goes the same way (:meth:`DeadLetterForwarding.copy`): the copy is made by
   ``model.copies.forwarded_copy``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sodalite.model import partition_core as core
from sodalite.model.copies import forwarded_copy
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED
from sodalite.server import wire
from sodalite.server.core_copies import Copy
from sodalite.server.entity_settings import SubQueue

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor


class DeadLetterForwarding:
    """One entity's ForwardDeadLetteredMessagesTo: the core's forward, and whose core hears of arrivals."""

    __slots__ = ("_actor", "forward", "target")

    def __init__(self, actor: CoreActor) -> None:
        self._actor = actor
        self.forward: core.DeadLetterForward | None = None  # what the main queue's core is told
        self.target: CoreActor | None = None  # the actor whose core is told the dead letters arrived

    def forward_to(self, target: CoreActor | None, sub: SubQueue = SubQueue.MAIN, *, source: str = "",
                   hop_limit: str | None = None) -> None:
        """Rules 1 and 3: into ``target``'s sub-queue ``sub`` (in this store); None: the entity's own
        dead-letter queue."""
        actor = self._actor
        if target is not None and target.worker is not actor.worker:
            raise ValueError(f"{actor.ref.entity}: dead letters can be forwarded only within one messaging store")
        self.target = target
        self.forward = None if target is None else core.DeadLetterForward(
            (target.refs[sub].entity, target.refs[sub].partition), source,
            None if hop_limit is not None else target.settings.default_ttl, hop_limit)
        actor.settings_changed()

    def relay(self, source: str, default_ttl: int | None, hop_limit: str | None = None) -> None:
        """Rules 2 and 3: into the entity's own dead-letter queue as forwarded copies named after
        ``source``, for the broker's relay, which gives them their expiry by the target's ``default_ttl``."""
        actor = self._actor
        self.target = actor
        dead_letters = actor.refs[SubQueue.DEAD_LETTER]
        self.forward = core.DeadLetterForward((dead_letters.entity, dead_letters.partition), source,
                                              None if hop_limit is not None else default_ttl, hop_limit, relayed=True)
        actor.settings_changed()

    def copy(self, record: MessageRecord, now: int) -> Copy:
        """Rule 4: where a dead letter another batch makes for this entity goes, and as what."""
        actor, forward, target = self._actor, self.forward, self.target
        if forward is None or target is None:
            return (actor, SubQueue.DEAD_LETTER, record)
        if forward.hop_limit is not None:
            record = wire.dead_lettered(record, MAX_TRANSFER_HOP_COUNT_EXCEEDED, forward.hop_limit)
        annotations, count = wire.with_dead_letter_source(record.annotations, record.annotation_count, forward.source)
        sub = next(s for s, ref in target.refs.items() if (ref.entity, ref.partition) == forward.target)
        return (target, sub, forwarded_copy(record, annotations, count, forward, now))
