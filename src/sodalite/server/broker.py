"""The broker process: its namespace, its messaging store, its entities and its listener.

Startup writes the configured entities into the store (the configuration wins over what was
stored), then loads every stored entity and its messages, and only then starts listening, so a
client never reaches a half-loaded broker. Shutdown stops accepting, lets in-flight commits
finish, and closes the store.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import secrets
import ssl
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sodalite.errors import (
    ConfigurationError,
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    NotImplementedOperation,
    QuotaExceeded,
    SodaliteError,
)
from sodalite.model.authorization import (
    Authorization,
    AuthorizationRule,
    KeyOverride,
    KeyOverrides,
    KeyType,
    apply_overrides,
    authorize,
    find_rule,
    regenerated,
)
from sodalite.model.config import NamespaceConfig
from sodalite.model.entities import (
    TIMESPAN_MAX,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
    forward_target,
    validate_entity_name,
)
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, MessageDraft
from sodalite.model.partition_core import record_for as core_record
from sodalite.model.partitioning import partition_index
from sodalite.model.quotas import namespace_full, topic_full
from sodalite.model.routing import follow, past_hop_limit
from sodalite.server import temporary, topic_consumers, wire
from sodalite.server.addresses import entity_path
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.core_actor import Copy, CoreActor
from sodalite.server.dead_letter_relay import DeadLetterRelay
from sodalite.server.entity_settings import Clock, EntitySettings, SubQueue, wall_clock_ms
from sodalite.server.fanout import CompiledRule, copies_for
from sodalite.server.limits import ConnectionLimits
from sodalite.server.listener import ListenFailed, ProtocolFactory, SniffingListener
from sodalite.server.metrics import BrokerMetrics
from sodalite.server.partition_runner import LoopClock
from sodalite.server.partitioned_actor import EntityActor, PartitionedCoreActor, each
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity, Route, named_subscription_path
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.store.port import (
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    EntityActivity,
    EntityRecord,
    IdleDeleted,
    MessagingStore,
    PartitionRef,
    PutEntity,
    PutRule,
    RecordActivity,
    RuleWritten,
    ServedByOneProcess,
)

log = logging.getLogger(__name__)

IDLE_SWEEP_SECONDS = 15.0  # AutoDeleteOnIdle is at least 5 minutes, so this is precise enough
# Several nodes: each refreshes its AutoDeleteOnIdle registrations (last activity, receivers attached)
# in the store this often; a node's receivers stop counting after ACTIVITY_LAPSE intervals without one.
ACTIVITY_SECONDS = 5.0
SHUTDOWN_GRACE_S = 10.0  # a graceful stop waits this long at most for store work in flight
ACTIVITY_LAPSE = 3
# Regenerated keys: one record per key name and scope (the namespace, or a queue or topic), of a kind the
# entity loader skips, at "$authorizationrules/<$namespace or lower-cased path>/<key name>" ('$' keeps it apart
# from entity names), so two nodes regenerating different keys at once keep both. An older release kept
# them all in one record at "$authorizationrules" (KeyOverrides.to_json); start() splits it.
MAX_SUBSCRIPTIONS_PER_TOPIC = 2000  # Service Bus quotas: subscriptions per topic
KEY_OVERRIDES_PATH, KEY_OVERRIDES_KIND = "$authorizationrules", "authorization-rules"
# When each entity was created and last updated: one record per entity, of a kind the loader skips, at
# "$entitytimes/<lower-cased path>" ('$' keeps it apart from entity names), holding [created, updated] (ms)
# under "Times", so two nodes creating or updating entities at once keep both. An older release kept one
# record at "$entitytimes" for all of them ({path: [created, updated]}); start() splits it.
ENTITY_TIMES_PATH, ENTITY_TIMES_KIND = "$entitytimes", "entity-times"
DEFAULT_STORE = "default"  # the store in the data directory, which also keeps the entity records
PREMIUM_PARTITIONED_MESSAGE_SIZE = 1024 * 1024  # partitioned entities of a Premium-like namespace (seed)


def _override_path(scope: str | None, key_name: str) -> str:
    return f"{KEY_OVERRIDES_PATH}/{'$namespace' if scope is None else scope.lower()}/{key_name.casefold()}"


def _override_records(overrides: KeyOverrides) -> dict[str, PutEntity]:
    """One record per regenerated key (:func:`_override_path` -> its PutEntity)."""
    scoped: list[tuple[str | None, KeyOverride]] = [(None, o) for o in overrides.namespace]
    scoped += [(path, o) for path, items in overrides.entities.items() for o in items]
    return {_override_path(scope, o.key_name).lower(): PutEntity(EntityRecord(
        _override_path(scope, o.key_name), KEY_OVERRIDES_KIND, {"Entity": scope, "Override": o.to_json()}))
        for scope, o in scoped}


def _stored_overrides(records: Sequence[EntityRecord]) -> tuple[KeyOverrides, set[str], bool]:
    """The regenerated keys in ``records``, the lower-cased paths of their per-key records, and whether
    they include the older release's one record for all of them (which start() then splits)."""
    legacy = next((r for r in records if r.kind == KEY_OVERRIDES_KIND
                   and r.path.lower() == KEY_OVERRIDES_PATH.lower()), None)
    overrides = KeyOverrides.from_json(legacy.properties) if legacy is not None else KeyOverrides()
    paths: set[str] = set()
    for record in records:
        if record.kind != KEY_OVERRIDES_KIND or not record.path.lower().startswith(KEY_OVERRIDES_PATH.lower() + "/"):
            continue
        scope = record.properties.get("Entity")
        overrides = overrides.with_override(str(scope) if scope is not None else None,
                                            KeyOverride.from_json(record.properties["Override"]))
        paths.add(record.path.lower())
    return overrides, paths, legacy is not None


def _times_path(path: str) -> str:
    return f"{ENTITY_TIMES_PATH}/{path.lower()}"


def _stored_times(records: Sequence[EntityRecord]) -> tuple[dict[str, list[int]], bool]:
    """The entity times in ``records`` (lower-cased path -> [created, updated]) and whether they
    include the older release's one record for all entities (which start() then splits)."""
    times: dict[str, list[int]] = {}
    legacy = False
    prefix = ENTITY_TIMES_PATH.lower() + "/"
    for record in records:
        if record.kind != ENTITY_TIMES_KIND:
            continue
        try:
            if record.path.lower() == ENTITY_TIMES_PATH:
                legacy = True
                for path, pair in record.properties.items():
                    times.setdefault(str(path).lower(), [int(pair[0]), int(pair[1])])
            elif record.path.lower().startswith(prefix):
                pair = record.properties["Times"]
                times[record.path[len(prefix):].lower()] = [int(pair[0]), int(pair[1])]
        except (KeyError, IndexError, TypeError, ValueError):
            log.warning("entity times record %s is unreadable; ignored", record.path)
    return times, legacy



def _capped(actor: CoreActor, cap: int | None) -> int | None:
    """The time-to-live default of a copy stored in ``actor``'s entity from a topic whose default is ``cap``."""
    own = actor.settings.default_ttl
    return cap if own is None else (own if cap is None else min(own, cap))


def _ms(value: timedelta) -> int | None:
    return None if value >= TIMESPAN_MAX else int(value.total_seconds() * 1000)


