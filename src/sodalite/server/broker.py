"""The broker process: composes its namespace, stores, entities and listeners, and starts and stops them.

Rules:
- Startup writes the configured entities into the store (the configuration wins over what was
  stored), then loads every stored entity and its messages, and only then starts listening, so a
  client never reaches a half-loaded broker.
- Entities are created, updated and deleted here, under one lock, never while the follow of other
  nodes' changes runs (``server/entity_follow.py``).
- Shutdown stops accepting, lets in-flight commits finish, and closes the stores.

Beside it, each with one job: ``keys`` (shared access keys), ``entity_times``, ``entity_loader`` (a
stored record to a served entity), ``topology`` (routes, dead letters forwarded, a topic's copies),
``entity_follow`` and ``idle_sweep``. Connections and their endpoints see the broker only as
``broker_port.BrokerPort`` (``connection_handler.ConnectionHost`` for the driver).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sodalite.errors import (
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    QuotaExceeded,
    SodaliteError,
)
from sodalite.model.authorization import (
    Authorization,
    AuthorizationRule,
    KeyType,
    authorize,
    find_rule,
)
from sodalite.model.config import NamespaceConfig
from sodalite.model.entities import (
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
    forward_target,
    validate_entity_name,
)
from sodalite.model.partition import MessageDraft
from sodalite.model.quotas import namespace_full, topic_full
from sodalite.server import temporary, topic_consumers
from sodalite.server.addresses import entity_path
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_follow import EntityFollower
from sodalite.server.entity_loader import EntityLoader, compile_rule, read_record
from sodalite.server.entity_settings import Clock, wall_clock_ms
from sodalite.server.entity_times import EntityTimes
from sodalite.server.idle_sweep import ACTIVITY_LAPSE, ACTIVITY_SECONDS, IDLE_SWEEP_SECONDS, IdleSweep
from sodalite.server.keys import Keys
from sodalite.server.limits import ConnectionLimits
from sodalite.server.listener import ListenFailed, ProtocolFactory, SniffingListener
from sodalite.server.metrics import BrokerMetrics
from sodalite.server.partition_runner import LoopClock
from sodalite.server.partitioned_actor import each
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity, named_subscription_path
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.server.topology import Topology
from sodalite.store.port import (
    DeleteEntity,
    DeleteRule,
    EntityRecord,
    MessagingStore,
    PutEntity,
    PutRule,
    RuleWritten,
    ServedByOneProcess,
)

log = logging.getLogger(__name__)

__all__ = ["ACTIVITY_LAPSE", "ACTIVITY_SECONDS", "IDLE_SWEEP_SECONDS", "SHUTDOWN_GRACE_S", "Broker"]

SHUTDOWN_GRACE_S = 10.0  # a graceful stop waits this long at most for store work in flight
MAX_SUBSCRIPTIONS_PER_TOPIC = 2000  # Service Bus quotas: subscriptions per topic
DEFAULT_STORE = "default"  # the store in the data directory, which also keeps the entity records


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
        # The messaging stores, each served by its own thread. The first also keeps the entity records.
        self.workers = [StoreWorker(store, DEFAULT_STORE), *(StoreWorker(s, name) for name, s in more_stores)]
        self.worker = self.workers[0]
        self.loader = EntityLoader(namespace, self.workers, self.core_clock, node_id)
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
        self.topology = Topology(self.entities)  # ForwardTo routes, dead letters forwarded, a topic's copies
        self.route = self.topology.route
        self.connections: set[BrokerConnection] = set()
        # Those of them with no token accepted yet, oldest first, with when each was accepted
        # (monotonic seconds): the allowance of server/limits.py.
        self.unauthenticated: dict[BrokerConnection, float] = {}
        self.limits = ConnectionLimits()  # per connection and in all (server/limits.py)
        # The namespace's shared access rules, with keys regenerated at runtime (start() applies stored ones).
        self.keys = Keys(namespace.authorization_rules)
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
        self.entity_times = EntityTimes()
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
        self._idle = IdleSweep(self)
        self._entity_follower: asyncio.Task[None] | None = None
        self._entities_lock = asyncio.Lock()  # entity creation and deletion against the follower
        self._entities_changed = asyncio.Event()  # another node changed entity records (the store's feed)
        self._follower = EntityFollower(self, load=self._load, drop=self._drop_locally, relink=self._relink)
        self.worker.on_entities_changed = self._entities_changed.set

    def entity(self, path: str) -> Entity | None:
        return self.entities.get(path.lower())

    # ---- shared access authorization -----------------------------------------------------------------

    @property
    def authorization_rules(self) -> tuple[AuthorizationRule, ...]:
        """The namespace's shared access rules, with the keys regenerated since the configuration."""
        return self.keys.rules

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
        scope = None if entity is None else entity.name
        after, overrides, record = self.keys.regenerate(rules, before, scope, key_type, key)
        updated = tuple(after if r is before else r for r in rules)
        puts = [record]
        if entity is not None:
            current = entity.properties
            assert isinstance(current, QueueProperties | TopicProperties)
            properties: QueueProperties | TopicProperties = replace(current, authorization_rules=updated)
            puts.append(PutEntity(EntityRecord(entity.name, entity.kind, properties.to_json())))
        await self.worker.apply(puts)
        self.keys.overrides = overrides
        if entity is None:
            self.keys.rules = updated
        else:
            entity.properties = properties
        self.keys_changed()
        return after

    def _start_activations(self) -> None:
        """Topics on the core publish their due scheduled messages only once their subscriptions are
        loaded (those loaded after them at start, or taken up from another node)."""
        for entity in self.entities.values():
            if isinstance(entity.actor, TopicActor | PartitionedTopicActor):
                entity.actor.start_activation()

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
        await self._open_stores()
        stored = {r.path.lower(): r for r in await self.worker.call(self.worker.store.load_entities)}
        configured = self._configured_records(stored)
        known = {r.path.lower() for r in stored.values() if r.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        known |= {op.entity.path.lower() for op in configured
                  if isinstance(op, PutEntity) and op.entity.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        times_ops = self.entity_times.load(list(stored.values()), known, self.clock())
        await self.worker.apply([*configured, *times_ops])
        records = await self.worker.call(self.worker.store.load_entities)
        for kind in (QUEUE, TOPIC, SUBSCRIPTION):  # a subscription needs its topic loaded first
            for record in records:
                if record.kind == kind:
                    await self._load(record)
        self.topology.link_dead_letter_forwarding()
        if not self.worker.shared:  # (on a shared store another node's consumers may be reading them)
            await self._remove_left_behind()
        self._start_activations()
        log.info("serving %d entities", len(self.entities))
        loop = asyncio.get_running_loop()
        self._idle_sweeper = loop.create_task(self._idle.sweep_forever())
        if self.worker.shared:  # other nodes change entities in this store too
            self._entity_follower = loop.create_task(
                self._follower.forever(self._entities_changed, self.follow_entities))
            self._activity_recorder = loop.create_task(self._idle.record_activity_forever())
        await self._listen(host, port, tls, tls_port, management, management_tls)
        return self.port

    async def _open_stores(self) -> None:
        for worker in self.workers:
            await worker.open()
            store = worker.store
            if isinstance(store, ServedByOneProcess) and not worker.offline:
                # The locks an earlier run of this broker held went with its receivers (store/port.py).
                dropped = await worker.call(store.drop_locks_of_earlier_runs)
                if dropped:
                    log.info("messaging store '%s': dropped %d lock(s) of an earlier run", worker.name, dropped)

    def _configured_records(self, stored: dict[str, EntityRecord]) -> list[PutEntity | DeleteEntity]:
        """The configured entities' records to write over the ``stored`` ones (by lower-cased path): the
        configuration's properties win over stored ones; a subscription's rules come from it only when
        the subscription is new, so rules changed at runtime survive a restart. Regenerated keys win
        over Config.json's until the operator edits those keys there (``server/keys.py``)."""
        override_paths, legacy_overrides = self.keys.load(list(stored.values()))
        configured: list[PutEntity | DeleteEntity] = [
            PutEntity(EntityRecord(q.name, QUEUE, self.keys.configured_entity(q.name, q.properties).to_json()))
            for q in self.namespace.queues]
        for topic in self.namespace.topics:
            configured.append(PutEntity(EntityRecord(
                topic.name, TOPIC, self.keys.configured_entity(topic.name, topic.properties).to_json())))
            for sub in topic.subscriptions:
                path = named_subscription_path(topic.name, sub.name)
                subscription: dict[str, Any] = {"Properties": sub.properties.to_json()}
                if path.lower() not in stored:  # a stored one keeps its rules (rows of their own)
                    subscription["Rules"] = [r.to_json() for r in sub.rules]
                configured.append(PutEntity(EntityRecord(path, SUBSCRIPTION, subscription)))
        # Overrides the configuration has since replaced go; the older release's one record is split.
        configured.extend(self.keys.record_changes(override_paths, legacy_overrides))
        return configured

    async def _remove_left_behind(self) -> None:
        """What an earlier run left that lives only as long as its links: non-durable topic consumers'
        subscriptions and temporary destinations."""
        for left in topic_consumers.left_behind(list(self.entities.values())):
            log.info("removing %s, a non-durable topic consumer's subscription left by an earlier run", left.name)
            await self._delete_entity(left)
        for left in temporary.left_behind(list(self.entities.values())):
            log.info("removing %s, a temporary destination left by an earlier run", left.name)
            await self._delete_entity(left)

    async def _listen(self, host: str, port: int, tls: ssl.SSLContext | None, tls_port: int,
                      management: ProtocolFactory | None, management_tls: ssl.SSLContext | None) -> None:
        try:
            self._server = await SniffingListener.start(host, port, lambda: BrokerConnection(self), management,
                                                        management_tls, sniff_timeout=self.limits.handshake_timeout)
        except OSError as exc:
            raise ListenFailed("amqp", host, port, exc) from None
        if tls is not None and tls_port >= 0:
            try:
                self._tls_server = await asyncio.get_running_loop().create_server(
                    lambda: BrokerConnection(self), host, tls_port, ssl=tls)
            except OSError as exc:
                raise ListenFailed("amqps", host, tls_port, exc) from None
            self.amqps_port = int(self._tls_server.sockets[0].getsockname()[1])
        self.port = self._server.port

    def _touched(self, path: str, *, created: bool = False) -> PutEntity:
        """Note an entity's creation or update now; the record to store with it."""
        return self.entity_times.touched(path, self.clock(), created=created)

    def times_of(self, entity: Entity) -> tuple[int, int] | None:
        """(created, updated) in ms since the epoch."""
        return self.entity_times.of(entity.name)

    def _home_store(self, path: str) -> StoreWorker:
        """The store a non-partitioned entity lives in: its name picks one, the same on every start."""
        return self.loader.home_store(path)

    async def _load(self, record: EntityRecord) -> None:
        """Serve the stored entity ``record`` (``server/entity_loader.py``); a subscription needs its topic."""
        properties, rules = read_record(record)
        topic = None
        if record.kind == SUBSCRIPTION:
            topic = self.entity(record.path.lower().split("/subscriptions/")[0])
            if topic is None:
                log.error("subscription %s has no topic; skipped", record.path)
                return
        entity = await self.loader.load(record, properties, rules, topic)
        path = record.path.lower()
        self.entities[path] = entity
        if topic is not None:
            topic.subscriptions[path] = entity
        actor = entity.actor
        if isinstance(actor, TopicActor):
            actor.plan = functools.partial(self.topology.copies, entity)
        elif isinstance(actor, PartitionedTopicActor):
            for number, topic_partition in enumerate(actor.topics):
                topic_partition.plan = functools.partial(self.topology.copies, entity, index=number)

    def publish(self, topic: Entity, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to a topic: each subscription's copies, committed together (all or none)."""
        if not isinstance(topic.actor, TopicActor | PartitionedTopicActor):
            raise InvalidOperation(f"'{topic.name}' is not a topic")
        return topic.actor.publish(drafts)

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        """Add a rule (compiled first, so a bad filter is refused with its position) and store it as a
        row of its own. The store decides whether the name is taken: on a store several nodes share,
        another node may have added it a moment ago (then EntityAlreadyExists, as Service Bus answers)."""
        compiled = compile_rule(rule)
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
        compiled = compile_rule(rule)
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
        self.topology.link_dead_letter_forwarding()
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
        settings, max_message_size = self.loader.settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.keys_changed()
        await entity.actor.update_settings(settings)
        self.topology.link_dead_letter_forwarding()

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
                self.topology.check_dead_letter_target(found)
            elif owner is not None:
                self.route(found)  # a chain that names an entity that is gone is refused now

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
        settings, max_message_size = self.loader.settings(properties, entity.partitioned)
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
            compile_rule(rule)  # refuse a bad filter before anything is stored
        record = EntityRecord(path, SUBSCRIPTION,
                              {"Properties": properties.to_json(), "Rules": [r.to_json() for r in rules]})
        await self._store_created(record)
        await self._load(record)
        self.topology.link_dead_letter_forwarding()
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
        settings, max_message_size = self.loader.settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.keys_changed()
        await entity.actor.update_settings(settings)
        self.topology.link_dead_letter_forwarding()

    # ---- following other nodes -----------------------------------------------------------------------

    async def follow_entities(self) -> None:
        """Take up the entity changes other nodes made in the shared store (``server/entity_follow.py``)."""
        async with self._entities_lock:  # not while this node creates or deletes one itself
            await self._follower.follow()

    def _relink(self) -> None:
        """Point dead-letter forwarding and topic activations at the entities served now."""
        self.topology.link_dead_letter_forwarding()
        self._start_activations()

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

    async def sweep_idle(self) -> list[str]:
        """Delete every entity idle for its AutoDeleteOnIdle; return their names (``server/idle_sweep.py``)."""
        return await self._idle.sweep()

    async def record_activity(self) -> None:
        """Write this node's AutoDeleteOnIdle registrations (several nodes on one store)."""
        await self._idle.record_activity()

    async def delete_entity(self, entity: Entity) -> None:
        """Remove the entity, its messages and sub-queues; links on it are detached with amqp:not-found."""
        async with self._entities_lock:
            await self._delete_entity(entity)

    async def _delete_entity(self, entity: Entity) -> None:
        self.entities.pop(entity.name.lower(), None)  # at once: nothing new reaches it meanwhile
        self.topology.link_dead_letter_forwarding()  # nor dead letters forwarded to it (they stay where they are)
        for sub in list(entity.subscriptions.values()):
            await self._delete_entity(sub)
        await self._stop_serving(entity)
        for worker in {id(p.worker): p.worker for p in each(entity.actor)}.values():
            if worker is not self.worker:
                await worker.apply([DeleteEntity(entity.name)])  # its partitions kept there
        await self.worker.apply([DeleteEntity(entity.name), self.entity_times.forget(entity.name)])
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
        self.topology.stop_relays()
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()

    async def _close_entities_and_stores(self) -> None:
        for entity in self.entities.values():
            await entity.actor.close()
        for worker in self.workers:
            await worker.close()
