"""Where messages flow between entities: ForwardTo routes, dead letters forwarded, a topic's copies.

Rules:
- A route follows ForwardTo from an entity; a chain longer than the hop limit, or a loop, stops
  there (``model.routing.follow``). A topic ends a route: it fans the message out.
- Dead letters of an entity with ForwardDeadLetteredMessagesTo land past the target's ForwardTo
  chain (one hop more), in the transfer dead-letter queue where the chain reached the hop limit,
  and stay in the entity's own dead-letter queue where the chain ends in a topic or names an entity
  that is gone. A target partition in the entity's store takes them in the dead-lettering's
  transaction; any other through a relay (``server/dead_letter_relay.py``).
- A topic's copies: where each lands is ``model.fanout.fan_out``'s (each subscription's rules and
  actions, its dead-letter queue, where a forwarding subscription's ForwardTo leads within the hop
  limit); this module places each on the actor that stores it (``server/fanout.py`` writes an
  action's changes). A copy's default time-to-live is ``model.copies.copy_default_ttl``'s.
- A partitioned topic's partition ``i`` stores into partition ``i`` of each partitioned destination
  (which shares its store); without an index the copy's key picks the partition, as for a send.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sodalite.errors import EntityNotFound, NotImplementedOperation
from sodalite.model.copies import copy_default_ttl
from sodalite.model.entities import forward_target
from sodalite.model.fanout import Landing, fan_out
from sodalite.model.partition import MessageDraft
from sodalite.model.partition_core import record_for as core_record
from sodalite.model.routing import dead_letter_hop_limit, follow
from sodalite.server import fanout, wire
from sodalite.server.addresses import entity_path
from sodalite.server.core_actor import Copy, CoreActor
from sodalite.server.dead_letter_relay import DeadLetterRelay
from sodalite.server.entity_settings import SubQueue
from sodalite.server.fanout import copies_for
from sodalite.server.partitioned_actor import PartitionedCoreActor, each
from sodalite.server.registry import TOPIC, Entity, Route
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor

log = logging.getLogger(__name__)

Destination = tuple[Entity, SubQueue, str | None]
"""Where dead letters land: the entity, its sub-queue, and the hop-limit description if one was reached."""


def _forwards_on_core(destination: Destination | None) -> bool:
    """Whether an entity can forward its dead letters there: into a queue or subscription,
    partitioned or not, in any store."""
    if destination is None:
        return True
    actor = destination[0].actor
    return isinstance(actor, CoreActor | PartitionedCoreActor) and not isinstance(
        actor, TopicActor | PartitionedTopicActor)


def _core_index(topic: Entity, draft: MessageDraft) -> int:
    """The partition of a partitioned topic that ``draft``'s key (or, keyless, the topic's round-robin)
    pins it to, as a send's routing does."""
    actor = topic.actor
    assert isinstance(actor, PartitionedCoreActor)
    [(partition, _)] = actor.route([draft])
    return actor.partitions.index(partition)