class Broker:
    def __init__(self, namespace: NamespaceConfig, store: MessagingStore, *, max_frame_size: int = 262144,
                 idle_timeout_ms: int | None = 120_000, silence_heartbeat_s: float | None = 3.0,
                 clock: Clock = wall_clock_ms,
                 more_stores: Sequence[tuple[str, MessagingStore]] = (), node_id: str = "node") -> None:
        self.namespace = namespace
        self.clock = clock
        # The cores' clock (partition_runner.LoopClock): the same time, so one clock drives the broker.
        self.core_clock = LoopClock(clock)
        # Every entity runs on the partition core and store port v2 (server/core_actor.py).
        self.node_id = node_id
        self._relays: dict[int, DeadLetterRelay] = {}  # per CoreActor id: its dead letters into another store
        # The messaging stores, each served by its own thread. The first also keeps the entity records.
        self.workers = [StoreWorker(store, DEFAULT_STORE), *(StoreWorker(s, name) for name, s in more_stores)]
        self.worker = self.workers[0]
        for worker in self.workers:
            worker.clock = clock
            worker.gate = self.workers[0].gate  # one cross-store gate for every store (server/backup.py)
        self.max_frame_size = max_frame_size
        self.idle_timeout_ms = idle_timeout_ms
        # An empty frame after this much of our own silence on a connection whose client asked for
        # no heartbeats (the Python SDK's sync sender stalls without them; clarifications.md, 13.4).
        self.silence_heartbeat_s = silence_heartbeat_s
        self.container_id = f"sodalite-{namespace.name}"
        self.entities: dict[str, Entity] = {}
        self.connections: set[BrokerConnection] = set()
        # Those of them with no token accepted yet, oldest first, with when each was accepted
        # (monotonic seconds): the allowance of server/limits.py.
        self.unauthenticated: dict[BrokerConnection, float] = {}
        self.limits = ConnectionLimits()  # per connection and in all (server/limits.py)
        # The namespace's shared access rules, with keys regenerated at runtime (start() applies stored ones).
        self.authorization_rules: tuple[AuthorizationRule, ...] = namespace.authorization_rules
        self.key_overrides = KeyOverrides()
        # SASL PLAIN (a key name and key in clear) is offered over TLS and on loopback; on plain TCP
        # from another host only when the operator allows it (--allow-plain-sasl-without-tls).
        self.plain_sasl_without_tls = False
        # Set while this node does not serve (a geo secondary or fenced node): every new connection is
        # closed at its open with this error (server-busy, which the SDKs retry).
        self.refusal: SodaliteError | None = None
        # Non-durable JMS topic consumers' subscriptions (lower-cased path) -> the links reading them
        # (server/topic_consumers.py): removed when the last one goes.
        self.volatile_subscriptions: dict[str, set[int]] = {}
        # Service Bus's quota of subscriptions per topic (Standard and Premium: 2,000); a JMS topic
        # consumer's subscription counts as any other.
        self.max_subscriptions_per_topic = MAX_SUBSCRIPTIONS_PER_TOPIC
        # JMS temporary queues and topics (lower-cased path) -> id() of the connection that made them.
        self.temporary_owners: dict[str, int] = {}
        self.entity_times: dict[str, list[int]] = {}  # lower-cased path -> [created, updated], ms
        self.port = 0  # the AMQP port start() bound
        self._server: SniffingListener | None = None
        self._tls_server: asyncio.Server | None = None
        self.amqps_port: int | None = None  # bound by start() when TLS is on
        self.metrics = BrokerMetrics(self)
        for worker in self.workers[1:]:
            self.metrics.watch(worker)
        self._idle_sweeper: asyncio.Task[None] | None = None
        self._activity_recorder: asyncio.Task[None] | None = None
        self.idle_sweep_seconds = IDLE_SWEEP_SECONDS
        self.activity_seconds = ACTIVITY_SECONDS
        self._entity_follower: asyncio.Task[None] | None = None
        self._entities_lock = asyncio.Lock()  # entity creation and deletion against the follower
        self._entities_changed = asyncio.Event()  # another node changed entity records (the store's feed)
        self._follow_refused: dict[str, object] = {}  # lower-cased path -> a stored record the follow refused
        self.worker.on_entities_changed = self._entities_changed.set

    def entity(self, path: str) -> Entity | None:
        return self.entities.get(path.lower())

    # ---- shared access authorization -----------------------------------------------------------------

    @property
    def sas_keys(self) -> dict[str, tuple[str, ...]]:
        """The namespace rules' keys by key name (any right)."""
        return {rule.key_name: rule.keys for rule in self.authorization_rules}

    def entity_rules(self, path: str) -> Sequence[AuthorizationRule] | None:
        """A queue's or topic's own rules; None for anything else (subscriptions have none of their own)."""
        entity = self.entity(path)
        if entity is None or entity.kind not in (QUEUE, TOPIC):
            return None
        rules: tuple[AuthorizationRule, ...] = getattr(entity.properties, "authorization_rules", ())
        return rules

    def entity_scopes(self) -> list[tuple[str, Sequence[AuthorizationRule]]]:
        """Every queue and topic that has rules of its own (lower-cased path), with those rules."""
        scopes: list[tuple[str, Sequence[AuthorizationRule]]] = []
        for path, entity in self.entities.items():
            properties = entity.properties
            if isinstance(properties, QueueProperties | TopicProperties) and properties.authorization_rules:
                scopes.append((path, properties.authorization_rules))
        return scopes

    def keys_changed(self) -> None:
        """Keys or rules changed (regenerated, a rule edited or deleted, an entity deleted): a connection
        that logged in with a key (SASL PLAIN) that no longer grants what it granted is closed."""
        for connection in list(self.connections):
            connection.check_key_login()

    def authorize(self, token: str, target_path: str, host: str = "") -> Authorization:
        """What ``token`` grants for ``target_path`` (``host``: the namespace's host name the client used, for
        an audience without a scheme); raises Unauthorized."""
        return authorize(token, self.authorization_rules, self.entity_rules, target_path, time.time(), host)

    async def regenerate_key(self, entity_path: str | None, key_name: str, key_type: KeyType,
                             key: str | None = None) -> AuthorizationRule:
        """Replace a rule's primary or secondary key (a random one unless ``key`` is given), stored so a
        restart keeps it: the override record (kind ``authorization-rules``, which the loader skips) and,
        for an entity rule, the entity's own record."""
        entity = self.entity(entity_path) if entity_path is not None else None
        if entity_path is not None and (entity is None or entity.kind not in (QUEUE, TOPIC)):
            raise EntityNotFound(f"the messaging entity '{entity_path}' could not be found")
        rules = self.authorization_rules if entity is None else self.entity_rules(entity.name) or ()
        before = find_rule(rules, key_name)
        if before is None:
            raise EntityNotFound(f"the authorization rule '{key_name}' could not be found")
        new_key = key if key is not None else base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        after = before.with_key(key_type, new_key)
        scope = None if entity is None else entity.name
        earlier = next((o for o in (self.key_overrides.namespace if scope is None
                                    else self.key_overrides.for_entity(scope))
                        if o.key_name.casefold() == before.key_name.casefold()), None)
        override = regenerated(before, after, earlier)
        overrides = self.key_overrides.with_override(scope, override)
        updated = tuple(after if r is before else r for r in rules)
        # This key's record only: another node may be regenerating another key meanwhile.
        puts = list(_override_records(KeyOverrides().with_override(scope, override)).values())
        if entity is not None:
            current = entity.properties
            assert isinstance(current, QueueProperties | TopicProperties)
            properties: QueueProperties | TopicProperties = replace(current, authorization_rules=updated)
            puts.append(PutEntity(EntityRecord(entity.name, entity.kind, properties.to_json())))
        await self.worker.apply(puts)
        self.key_overrides = overrides
        if entity is None:
            self.authorization_rules = updated
        else:
            entity.properties = properties
        self.keys_changed()
        return after

    def _with_key_overrides(self, name: str, properties: Any) -> Any:
        """Configured queue or topic properties with the keys regenerated since (see apply_overrides);
        overrides the configuration has since replaced are forgotten."""
        overrides = self.key_overrides.for_entity(name)
        if not overrides:
            return properties
        rules, kept = apply_overrides(properties.authorization_rules, overrides)
        entities = {**self.key_overrides.entities, name.lower(): kept}
        self.key_overrides = KeyOverrides(self.key_overrides.namespace, entities)
        return replace(properties, authorization_rules=rules)

    def route(self, entity: Entity) -> Route:
        """Follow ForwardTo from ``entity``: a chain longer than the hop limit, or a loop, stops there.

        A topic ends a route: it fans the message out to its subscriptions.
        """
        def next_hop(current: Entity) -> Entity | None:
            if not current.forward_to:
                return None
            target = self.entity(entity_path(forward_target(current.forward_to)))
            if target is None:
                raise EntityNotFound(f"'{current.name}' forwards to '{current.forward_to}', "
                                     "which this broker does not serve")
            return target

        return Route(*follow(entity, next_hop))

    def _start_activations(self) -> None:
        """Topics on the core publish their due scheduled messages only once their subscriptions are
        loaded (those loaded after them at start, or taken up from another node)."""
        for entity in self.entities.values():
            if isinstance(entity.actor, TopicActor | PartitionedTopicActor):
                entity.actor.start_activation()

    def _dead_letter_destination(self, target: Entity) -> tuple[Entity, SubQueue, str | None] | None:
        """Where dead letters forwarded to ``target`` land on the core: past its ForwardTo chain (one
        hop more), the transfer dead-letter queue where the chain reached the hop limit (with that
        description), or None where it ends in a topic (they stay in the entity's dead-letter queue)."""
        route = self.route(target)
        limit = past_hop_limit(route.hops + 1, route.exceeded)
        if limit is not None:
            return route.entity, SubQueue.TRANSFER_DEAD_LETTER, limit
        if route.entity.kind == TOPIC:
            return None
        return route.entity, SubQueue.MAIN, None

    @staticmethod
    def _forwards_on_core(destination: tuple[Entity, SubQueue, str | None] | None) -> bool:
        """Whether an entity can forward its dead letters there: into a queue or subscription,
        partitioned or not, in any store (:meth:`_link_core_dead_letters`)."""
        if destination is None:
            return True
        actor = destination[0].actor
        return isinstance(actor, CoreActor | PartitionedCoreActor) and not isinstance(
            actor, TopicActor | PartitionedTopicActor)

    def _link_core_dead_letters(self, entity: Entity, actor: CoreActor, target: Entity | None,
                                index: int | None = None) -> DeadLetterRelay | None:
        """Point ``actor`` (partition ``index`` of a partitioned entity) where its dead letters go: a
        target partition in its store takes them in the dead-lettering's transaction (a partitioned
        target's partition ``index``, which lies in the same store, or a non-partitioned target there);
        any other target on the core through a relay (``server/dead_letter_relay.py``), which this
        returns for the caller to keep."""
        try:
            destination = None if target is None else self._dead_letter_destination(target)
        except EntityNotFound as exc:  # its ForwardTo chain names an entity that is gone
            log.warning("%s: %s; keeping its dead letters in its dead-letter queue", entity.name, exc.description)
            destination = None
        if destination is None:
            actor.forward_dead_letters(None)
            return None
        if not self._forwards_on_core(destination):
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

    def _link_dead_letter_forwarding(self) -> None:
        """Point each entity with ForwardDeadLetteredMessagesTo at where those messages end up (keeping
        the relays that still carry them to the same place, starting new ones)."""
        relays: dict[int, DeadLetterRelay] = {}
        for entity in self.entities.values():
            target_name = getattr(entity.properties, "forward_dead_lettered_messages_to", None)
            target = self.entity(entity_path(forward_target(target_name))) if target_name else None
            if target_name and target is None:
                log.warning("%s forwards dead-lettered messages to unknown %s; keeping them", entity.name,
                            target_name)
            partitioned = isinstance(entity.actor, PartitionedCoreActor)
            for index, core_partition in enumerate(each(entity.actor)):
                relay = self._link_core_dead_letters(entity, core_partition, target,
                                                     index if partitioned else None)
                if relay is not None:
                    old = self._relays.pop(id(core_partition), None)
                    if old is not None and old.source is core_partition and old.same_as(
                            relay.target, relay.sub, relay.hop_limit):
                        relay = old
                    elif old is not None:
                        old.stop()
                    relays[id(core_partition)] = relay
        for gone in self._relays.values():  # no longer forwarding (or its entity is gone)
            gone.stop()
        self._relays = relays
        for relay in relays.values():
            if relay.source.on_dead_letters is None:
                relay.start()

    async def start(self, host: str, port: int, *, tls: ssl.SSLContext | None = None, tls_port: int = -1,
                    management: ProtocolFactory | None = None,
                    management_tls: ssl.SSLContext | None = None) -> int:
        """Load everything, then listen; return the AMQP port actually bound.

        With ``management`` (an HTTP protocol factory), the AMQP port also serves it: plain HTTP, and
        HTTPS with ``management_tls`` (``listener.SniffingListener`` tells them apart).

        With ``tls``, also listen for amqps on ``tls_port`` (0 picks a free one; the bound port is
        ``amqps_port``): TLS first, then the usual SASL header, as the SDK dials (contract 1.1). A
        failed handshake closes that socket only; no connection is made for it.
        """
        for worker in self.workers:
            await worker.open()
            store = worker.store
            if isinstance(store, ServedByOneProcess) and not worker.offline:
                # The locks an earlier run of this broker held went with its receivers (store/port.py).
                dropped = await worker.call(store.drop_locks_of_earlier_runs)
                if dropped:
                    log.info("messaging store '%s': dropped %d lock(s) of an earlier run", worker.name, dropped)
        # The configuration's properties win over stored ones; a subscription's rules come from it only
        # when the subscription is new, so rules changed at runtime survive a restart.
        stored = {r.path.lower(): r for r in await self.worker.call(self.worker.store.load_entities)}
        # Regenerated keys win over Config.json's until the operator edits those keys there (apply_overrides).
        self.key_overrides, override_paths, legacy_overrides = _stored_overrides(list(stored.values()))
        self.authorization_rules, kept = apply_overrides(self.namespace.authorization_rules,
                                                         self.key_overrides.namespace)
        self.key_overrides = KeyOverrides(kept, self.key_overrides.entities)
        configured: list[PutEntity | DeleteEntity] = [
            PutEntity(EntityRecord(q.name, QUEUE, self._with_key_overrides(q.name, q.properties).to_json()))
            for q in self.namespace.queues]
        for topic in self.namespace.topics:
            configured.append(PutEntity(EntityRecord(
                topic.name, TOPIC, self._with_key_overrides(topic.name, topic.properties).to_json())))
            for sub in topic.subscriptions:
                path = named_subscription_path(topic.name, sub.name)
                subscription: dict[str, Any] = {"Properties": sub.properties.to_json()}
                if path.lower() not in stored:  # a stored one keeps its rules (rows of their own)
                    subscription["Rules"] = [r.to_json() for r in sub.rules]
                configured.append(PutEntity(EntityRecord(path, SUBSCRIPTION, subscription)))
        in_force = _override_records(self.key_overrides)
        # Overrides the configuration has since replaced go; the older release's one record is split.
        configured.extend(DeleteEntity(path) for path in sorted(override_paths - set(in_force)))
        if legacy_overrides:
            configured.extend(in_force.values())
            configured.append(DeleteEntity(KEY_OVERRIDES_PATH))
        self.entity_times, legacy = _stored_times(list(stored.values()))
        now = self.clock()
        known = {r.path.lower() for r in stored.values() if r.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        known |= {op.entity.path.lower() for op in configured
                  if isinstance(op, PutEntity) and op.entity.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        missing = known - set(self.entity_times)
        for path in missing:
            self.entity_times[path] = [now, now]  # first seen now (or created before times were kept)
        times_ops: list[PutEntity | DeleteEntity] = [self._times_record(path) for path in sorted(
            known if legacy else missing)]
        if legacy:  # the older release's one record for all entities, split into one per entity
            times_ops.append(DeleteEntity(ENTITY_TIMES_PATH))
        await self.worker.apply([*configured, *times_ops])
        records = await self.worker.call(self.worker.store.load_entities)
        for kind in (QUEUE, TOPIC, SUBSCRIPTION):  # a subscription needs its topic loaded first
            for record in records:
                if record.kind == kind:
                    await self._load(record)
        self._link_dead_letter_forwarding()
        if not self.worker.shared:  # (on a shared store another node's consumers may be reading them)
            for left in topic_consumers.left_behind(list(self.entities.values())):
                log.info("removing %s, a non-durable topic consumer's subscription left by an earlier run", left.name)
                await self._delete_entity(left)
            for left in temporary.left_behind(list(self.entities.values())):
                log.info("removing %s, a temporary destination left by an earlier run", left.name)
                await self._delete_entity(left)
        self._start_activations()
        log.info("serving %d entities", len(self.entities))
        loop = asyncio.get_running_loop()
        self._idle_sweeper = loop.create_task(self._sweep_idle_forever())
        if self.worker.shared:  # other nodes change entities in this store too
            self._entity_follower = loop.create_task(self._follow_entities_forever())
            self._activity_recorder = loop.create_task(self._record_activity_forever())
        try:
            self._server = await SniffingListener.start(host, port, lambda: BrokerConnection(self), management,
                                                        management_tls, sniff_timeout=self.limits.handshake_timeout)
        except OSError as exc:
            raise ListenFailed("amqp", host, port, exc) from None
        if tls is not None and tls_port >= 0:
            try:
                self._tls_server = await loop.create_server(lambda: BrokerConnection(self), host, tls_port, ssl=tls)
            except OSError as exc:
                raise ListenFailed("amqps", host, tls_port, exc) from None
            self.amqps_port = int(self._tls_server.sockets[0].getsockname()[1])
        self.port = self._server.port
        return self.port

    def _times_record(self, path: str) -> PutEntity:
        """The one entity's times record (only its own: another node may be writing another's)."""
        times = self.entity_times[path.lower()]
        return PutEntity(EntityRecord(_times_path(path), ENTITY_TIMES_KIND, {"Times": list(times)}))

    def _touched(self, path: str, *, created: bool = False) -> PutEntity:
        """Note an entity's creation or update now; the record to store with it."""
        now = self.clock()
        times = self.entity_times.setdefault(path.lower(), [now, now])
        if created:
            times[0] = now
        times[1] = now
        return self._times_record(path)

    def times_of(self, entity: Entity) -> tuple[int, int] | None:
        """(created, updated) in ms since the epoch."""
        times = self.entity_times.get(entity.name.lower())
        return (times[0], times[1]) if times is not None else None

    def _home_store(self, path: str) -> StoreWorker:
        """The store a non-partitioned entity lives in: its name picks one, the same on every start."""
        return self.workers[partition_index(path.lower(), len(self.workers))]

    def _settings(self, properties: QueueProperties | TopicProperties | SubscriptionProperties,
                  partitioned: bool = False) -> tuple[EntitySettings, int]:
        """The actor's settings from any entity kind's properties (absent ones take queue defaults)."""
        defaults = QueueProperties()

        def get(name: str) -> Any:
            return getattr(properties, name, getattr(defaults, name))

        kilobytes = get("max_message_size_in_kilobytes") or self.namespace.max_message_size_in_kilobytes
        max_size = getattr(properties, "max_size_in_megabytes", None)
        settings = EntitySettings(
            lock_duration=int(get("lock_duration").total_seconds() * 1000),
            default_ttl=_ms(get("default_message_time_to_live")),
            max_message_size=kilobytes * 1024,
            max_delivery_count=get("max_delivery_count"),
            dead_lettering_on_message_expiration=get("dead_lettering_on_message_expiration"),
            requires_session=get("requires_session"),
            max_size_in_bytes=max_size * 1024 * 1024 if max_size is not None else None,
            duplicate_detection_window=int(get("duplicate_detection_history_time_window").total_seconds() * 1000)
            if get("requires_duplicate_detection") else None,
        )
        max_bytes = kilobytes * 1024
        if partitioned and self.namespace.sku == "Premium":
            max_bytes = min(max_bytes, PREMIUM_PARTITIONED_MESSAGE_SIZE)
            settings = replace(settings, max_message_size=max_bytes)
        return settings, max_bytes

    async def _load(self, record: EntityRecord) -> None:
        path = record.path.lower()
        try:
            if record.kind == QUEUE:
                properties: QueueProperties | TopicProperties | SubscriptionProperties = \
                    QueueProperties.from_json(record.properties)
                rules: list[CompiledRule] = []
            elif record.kind == TOPIC:
                properties = TopicProperties.from_json(record.properties)
                rules = []
            else:
                properties = SubscriptionProperties.from_json(record.properties.get("Properties", {}))
                rules = [self._compile_rule(RuleDescription.from_json(r)) for r in record.properties.get("Rules", [])]
        except SodaliteError as exc:
            raise ConfigurationError(f"{record.kind} '{record.path}': {exc.description}") from None
        topic = None
        if record.kind == SUBSCRIPTION:
            topic = self.entity(path.split("/subscriptions/")[0])
            if topic is None:
                log.error("subscription %s has no topic; skipped", record.path)
                return
        # A subscription is partitioned as its topic is.
        partitioned = (topic.partitioned if topic is not None
                       else bool(getattr(properties, "enable_partitioning", False)))
        settings, max_message_size = self._settings(properties, partitioned)
        actor: EntityActor
        if partitioned:
            # Partition i in store i modulo the stores (existing data stays put):
            # a partitioned topic's partition i and its subscriptions' partitions i share a store.
            kind_of_partition = TopicActor if record.kind == TOPIC else CoreActor
            partitions = [kind_of_partition(PartitionRef(path, i), settings, self.workers[i % len(self.workers)],
                                            self.core_clock, node_id=self.node_id)
                          for i in range(self.namespace.partition_count)]
            actor = (PartitionedTopicActor([p for p in partitions if isinstance(p, TopicActor)])
                     if record.kind == TOPIC else PartitionedCoreActor(partitions))
        else:
            # A subscription lives with its topic, so a send's copies commit in one transaction.
            worker = self._home_store(topic.name if topic is not None else path)
            kind_of_actor = TopicActor if record.kind == TOPIC else CoreActor
            actor = kind_of_actor(PartitionRef(path, 0), settings, worker, self.core_clock, node_id=self.node_id)
        log.info("serving %s (%d partitions)", record.path, len(each(actor)))
        for partition in each(actor):
            if partition.worker.offline:
                partition.suspend()  # loads itself once its store is back
            else:
                await partition.load()
        entity = Entity(record.path, properties, max_message_size, actor,
                        record.kind, rules=rules, topic=topic)
        self.entities[path] = entity
        if topic is not None:
            topic.subscriptions[path] = entity
        if isinstance(actor, TopicActor):
            actor.plan = functools.partial(self._core_copies, entity)
        elif isinstance(actor, PartitionedTopicActor):
            for number, topic_partition in enumerate(actor.topics):
                topic_partition.plan = functools.partial(self._core_copies, entity, index=number)

    def publish(self, topic: Entity, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to a topic: each subscription's copies, committed together (all or none)."""
        if not isinstance(topic.actor, TopicActor | PartitionedTopicActor):
            raise InvalidOperation(f"'{topic.name}' is not a topic")
        return topic.actor.publish(drafts)

    def _core_copies(self, topic: Entity, drafts: Sequence[MessageDraft], now: int,
                     index: int | None = None) -> list[list[Copy]]:
        """Per draft, the copies a topic stores: each subscription's rules and actions applied; filter
        errors, and copies without a SessionId for a session-enabled subscription, to the
        subscription's dead-letter queue; a forwarding subscription's copies into where its ForwardTo
        leads (a queue, or another topic's subscriptions), within the hop limit, else to the transfer
        dead-letter queue where the limit was reached. A copy's time-to-live is capped by its
        destination's default and the topic's. A destination may live in another store (the topic
        actor stores those copies by that store's batch first). A partitioned topic's
        partition ``index`` stores into partition ``index`` of each partitioned destination (which
        shares its store); without an index, a partitioned destination's partition is the one the
        copy's key picks, as for a send (:meth:`_on_core_at`)."""
        cap = topic.actor.settings.default_ttl
        planned: list[list[Copy]] = []
        for draft in drafts:
            copies: list[Copy] = []
            self._core_fan_out(topic, draft, now, cap, 0, copies, index)
            planned.append(copies)
        return planned

    def _core_fan_out(self, topic: Entity, draft: MessageDraft, now: int, cap: int | None, hops: int,
                      out: list[Copy], index: int | None = None) -> None:
        for sub in topic.subscriptions.values():
            dead_letter_on_errors = bool(getattr(sub.properties, "dead_lettering_on_filter_evaluation_exceptions",
                                                 True))
            for copy in copies_for(sub.rules, draft, dead_letter_on_errors, sub.requires_session):
                actor = self._on_core_at(topic, sub, index, copy.draft)
                if copy.dead_letter is not None:
                    dead = wire.dead_lettered(core_record(copy.draft, now, None), *copy.dead_letter)
                    out.append(actor.dead_letter_copy(dead, now))
                elif not sub.forward_to:
                    out.append((actor, SubQueue.MAIN, core_record(copy.draft, now, _capped(actor, cap))))
                else:
                    route = self.route(sub)
                    total = hops + route.hops
                    limit = past_hop_limit(total, route.exceeded)
                    if limit is not None:
                        target = self._on_core_at(topic, route.entity, index, copy.draft)
                        dead = wire.dead_lettered(core_record(copy.draft, now, None),
                                                  MAX_TRANSFER_HOP_COUNT_EXCEEDED, limit)
                        out.append((target, SubQueue.TRANSFER_DEAD_LETTER, dead))
                    elif route.entity.kind == TOPIC:
                        # A partitioned topic reached without an index (from a non-partitioned one): the
                        # copy's key pins it to one partition, for every subscription of that topic.
                        at = index if index is not None or not route.entity.partitioned \
                            else self._core_index(route.entity, copy.draft)
                        self._core_fan_out(route.entity, copy.draft, now, cap, total, out, at)
                    else:
                        target = self._on_core_at(topic, route.entity, index, copy.draft)
                        out.append((target, SubQueue.MAIN, core_record(copy.draft, now, _capped(target, cap))))

    @staticmethod
    def _core_index(topic: Entity, draft: MessageDraft) -> int:
        """The partition of a partitioned topic on the core that ``draft``'s key (or, keyless, the
        topic's round-robin) pins it to, as a send's routing does."""
        actor = topic.actor
        assert isinstance(actor, PartitionedCoreActor)
        [(partition, _)] = actor.route([draft])
        return actor.partitions.index(partition)

    @staticmethod
    def _on_core_at(topic: Entity, entity: Entity, index: int | None, draft: MessageDraft | None = None) -> CoreActor:
        """``entity``'s actor on the core that a send to ``topic`` (on the core) stores copies into: its
        partition ``index`` when it is partitioned and an index is given (a partitioned topic's
        partition, which shares that partition's store), else the partition ``draft``'s key picks (as
        a send's routing picks it; keyless ones round-robin). Any store: the topic actor stores copies
        in another store by that store's batch."""
        actor = entity.actor
        if isinstance(actor, PartitionedCoreActor):
            if index is not None:
                actor = actor.partitions[index % len(actor.partitions)]
            elif draft is not None:
                [(actor, _)] = actor.route([draft])
            else:
                actor = actor.partitions[0]
        assert isinstance(actor, CoreActor)
        return actor

    @staticmethod
    def _compile_rule(rule: RuleDescription) -> CompiledRule:
        try:
            return CompiledRule.compile(rule)
        except SodaliteError as exc:
            raise type(exc)(f"rule '{rule.name}': {exc.description}") from None

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        """Add a rule (compiled first, so a bad filter is refused with its position) and store it as a
        row of its own. The store decides whether the name is taken: on a store several nodes share,
        another node may have added it a moment ago (then EntityAlreadyExists, as Service Bus answers)."""
        compiled = self._compile_rule(rule)
        async with self._entities_lock:  # not while the follow replaces this node's rules
            if not await self._write_rule(subscription, PutRule(subscription.name, rule.name, rule.to_json())):
                raise EntityAlreadyExists(f"the rule '{rule.name}' already exists on '{subscription.name}'")
            subscription.rules[:] = [*(r for r in subscription.rules if r.name.lower() != rule.name.lower()),
                                     compiled]

    async def remove_rule(self, subscription: Entity, name: str) -> None:
        async with self._entities_lock:
            removed = await self._write_rule(subscription, DeleteRule(subscription.name, name))
            # Gone from the store either way (another node may have removed it a moment ago).
            subscription.rules[:] = [r for r in subscription.rules if r.name.lower() != name.lower()]
            if not removed:
                raise EntityNotFound(f"the rule '{name}' does not exist on '{subscription.name}'")

    async def replace_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        """Replace the rule of the same name (the management API's update); the new one is compiled first."""
        compiled = self._compile_rule(rule)
        async with self._entities_lock:
            if not await self._write_rule(subscription, PutRule(subscription.name, rule.name, rule.to_json(),
                                                                replace=True)):
                raise EntityNotFound(f"the rule '{rule.name}' does not exist on '{subscription.name}'")
            rules = [compiled if r.name.lower() == rule.name.lower() else r for r in subscription.rules]
            if compiled not in rules:  # added through another node, not followed here yet
                rules.append(compiled)
            subscription.rules[:] = rules

    async def _write_rule(self, subscription: Entity, op: PutRule | DeleteRule) -> bool:
        """Write one rule row (one transaction, not the subscription's whole record); whether the store
        applied it (see PutRule and DeleteRule)."""
        subscription.actor.note_activity()  # a rule change counts against AutoDeleteOnIdle (seed)
        (result,) = await self.worker.apply([op])
        return isinstance(result, RuleWritten) and result.applied

    def _check_entity_quota(self, partitioned: bool) -> None:
        """The namespace's quotas on queues plus topics, and on partitioned ones (seed: 10,000 and 100)."""
        entities = [e for e in self.entities.values() if e.kind in (QUEUE, TOPIC)]
        refusal = namespace_full(len(entities), sum(1 for e in entities if e.partitioned), partitioned,
                                 self.namespace.max_entity_count, self.namespace.max_partitioned_entity_count)
        if refusal is not None:
            raise QuotaExceeded(refusal)

    async def create_queue(self, name: str, properties: QueueProperties) -> Entity:
        async with self._entities_lock:
            return await self._create_queue(name, properties)

    async def _create_queue(self, name: str, properties: QueueProperties) -> Entity:
        """Create and store a queue at runtime (the management API's PUT)."""
        validate_entity_name(name, "queue")
        if self.entity(name) is not None:
            raise EntityAlreadyExists(f"the messaging entity '{name}' already exists")
        self._check_entity_quota(properties.enable_partitioning)
        self._check_forward_targets(properties, new_name=name)
        record = EntityRecord(name, QUEUE, properties.to_json())
        await self._store_created(record)
        await self._load(record)
        self._link_dead_letter_forwarding()
        entity = self.entity(name)
        assert entity is not None
        return entity

    async def update_queue(self, entity: Entity, properties: QueueProperties) -> None:
        """Store new properties and apply them; every lock held on the queue is dropped.

        Properties a running queue cannot change in place (RequiresSession, EnablePartitioning,
        duplicate detection's on/off) are refused, as Service Bus refuses them.
        """
        fixed = ("requires_session", "enable_partitioning", "requires_duplicate_detection")
        changed = [name for name in fixed if getattr(properties, name) != getattr(entity.properties, name)]
        if "requires_session" in changed:  # Service Bus's words (the Go SDK's admin tests compare them)
            raise InvalidOperation("The value for the RequiresSession property of an existing Queue cannot be changed")
        if "enable_partitioning" in changed:
            raise InvalidOperation("Partitioning cannot be changed for Queue. ")  # Service Bus's words
        if changed:
            raise InvalidOperation(f"{', '.join(changed)} cannot be changed on an existing queue")
        self._check_forward_targets(properties, entity)
        await self.worker.apply([PutEntity(EntityRecord(entity.name, QUEUE, properties.to_json())),
                                 self._touched(entity.name)])
        settings, max_message_size = self._settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.keys_changed()
        await entity.actor.update_settings(settings)
        self._link_dead_letter_forwarding()

    def _check_forward_targets(self, properties: QueueProperties | SubscriptionProperties,
                               source: Entity | None = None, topic: Entity | None = None,
                               new_name: str | None = None) -> None:
        """The forwarding targets exist, and the source can reach them. A queue's ForwardTo routes each
        send at once. A subscription's copies forwarded elsewhere are stored by its topic's actor, into
        any queue or subscription past the target's ForwardTo chain, in any store; dead letters
        forwarded elsewhere go in the dead-lettering's transaction or through a relay
        (:meth:`_check_dead_letter_target`). ``source`` is the entity being changed (None: being
        created); ``topic``, a new subscription's topic; ``new_name``, a new queue's."""
        owner = topic if topic is not None else (source.topic if source is not None else None)
        for name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(properties, name, None)
            if not target:
                continue
            found = self.entity(entity_path(forward_target(target)))
            if found is None:
                raise EntityNotFound(f"the forwarding target '{target}' does not exist")
            if name == "forward_dead_lettered_messages_to":
                self._check_dead_letter_target(found)
            elif owner is not None:
                self.route(found)  # a chain that names an entity that is gone is refused now

    def _check_dead_letter_target(self, target: Entity) -> None:
        """ForwardDeadLetteredMessagesTo ``target``: past its ForwardTo chain, a queue or subscription
        (in the entity's store in the dead-lettering's transaction, elsewhere through a relay), or a
        topic (the dead letters then stay in the entity's dead-letter queue)."""
        destination = self._dead_letter_destination(target)
        if not self._forwards_on_core(destination):
            assert destination is not None
            raise NotImplementedOperation(
                f"forwarding dead-lettered messages into '{destination[0].name}' is not available")

    async def create_topic(self, name: str, properties: TopicProperties) -> Entity:
        async with self._entities_lock:
            return await self._create_topic(name, properties)

    async def _create_topic(self, name: str, properties: TopicProperties) -> Entity:
        """Create and store a topic at runtime (the management API's PUT)."""
        validate_entity_name(name, "topic")
        if self.entity(name) is not None:
            raise EntityAlreadyExists(f"the messaging entity '{name}' already exists")
        self._check_entity_quota(properties.enable_partitioning)
        record = EntityRecord(name, TOPIC, properties.to_json())
        await self._store_created(record)
        await self._load(record)
        self._start_activations()
        entity = self.entity(name)
        assert entity is not None
        return entity

    async def update_topic(self, entity: Entity, properties: TopicProperties) -> None:
        """Store new properties and apply them; partitioning and duplicate detection's on/off are fixed."""
        fixed = ("enable_partitioning", "requires_duplicate_detection")
        changed = [name for name in fixed if getattr(properties, name) != getattr(entity.properties, name)]
        if "enable_partitioning" in changed:  # Service Bus's words (the Go SDK's TestAdminClient_UpdateTopic)
            raise InvalidOperation("Partitioning cannot be changed for Topic. ")
        if changed:
            raise InvalidOperation(f"{', '.join(changed)} cannot be changed on an existing topic")
        await self.worker.apply([PutEntity(EntityRecord(entity.name, TOPIC, properties.to_json())),
                                 self._touched(entity.name)])
        settings, max_message_size = self._settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.keys_changed()
        await entity.actor.update_settings(settings)

    async def create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                  rules: list[RuleDescription]) -> Entity:
        async with self._entities_lock:
            return await self._create_subscription(topic, name, properties, rules)

    async def _create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                   rules: list[RuleDescription]) -> Entity:
        """Create and store a subscription of ``topic`` at runtime, with its first rules."""
        validate_entity_name(name, "subscription")
        path = named_subscription_path(topic.name, name)
        if self.entity(path) is not None:
            raise EntityAlreadyExists(f"the subscription '{name}' already exists on '{topic.name}'")
        refusal = topic_full(topic.name, len(topic.subscriptions), self.max_subscriptions_per_topic)
        if refusal is not None:
            raise QuotaExceeded(refusal)
        self._check_forward_targets(properties, topic=topic)
        for rule in rules:
            self._compile_rule(rule)  # refuse a bad filter before anything is stored
        record = EntityRecord(path, SUBSCRIPTION,
                              {"Properties": properties.to_json(), "Rules": [r.to_json() for r in rules]})
        await self._store_created(record)
        await self._load(record)
        self._link_dead_letter_forwarding()
        entity = self.entity(path)
        assert entity is not None
        return entity

    async def update_subscription(self, entity: Entity, properties: SubscriptionProperties) -> None:
        """Store new properties (its rules kept) and apply them; every lock held on it is dropped."""
        if properties.requires_session != entity.requires_session:
            raise InvalidOperation("The value for the RequiresSession property of an existing Subscription cannot be "
                                   "changed")
        self._check_forward_targets(properties, entity)
        record = {"Properties": properties.to_json()}  # its rules are rows of their own, left as they are
        await self.worker.apply([PutEntity(EntityRecord(entity.name, SUBSCRIPTION, record)),
                                 self._touched(entity.name)])
        settings, max_message_size = self._settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.keys_changed()
        await entity.actor.update_settings(settings)
        self._link_dead_letter_forwarding()

    # ---- AutoDeleteOnIdle ----------------------------------------------------------------------------

    async def _follow_entities_forever(self) -> None:
        """Several nodes on one store: when the store announces another node's entity change, and
        every ``worker.follow_seconds`` (1 s) in any case, take up the entities another node created, drop those
        it deleted, apply the properties and subscription rules it changed and the namespace keys it
        regenerated (issue 18.3: seen by every node within 1 s)."""
        while True:
            try:
                await asyncio.wait_for(self._entities_changed.wait(), self.worker.follow_seconds)
            except TimeoutError:
                pass
            self._entities_changed.clear()
            try:
                await self.follow_entities()
            except SodaliteError as exc:
                log.warning("following the store's entities failed: %s", exc)
            except Exception:
                log.exception("following the store's entities failed")

    async def follow_entities(self) -> None:
        async with self._entities_lock:  # not while this node creates or deletes one itself
            await self._follow_entities()

    async def _follow_entities(self) -> None:
        stored = await self.worker.call(self.worker.store.load_entities)
        self._follow_key_overrides(stored)
        self.entity_times.update(_stored_times(stored)[0])  # those of entities created or changed elsewhere
        records = {r.path.lower(): r for r in stored if r.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        for path, entity in list(self.entities.items()):
            if path not in records and path in self.entities:
                await self._drop_locally(entity)
        for kind in (QUEUE, TOPIC, SUBSCRIPTION):  # a subscription needs its topic first
            for path, record in records.items():
                if record.kind != kind:
                    continue
                known = self.entities.get(path)
                if known is None:
                    try:
                        await self._load(record)
                    except ConfigurationError as exc:  # e.g. a rule this node cannot compile
                        self._refuse_followed(record, record.properties, f"not taken up: {exc.description}")
                        continue
                    log.info("took up %s, created through another node", record.path)
                else:
                    await self._follow_changes(known, record)
        self._link_dead_letter_forwarding()
        self._start_activations()

    async def _follow_changes(self, known: Entity, record: EntityRecord) -> None:
        """Apply what another node changed in ``known``'s stored record: its properties (any kind; the
        locks this node holds on a queue or subscription end with it, as on the node that changed it) and
        a subscription's rules, compiled as ``add_rule`` compiles them. A record this node cannot read,
        or rules it cannot compile, are logged (once per stored version) and the old ones kept."""
        raw: dict[str, Any] = record.properties
        try:
            if record.kind == QUEUE:
                properties: QueueProperties | TopicProperties | SubscriptionProperties = QueueProperties.from_json(raw)
            elif record.kind == TOPIC:
                properties = TopicProperties.from_json(raw)
            else:
                properties = SubscriptionProperties.from_json(raw.get("Properties", {}))
        except SodaliteError as exc:
            self._refuse_followed(record, raw, f"changed properties not applied: {exc.description}")
            return
        if properties != known.properties:
            settings, max_message_size = self._settings(properties, known.partitioned)
            known.properties, known.max_message_size = properties, max_message_size
            self.keys_changed()
            await known.actor.update_settings(settings)
        if record.kind == SUBSCRIPTION:
            try:
                descriptions = [RuleDescription.from_json(r) for r in raw.get("Rules", [])]
                if descriptions != [r.description for r in known.rules]:
                    known.rules[:] = [self._compile_rule(d) for d in descriptions]
                    log.info("applied the rules of %s, changed through another node", record.path)
            except SodaliteError as exc:
                self._refuse_followed(record, raw, f"changed rules not applied, the old ones kept: {exc.description}")
                return
        self._follow_refused.pop(record.path.lower(), None)

    def _refuse_followed(self, record: EntityRecord, raw: object, problem: str) -> None:
        """Log a stored record the follow cannot apply, once per version of it (it is re-read every second)."""
        path = record.path.lower()
        if self._follow_refused.get(path) != raw:
            self._follow_refused[path] = raw
            log.error("%s %s, changed through another node: %s", record.kind, record.path, problem)

    def _follow_key_overrides(self, stored: Sequence[EntityRecord]) -> None:
        """Take up the namespace rules' keys another node regenerated (a queue's or topic's own keys
        are in its record, which ``_follow_changes`` applies)."""
        records = [r for r in stored if r.kind == KEY_OVERRIDES_KIND]
        if not records:
            return
        try:
            overrides, _, _ = _stored_overrides(records)
        except (KeyError, TypeError, AttributeError, SodaliteError) as exc:
            self._refuse_followed(records[0], [r.properties for r in records], f"regenerated keys not applied: {exc}")
            return

        def state(of: KeyOverrides) -> dict[str, EntityRecord]:  # the same overrides in any order
            return {path: put.entity for path, put in _override_records(of).items()}

        if state(overrides) != state(self.key_overrides):
            self.key_overrides = overrides
            self.authorization_rules, _ = apply_overrides(self.namespace.authorization_rules, overrides.namespace)
            log.info("applied the shared access keys regenerated through another node")
            self.keys_changed()

    async def _store_created(self, record: EntityRecord) -> None:
        """Store a new entity's record, and remove whatever an earlier entity of its path left behind
        in the same transaction: another node that had not yet followed that entity's deletion may
        have stored messages for it since (a send's copies for a subscription deleted through this
        node), and they must not show up in the new one. The other stores, where a partitioned
        entity's partitions or a topic's subscriptions may lie, are cleared first (those online)."""
        for worker in self.workers[1:]:
            if not worker.offline:
                await worker.apply([DeleteEntity(record.path)])
        await self.worker.apply([DeleteEntity(record.path), PutEntity(record),
                                 self._touched(record.path, created=True)])

    async def _drop_locally(self, entity: Entity) -> None:
        """Another node deleted ``entity`` (from the store): stop serving it here; links are detached."""
        for sub in list(entity.subscriptions.values()):
            await self._drop_locally(sub)
        await self._stop_serving(entity)
        log.info("dropped %s, deleted through another node", entity.name)

    async def _stop_serving(self, entity: Entity) -> None:
        """Forget ``entity`` here (not in the store): detach its links, close its actor."""
        self.entities.pop(entity.name.lower(), None)
        if entity.topic is not None:
            entity.topic.subscriptions.pop(entity.name.lower(), None)
        for connection in list(self.connections):
            connection.entity_deleted(entity)
        self.keys_changed()  # its own rules went with it
        await entity.actor.close()

    async def _sweep_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(self.idle_sweep_seconds)
            try:
                await self.sweep_idle()
            except Exception:  # the sweeper must outlive one bad deletion
                log.exception("idle sweep failed")

    async def sweep_idle(self) -> list[str]:
        """Delete every entity idle for its AutoDeleteOnIdle; return their names.

        Auto-forwarding counts as a receiver at work, so an entity that forwards is never idle
        (expiration seed).
        """
        if self.worker.shared:
            await self.record_activity()  # this node's own registrations are current for the decision
        now = self.clock()
        deleted = []
        for entity in self._idle_candidates():
            if entity.name.lower() not in self.entities:
                continue  # went with its topic in this sweep
            idle_ms = int(entity.properties.auto_delete_on_idle.total_seconds() * 1000)
            # A topic is idle only if nothing happened on any of its subscriptions either (seed).
            if not (entity.actor.is_idle(now, idle_ms) and all(
                    sub.actor.is_idle(now, idle_ms) for sub in entity.subscriptions.values())):
                continue
            if self.worker.shared:
                # Several nodes: the store decides, from every node's registrations (clarifications.md,
                # 18); a node whose registrations lapsed no longer counts. Fenced: deleted once.
                if await self._scheduled_in_store(entity):
                    continue
                lapse_ms = int(ACTIVITY_LAPSE * self.activity_seconds * 1000)
                (result,) = await self.worker.apply([DeleteIdleEntity(entity.name, now - idle_ms, now - lapse_ms)])
                if not (isinstance(result, IdleDeleted) and result.deleted):
                    continue
            await self.delete_entity(entity)
            deleted.append(entity.name)
        return deleted

    def _idle_candidates(self) -> list[Entity]:
        """The entities with an AutoDeleteOnIdle; forwarding counts as receiving (expiration seed)."""
        return [e for e in self.entities.values()
                if e.properties.auto_delete_on_idle < TIMESPAN_MAX and not e.forward_to]

    async def _scheduled_in_store(self, entity: Entity) -> bool:
        """Scheduled messages keep an entity alive; another node's are in the store, not in this node's counts."""
        for actor in [entity.actor, *(sub.actor for sub in entity.subscriptions.values())]:
            for partition in each(actor):
                counts = await partition.worker.call(functools.partial(partition.worker.store.counts, partition.ref))
                if counts.scheduled > 0:
                    return True
        return False

    async def record_activity(self) -> None:
        """Write this node's AutoDeleteOnIdle registrations (several nodes on one store): per entity
        with an idle time, its last activity and the receivers attached here, a topic's with its
        subscriptions'. The idle sweep of any node decides from them (DeleteIdleEntity)."""
        entries = []
        for entity in self._idle_candidates():
            last, receivers = 0, 0
            for actor in [entity.actor, *(sub.actor for sub in entity.subscriptions.values())]:
                for partition in each(actor):
                    at, attached = partition.activity()
                    last, receivers = max(last, at), receivers + attached
            entries.append(EntityActivity(entity.name, last, receivers))
        if entries:
            await self.worker.apply([RecordActivity(self.node_id, self.clock(), tuple(entries))])

    async def _record_activity_forever(self) -> None:
        while True:
            await asyncio.sleep(self.activity_seconds)
            try:
                await self.record_activity()
            except SodaliteError as exc:  # the store is away: the next refresh tries again
                log.warning("AutoDeleteOnIdle registrations not refreshed: %s", exc)

    async def delete_entity(self, entity: Entity) -> None:
        """Remove the entity, its messages and sub-queues; links on it are detached with amqp:not-found."""
        async with self._entities_lock:
            await self._delete_entity(entity)

    async def _delete_entity(self, entity: Entity) -> None:
        self.entities.pop(entity.name.lower(), None)  # at once: nothing new reaches it meanwhile
        self._link_dead_letter_forwarding()  # nor dead letters forwarded to it (they stay where they are)
        for sub in list(entity.subscriptions.values()):
            await self._delete_entity(sub)
        await self._stop_serving(entity)
        for worker in {id(p.worker): p.worker for p in each(entity.actor)}.values():
            if worker is not self.worker:
                await worker.apply([DeleteEntity(entity.name)])  # its partitions kept there
        self.entity_times.pop(entity.name.lower(), None)
        await self.worker.apply([DeleteEntity(entity.name), DeleteEntity(_times_path(entity.name))])
        log.info("deleted %s", entity.name)

    # ---- messaging stores --------------------------------------------------------------------------------

    def store(self, name: str) -> StoreWorker:
        found = next((w for w in self.workers if w.name.lower() == name.lower()), None)
        if found is None:
            raise EntityNotFound(f"there is no messaging store '{name}' (stores: "
                                 f"{', '.join(w.name for w in self.workers)})")
        return found

    def set_store_online(self, name: str, online: bool) -> None:
        """The operator's outage switch. Offline, the store's partitions refuse work with a retryable
        error and a partitioned entity's sends go to its other partitions; back online, each
        partition rebuilds itself from the store, where every acknowledged message still is."""
        worker = self.store(name)
        worker.offline = not online
        log.warning("messaging store %s is now %s", worker.name, "online" if online else "offline")
        if online:
            for entity in self.entities.values():
                for partition in each(entity.actor):
                    if partition.worker is worker and isinstance(partition, CoreActor):
                        partition.resume()
            return
        for entity in self.entities.values():
            for partition in each(entity.actor):
                if partition.worker is worker:
                    partition.suspend()

    def store_status(self) -> list[dict[str, Any]]:
        return [{"name": w.name, "online": not w.offline} for w in self.workers]

    async def stop(self) -> None:
        """Stop at once: connections dropped, then the entities and the stores closed."""
        self._stop_accepting()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        await self._close_entities_and_stores()

    async def shutdown(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Stop gracefully (SIGTERM), within about ``grace`` seconds.

        Accept no connection and read no frame more; let the store work already begun commit and its
        replies (dispositions, deliveries) reach the clients; then close each connection with
        ``amqp:connection:forced``, which the SDKs retry by reconnecting; then, the entities still
        running, put back what those connections never got (ReceiveAndDelete messages taken for a
        transfer never written, locks of deliveries never written), and only then close the entities
        and the stores. Work not committed within ``grace`` is dropped unanswered, as a crash would drop
        it: never acknowledged, so nothing acknowledged is lost, and the client's retry sends it again."""
        self._stop_accepting()
        for connection in list(self.connections):
            connection.stop_reading()
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(grace):
                for entity in list(self.entities.values()):
                    await entity.actor.drained()  # its partitions' store work committed and answered
        except TimeoutError:
            log.warning("stopping: store work still in flight after %.0f s; closing regardless", grace)
        for connection in list(self.connections):
            connection.flush()  # the replies of what just committed
            connection.close_for_shutdown("the broker is shutting down; reconnect and retry")
        await asyncio.sleep(0)  # let the transports write what they hold before the stores go
        left = max(1.0, grace - (asyncio.get_running_loop().time() - started))
        try:
            async with asyncio.timeout(left):
                for entity in list(self.entities.values()):
                    await entity.actor.drained()  # the put-backs the closed connections asked for
        except TimeoutError:
            log.warning("stopping: putting back unwritten deliveries took over %.0f s; closing regardless", left)
        await self._close_entities_and_stores()

    def _stop_accepting(self) -> None:
        for task in (self._idle_sweeper, self._activity_recorder):
            if task is not None:
                task.cancel()
        if self._entity_follower is not None:
            self._entity_follower.cancel()
        for relay in self._relays.values():
            relay.stop()
        self._relays.clear()
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()

    async def _close_entities_and_stores(self) -> None:
        for entity in self.entities.values():
            await entity.actor.close()
        for worker in self.workers:
            await worker.close()
