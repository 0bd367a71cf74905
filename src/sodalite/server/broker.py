"""The broker process: composes its namespace, stores, entities and listeners, and starts and stops them.

Rules:
- Startup writes the configured entities into the store (the configuration wins over what was
  stored), then loads every stored entity and its messages, and only then starts listening, so a
  client never reaches a half-loaded broker.
- Shutdown stops accepting, lets in-flight commits finish, and closes the stores.

Beside it, each with one job: ``keys`` (shared access keys), ``entity_times``, ``entity_loader`` (a
stored record to a served entity), ``entity_changes`` (create, update, delete, rules), ``topology``
(routes, dead letters forwarded, a topic's copies), ``entity_follow`` and ``idle_sweep``.
Connections and their endpoints see the broker only as ``broker_port.BrokerPort``
(``connection_handler.ConnectionHost`` for the driver).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sodalite.errors import (
    EntityNotFound,
    InvalidOperation,
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
)
from sodalite.model.partition import MessageDraft
from sodalite.server import temporary, topic_consumers
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_changes import EntityChanges
from sodalite.server.entity_follow import EntityFollower
from sodalite.server.entity_loader import EntityLoader
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
    EntityRecord,
    MessagingStore,
    PutEntity,
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
        # Every entity runs on the partition core over the store port (server/core_actor.py).
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
        self._entities_changed = asyncio.Event()  # another node changed entity records (the store's feed)
        self._changes = EntityChanges(self)  # load, create, update, delete, rules
        self._follower = EntityFollower(self, load=self._changes.load, drop=self._changes.drop_locally,
                                        relink=self._changes.relink)
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
                    await self._changes.load(record)
        self.topology.link_dead_letter_forwarding()
        if not self.worker.shared:  # (on a shared store another node's consumers may be reading them)
            await self._remove_left_behind()
        self._changes.start_activations()
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
            await self._changes.delete_now(left)
        for left in temporary.left_behind(list(self.entities.values())):
            log.info("removing %s, a temporary destination left by an earlier run", left.name)
            await self._changes.delete_now(left)

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

    def times_of(self, entity: Entity) -> tuple[int, int] | None:
        """(created, updated) in ms since the epoch."""
        return self.entity_times.of(entity.name)

    def _home_store(self, path: str) -> StoreWorker:
        """The store a non-partitioned entity lives in: its name picks one, the same on every start."""
        return self.loader.home_store(path)

    def publish(self, topic: Entity, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to a topic: each subscription's copies, committed together (all or none)."""
        if not isinstance(topic.actor, TopicActor | PartitionedTopicActor):
            raise InvalidOperation(f"'{topic.name}' is not a topic")
        return topic.actor.publish(drafts)

    # ---- entity changes (server/entity_changes.py) ------------------------------------------------

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        await self._changes.add_rule(subscription, rule)

    async def remove_rule(self, subscription: Entity, name: str) -> None:
        await self._changes.remove_rule(subscription, name)

    async def replace_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        await self._changes.replace_rule(subscription, rule)

    async def create_queue(self, name: str, properties: QueueProperties) -> Entity:
        return await self._changes.create_queue(name, properties)

    async def update_queue(self, entity: Entity, properties: QueueProperties) -> None:
        await self._changes.update_queue(entity, properties)

    async def create_topic(self, name: str, properties: TopicProperties) -> Entity:
        return await self._changes.create_topic(name, properties)

    async def update_topic(self, entity: Entity, properties: TopicProperties) -> None:
        await self._changes.update_topic(entity, properties)

    async def create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                  rules: list[RuleDescription]) -> Entity:
        return await self._changes.create_subscription(topic, name, properties, rules)

    async def update_subscription(self, entity: Entity, properties: SubscriptionProperties) -> None:
        await self._changes.update_subscription(entity, properties)

    async def delete_entity(self, entity: Entity) -> None:
        """Remove the entity, its messages and sub-queues; links on it are detached with amqp:not-found."""
        await self._changes.delete_entity(entity)

    # ---- following other nodes -----------------------------------------------------------------------

    async def follow_entities(self) -> None:
        """Take up the entity changes other nodes made in the shared store (``server/entity_follow.py``)."""
        async with self._changes.lock:  # not while this node creates or deletes one itself
            await self._follower.follow()

    async def sweep_idle(self) -> list[str]:
        """Delete every entity idle for its AutoDeleteOnIdle; return their names (``server/idle_sweep.py``)."""
        return await self._idle.sweep()

    async def record_activity(self) -> None:
        """Write this node's AutoDeleteOnIdle registrations (several nodes on one store)."""
        await self._idle.record_activity()

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