class Topology:
    """The routes between the entities this node serves (``entities``: by lower-cased path), and the
    relays that carry dead letters forwarded into another store."""

    def __init__(self, entities: dict[str, Entity]) -> None:
        self.entities = entities
        self.relays: dict[int, DeadLetterRelay] = {}  # per CoreActor id: its dead letters into another store

    def route(self, entity: Entity) -> Route:
        """Follow ForwardTo from ``entity`` (raises EntityNotFound where the chain names an entity gone)."""
        def next_hop(current: Entity) -> Entity | None:
            if not current.forward_to:
                return None
            target = self.entities.get(entity_path(forward_target(current.forward_to)).lower())
            if target is None:
                raise EntityNotFound(f"'{current.name}' forwards to '{current.forward_to}', "
                                     "which this broker does not serve")
            return target

        return Route(*follow(entity, next_hop))

    # ---- dead letters forwarded --------------------------------------------------------------------

    def dead_letter_destination(self, target: Entity) -> Destination | None:
        """Where dead letters forwarded to ``target`` land: past its ForwardTo chain (one hop more), the
        transfer dead-letter queue where the chain reached the hop limit (with that description), or
        None where it ends in a topic (they stay in the entity's dead-letter queue)."""
        route = self.route(target)
        limit = dead_letter_hop_limit(route.hops, route.exceeded)
        if limit is not None:
            return route.entity, SubQueue.TRANSFER_DEAD_LETTER, limit
        if route.entity.kind == TOPIC:
            return None
        return route.entity, SubQueue.MAIN, None

    def check_dead_letter_target(self, target: Entity) -> None:
        """ForwardDeadLetteredMessagesTo ``target`` is allowed: past its ForwardTo chain, a queue or
        subscription, or a topic (the dead letters then stay in the entity's dead-letter queue)."""
        destination = self.dead_letter_destination(target)
        if not _forwards_on_core(destination):
            assert destination is not None
            raise NotImplementedOperation(
                f"forwarding dead-lettered messages into '{destination[0].name}' is not available")

    def link_dead_letter_forwarding(self) -> None:
        """Point each entity with ForwardDeadLetteredMessagesTo at where those messages end up (keeping
        the relays that still carry them to the same place, starting new ones)."""
        relays: dict[int, DeadLetterRelay] = {}
        for entity in self.entities.values():
            target_name = getattr(entity.properties, "forward_dead_lettered_messages_to", None)
            target = self.entities.get(entity_path(forward_target(target_name)).lower()) if target_name else None
            if target_name and target is None:
                log.warning("%s forwards dead-lettered messages to unknown %s; keeping them", entity.name,
                            target_name)
            partitioned = isinstance(entity.actor, PartitionedCoreActor)
            for index, core_partition in enumerate(each(entity.actor)):
                relay = self._link_core_dead_letters(entity, core_partition, target, index if partitioned else None)
                if relay is not None:
                    old = self.relays.pop(id(core_partition), None)
                    if old is not None and old.source is core_partition and old.same_as(
                            relay.target, relay.sub, relay.hop_limit):
                        relay = old
                    elif old is not None:
                        old.stop()
                    relays[id(core_partition)] = relay
        for gone in self.relays.values():  # no longer forwarding (or its entity is gone)
            gone.stop()
        self.relays = relays
        for relay in relays.values():
            if relay.source.on_dead_letters is None:
                relay.start()

    def stop_relays(self) -> None:
        for relay in self.relays.values():
            relay.stop()
        self.relays.clear()

    def _link_core_dead_letters(self, entity: Entity, actor: CoreActor, target: Entity | None,
                                index: int | None = None) -> DeadLetterRelay | None:
        """Point ``actor`` (partition ``index`` of a partitioned entity) where its dead letters go: a
        target partition in its store takes them in the dead-lettering's transaction (a partitioned
        target's partition ``index``, which lies in the same store, or a non-partitioned target there);
        any other target through a relay, which this returns for the caller to keep."""
        try:
            destination = None if target is None else self.dead_letter_destination(target)
        except EntityNotFound as exc:  # its ForwardTo chain names an entity that is gone
            log.warning("%s: %s; keeping its dead letters in its dead-letter queue", entity.name, exc.description)
            destination = None
        if destination is None:
            actor.forward_dead_letters(None)
            return None
        if not _forwards_on_core(destination):
            log.warning("%s cannot forward dead-lettered messages to %s; keeping them in its dead-letter queue",
                        entity.name, destination[0].name)
            actor.forward_dead_letters(None)
            return None
        into, sub, hop_limit = destination
        target_actor = into.actor
        near = (target_actor.partitions[index % len(target_actor.partitions)]
                if isinstance(target_actor, PartitionedCoreActor) and index is not None else target_actor)
        if isinstance(near, CoreActor) and near.worker is actor.worker:
            actor.forward_dead_letters(near, sub, source=actor.ref.entity, hop_limit=hop_limit)
            return None
        assert isinstance(target_actor, CoreActor | PartitionedCoreActor)
        ttl = (target_actor.settings.default_ttl if isinstance(target_actor, CoreActor)
               else target_actor.partitions[0].settings.default_ttl)
        actor.relay_dead_letters(actor.ref.entity, ttl, hop_limit)
        return DeadLetterRelay(actor, actor.ref.entity, target_actor, sub, hop_limit)

    # ---- a topic's copies ----------------------------------------------------------------------------

    def copies(self, topic: Entity, drafts: Sequence[MessageDraft], now: int,
               index: int | None = None) -> list[list[Copy]]:
        """Per draft, the copies ``topic`` (its partition ``index``, if partitioned) stores. Where each
        lands is ``model.fanout.fan_out``'s; this places it on the partition actor that stores it. A
        destination may live in another store (the topic actor stores those copies by that store's
        batch first)."""
        placing = _Placing(self, now, topic.actor.settings.default_ttl)
        planned: list[list[Copy]] = []
        for draft in drafts:
            placing.out = []
            fan_out(placing, topic, draft, index)
            planned.append(placing.out)
        return planned


class _Placing:
    """``model.fanout.Places`` over the served entities. A copy lands on the entity's actor; on a
    partitioned entity, on its partition ``placement`` when one is given (a partitioned topic's
    partition ``i`` stores into partition ``i`` of each partitioned destination, which shares that
    partition's store), else on the partition the copy's key picks (keyless ones round-robin)."""

    __slots__ = ("cap", "now", "out", "topology")

    def __init__(self, topology: Topology, now: int, cap: int | None) -> None:
        self.topology = topology
        self.now = now
        self.cap = cap  # the topic's default time-to-live
        self.out: list[Copy] = []

    def subscriptions(self, topic: Entity) -> Iterable[Entity]:
        return topic.subscriptions.values()

    def copies(self, subscription: Entity, message: MessageDraft) -> list[fanout.Copy]:
        dead_letter_on_errors = bool(getattr(subscription.properties, "dead_lettering_on_filter_evaluation_exceptions",
                                             True))
        return copies_for(subscription.rules, message, dead_letter_on_errors, subscription.requires_session)

    def route(self, subscription: Entity) -> Route | None:
        return self.topology.route(subscription) if subscription.forward_to else None

    def is_topic(self, entity: Entity) -> bool:
        return entity.kind == TOPIC

    def enter(self, topic: Entity, message: MessageDraft, placement: int | None) -> int | None:
        # A partitioned topic reached without an index (from a non-partitioned one): the copy's key
        # pins it to one partition, for every subscription of that topic.
        return placement if placement is not None or not topic.partitioned else _core_index(topic, message)

    def land(self, entity: Entity, message: MessageDraft, landing: Landing, dead_letter: tuple[str, str] | None,
             placement: int | None) -> None:
        actor = entity.actor
        if isinstance(actor, PartitionedCoreActor):
            if placement is not None:
                actor = actor.partitions[placement % len(actor.partitions)]
            else:
                [(actor, _)] = actor.route([message])
        assert isinstance(actor, CoreActor)
        if landing is Landing.MAIN:
            ttl = copy_default_ttl(actor.settings.default_ttl, self.cap)
            self.out.append((actor, SubQueue.MAIN, core_record(message, self.now, ttl)))
            return
        assert dead_letter is not None
        dead = wire.dead_lettered(core_record(message, self.now, None), *dead_letter)
        if landing is Landing.DEAD_LETTER:
            self.out.append(actor.dead_letter_copy(dead, self.now))
        else:
            self.out.append((actor, SubQueue.TRANSFER_DEAD_LETTER, dead))
