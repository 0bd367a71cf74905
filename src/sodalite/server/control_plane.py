"""The broker as the control plane's RuntimePort, the one place the control plane meets the runtime:
entities and rules, counts, browsing, sending, purging, moving, keys, stores.

The control plane (``sodalite.admin``) decides who may do what and speaks to people; this module
does what it asks on the running broker, as a client would see it done: a browsed message is read
from the store (the truth), not from memory; a message sent from the console is encoded as the SDK
encodes one (:mod:`sodalite.message.outgoing`), received as a transfer is, and routed like one
(forwarding, the hop limit, a topic's fan-out); it is acknowledged once it is durable. The command
line's composition root only wires it (the broker, the start time, the keys, the backup service).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from sodalite.admin.control import (
    BackupRecord,
    EntityCounts,
    EntityProperties,
    EntityRecord,
    EntityTimes,
    KeyRecord,
    MessageRecord,
    MoveOutcome,
    RuleRecord,
    Selection,
    SendRequest,
    StoreRecord,
    SubQueueName,
    TopicFigures,
    split_subscription,
)
from sodalite.errors import ArgumentError, EntityNotFound
from sodalite.message.names import CONTENT_TYPE, CORRELATION_ID, REPLY_TO, SUBJECT, TO, text
from sodalite.message.outgoing import OutgoingMessage, encode_message
from sodalite.message.plain import shown_tail
from sodalite.model.authorization import Authorization, AuthorizationRule, KeyType, rights_in_order
from sodalite.model.entities import CorrelationFilter, QueueProperties, RuleDescription, TopicProperties
from sodalite.model.message import MessageRecord as StoredMessage
from sodalite.model.message import MessageState
from sodalite.model.routing import hop_limit_dead_letter
from sodalite.server import moves, wire
from sodalite.server.broker import Broker
from sodalite.server.core_actor import ALL_STATES, CoreActor
from sodalite.server.entity_settings import SubQueue
from sodalite.server.partitioned_actor import each
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity

if TYPE_CHECKING:
    from sodalite.server.metrics import Tallies


class ConnectionStrings(Protocol):
    """How a key is shown as a connection string (the command line knows the host clients use)."""

    def connection_string(self, key_name: str, key: str, entity: str | None) -> str: ...

_SUB_QUEUES: dict[SubQueueName, tuple[SubQueue, frozenset[MessageState] | None]] = {
    SubQueueName.ACTIVE: (SubQueue.MAIN, frozenset({MessageState.ACTIVE})),
    SubQueueName.DEFERRED: (SubQueue.MAIN, frozenset({MessageState.DEFERRED})),
    SubQueueName.SCHEDULED: (SubQueue.MAIN, frozenset({MessageState.SCHEDULED})),
    SubQueueName.DEAD_LETTER: (SubQueue.DEAD_LETTER, None),
    SubQueueName.TRANSFER_DEAD_LETTER: (SubQueue.TRANSFER_DEAD_LETTER, None),
}
_STATE_NAMES = {MessageState.ACTIVE: "Active", MessageState.DEFERRED: "Deferred", MessageState.SCHEDULED: "Scheduled"}


def shown_message(record: StoredMessage, sub: SubQueueName) -> MessageRecord:
    """A stored message decoded for the browser: its properties and application properties read, its
    body the data sections' bytes (or an AMQP value's JSON text)."""
    shown = shown_tail(record.tail)
    fields, user = shown.properties, shown.application_properties
    reason = user.get(wire.DEAD_LETTER_REASON)
    description = user.get(wire.DEAD_LETTER_DESCRIPTION)
    return MessageRecord(
        sequence_number=record.sequence_number, sub_queue=sub.value, state=_STATE_NAMES[record.state],
        message_id=record.message_id, enqueued_time=record.enqueued_time, delivery_count=record.delivery_count,
        size=record.size, session_id=record.session_id, partition_key=record.partition_key,
        content_type=text(fields[CONTENT_TYPE]), subject=text(fields[SUBJECT]),
        correlation_id=text(fields[CORRELATION_ID]), to=text(fields[TO]), reply_to=text(fields[REPLY_TO]),
        time_to_live_ms=record.time_to_live,
        expires_at=record.expires_at, scheduled_enqueue_time=record.scheduled_enqueue_time,
        dead_letter_reason=str(reason) if reason is not None else None,
        dead_letter_description=str(description) if description is not None else None,
        application_properties=user, body=shown.body)


class BrokerControl:
    """``started``: the creation time an entity from before the broker kept times reports (ms)."""

    def __init__(self, broker: Broker, started: int, keys: ConnectionStrings,
                 backup: Callable[[str], Awaitable[BackupRecord]] | None = None) -> None:
        self.broker = broker
        self.started = started
        self._keys = keys
        self._backup = backup  # cli/backup_service.py, bound to the data directory and configuration

    # ---- entities ----------------------------------------------------------------------------------

    def _entity(self, path: str) -> Entity:
        entity = self.broker.entity(path.strip("/"))
        if entity is None:
            raise EntityNotFound(f"the messaging entity '{path}' could not be found")
        return entity

    def _totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """Messages in and out per entity label since the start (the broker's Prometheus counters)."""
        def totals(counter: Tallies) -> dict[str, int]:
            return {sample.labels["entity"]: int(sample.value) for metric in counter.collect()
                    for sample in metric.samples if sample.name.endswith("_total")}

        metrics = self.broker.metrics
        return totals(metrics.messages_in), totals(metrics.messages_out)

    def _times(self, entity: Entity) -> EntityTimes:
        times = self.broker.times_of(entity)
        created, updated = times if times is not None else (self.started, self.started)
        # A queue or topic reads AccessedAt zero until it is used; a subscription never does (Service Bus
        # shows a fresh subscription's as a time: the Go SDK's live tests check both).
        accessed = entity.actor.last_activity if entity.kind == SUBSCRIPTION else entity.actor.accessed_at
        return EntityTimes(created, updated, accessed)

    def _record(self, entity: Entity, *, detail: bool,
                totals: tuple[dict[str, int], dict[str, int]] | None = None) -> EntityRecord:
        partitions = each(entity.actor)
        partition_count = len(partitions)
        counts = entity.actor.counts()
        deferred = sum(p.deferred_count() if isinstance(p, CoreActor) else p.partition.count(MessageState.DEFERRED)
                       for p in partitions)
        size = entity.actor.size_in_bytes()
        scheduled = counts["scheduled"]
        figures = None
        if entity.kind == TOPIC:
            subscriptions = list(entity.subscriptions.values())
            size += sum(sub.actor.size_in_bytes() for sub in subscriptions)
            # A message scheduled on the topic is copied into each subscription it matches.
            scheduled += max((sub.actor.counts()["scheduled"] for sub in subscriptions), default=0)
            rules = [rule.description for sub in subscriptions for rule in sub.rules]
            correlation = sum(isinstance(rule.filter, CorrelationFilter) for rule in rules)
            figures = TopicFigures(len(subscriptions), len(rules) - correlation, correlation)
        properties = entity.properties if detail else None
        sent, removed = totals if totals is not None else self._totals()
        return EntityRecord(
            path=entity.name, kind=entity.kind,
            counts=EntityCounts(active=counts["active"], dead_letter=counts["dead_letter"],
                                scheduled=scheduled, deferred=deferred, transfer=counts["transfer"],
                                transfer_dead_letter=counts["transfer_dead_letter"], size_in_bytes=size),
            availability="Available" if entity.actor.available else "Limited", times=self._times(entity),
            status=entity.properties.status,
            topic=entity.topic.name if entity.topic is not None else None,
            properties=properties,
            messages_in=sent.get(entity.name, 0), messages_out=removed.get(entity.name, 0), topic_figures=figures,
            partition_count=partition_count)

    def entity_records(self, kind: str | None = None, topic: str | None = None) -> list[EntityRecord]:
        if topic is not None:
            owner = self.broker.entity(topic.strip("/"))
            found = list(owner.subscriptions.values()) if owner is not None and owner.kind == TOPIC else []
        else:
            kinds = (kind,) if kind is not None else (QUEUE, TOPIC, SUBSCRIPTION)
            found = [e for e in self.broker.entities.values() if e.kind in kinds]
        totals = self._totals()
        return [self._record(e, detail=False, totals=totals) for e in sorted(found, key=lambda e: e.name.lower())]

    def entity_record(self, path: str) -> EntityRecord | None:
        entity = self.broker.entity(path.strip("/"))
        return None if entity is None else self._record(entity, detail=True)

    def rules(self, subscription_path: str) -> list[RuleRecord]:
        entity = self._entity(subscription_path)
        return [RuleRecord(rule.name, rule.description) for rule in entity.rules]

    async def create_entity(self, path: str, properties: EntityProperties, rule: RuleDescription | None) -> None:
        if isinstance(properties, QueueProperties):
            await self.broker.create_queue(path, properties)
        elif isinstance(properties, TopicProperties):
            await self.broker.create_topic(path, properties)
        else:
            topic, name = split_subscription(path)
            await self.broker.create_subscription(self._of_kind(topic, TOPIC), name, properties,
                                                  [rule] if rule is not None else [])

    def _of_kind(self, path: str, kind: str) -> Entity:
        entity = self.broker.entity(path.strip("/"))
        if entity is None or entity.kind != kind:
            raise EntityNotFound(f"the {kind} '{path}' does not exist")
        return entity

    async def update_entity(self, path: str, properties: EntityProperties) -> None:
        if isinstance(properties, QueueProperties):
            await self.broker.update_queue(self._of_kind(path, QUEUE), properties)
        elif isinstance(properties, TopicProperties):
            await self.broker.update_topic(self._of_kind(path, TOPIC), properties)
        else:
            await self.broker.update_subscription(self._of_kind(path, SUBSCRIPTION), properties)

    async def delete_entity(self, path: str) -> None:
        await self.broker.delete_entity(self._entity(path))

    async def create_rule(self, subscription_path: str, rule: RuleDescription) -> None:
        await self.broker.add_rule(self._of_kind(subscription_path, SUBSCRIPTION), rule)

    async def update_rule(self, subscription_path: str, rule: RuleDescription) -> None:
        await self.broker.replace_rule(self._of_kind(subscription_path, SUBSCRIPTION), rule)

    async def delete_rule(self, subscription_path: str, name: str) -> None:
        await self.broker.remove_rule(self._of_kind(subscription_path, SUBSCRIPTION), name)

    # ---- messages -------------------------------------------------------------------------------------

    async def peek(self, path: str, sub: SubQueueName, from_sequence_number: int, count: int) -> list[MessageRecord]:
        entity = self._entity(path)
        queue, states = _SUB_QUEUES[sub]
        found: list[MessageRecord] = []
        start = from_sequence_number
        page = max(count, 100)
        actor = entity.actor
        while len(found) < count:
            if isinstance(actor, CoreActor):  # the store is the truth: read it, not memory
                batch = await actor.peek(queue, start, page, states=states if states is not None else ALL_STATES)
            else:  # partition by partition, from the store
                batch = await actor.peek(queue, start, page)
            if not batch:
                break
            found += [shown_message(r, sub) for r in batch if states is None or r.state in states][: count - len(found)]
            start = batch[-1].sequence_number + 1
        return found

    async def send(self, path: str, message: SendRequest) -> None:
        entity = self._entity(path)
        scheduled = (None if message.scheduled_enqueue_time is None else
                     datetime.datetime.fromtimestamp(message.scheduled_enqueue_time / 1000, datetime.UTC))
        ttl = None if message.time_to_live_ms is None else datetime.timedelta(milliseconds=message.time_to_live_ms)
        payload = encode_message(OutgoingMessage(
            body=message.body, message_id=message.message_id, session_id=message.session_id,
            partition_key=message.partition_key, subject=message.subject, correlation_id=message.correlation_id,
            content_type=message.content_type, time_to_live=ttl, scheduled_enqueue_time=scheduled,
            application_properties=dict(message.application_properties)))
        drafts = [wire.parse_message(payload, entity.max_message_size)]
        route = self.broker.route(entity)
        limit = hop_limit_dead_letter(route.hops, route.exceeded)
        if limit is not None:
            future = route.entity.actor.send_to_transfer_dead_letter(drafts, *limit)
        elif route.entity.kind == TOPIC:
            future = self.broker.publish(route.entity, drafts)
        else:
            future = route.entity.actor.send(drafts)
        self.broker.metrics.count_in(future, entity.name, len(drafts))
        await future

    async def purge(self, path: str, sub: SubQueueName, progress: Callable[[int, int], None] | None = None) -> int:
        entity = self._entity(path)
        queue, states = _SUB_QUEUES[sub]
        return (await moves.purge(entity, queue, states, progress=progress)).moved

    async def move(self, path: str, sub: SubQueueName, selection: Selection, target: str,
                   dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> MoveOutcome:
        source = self._entity(path)
        destination = moves.resolve_target(lambda e: self.broker.route(e).entity, self._entity(target))
        queue, states = _SUB_QUEUES[sub]
        if selection.sequence_numbers is not None:
            numbers = list(selection.sequence_numbers)
        else:
            numbers = await moves.select_messages(source, queue, states, selection.sql_filter)
        if dry_run:
            return MoveOutcome(len(numbers), 0, 0)
        result = await moves.move(source, queue, numbers, destination, states=states, progress=progress)
        return MoveOutcome(len(numbers), result.moved, result.skipped)

    async def cancel_scheduled(self, path: str, sequence_numbers: Sequence[int]) -> None:
        entity = self._entity(path)
        await entity.actor.cancel_scheduled(list(sequence_numbers))

    # ---- keys, stores, tokens ---------------------------------------------------------------------------

    def _key_record(self, rule: AuthorizationRule, entity: str | None) -> KeyRecord:
        def connection_string(key: str | None) -> str | None:
            return None if key is None else self._keys.connection_string(rule.key_name, key, entity)

        return KeyRecord(rule.key_name, tuple(x.value for x in rights_in_order(rule.rights)), rule.primary_key,
                         rule.secondary_key, entity, connection_string(rule.primary_key),
                         connection_string(rule.secondary_key))

    def keys(self) -> list[KeyRecord]:
        found = [self._key_record(r, None) for r in self.broker.authorization_rules]
        for entity in sorted(self.broker.entities.values(), key=lambda e: e.name.lower()):
            for rule in self.broker.entity_rules(entity.name) or ():
                found.append(self._key_record(rule, entity.name))
        return found

    async def regenerate_key(self, entity: str | None, key_name: str, key_type: str, key: str | None) -> KeyRecord:
        if key_type not in ("PrimaryKey", "SecondaryKey"):
            raise ArgumentError(f"keyType must be PrimaryKey or SecondaryKey, got {key_type!r}")
        kind: KeyType = "PrimaryKey" if key_type == "PrimaryKey" else "SecondaryKey"
        rule = await self.broker.regenerate_key(entity, key_name, kind, key)
        return self._key_record(rule, entity)

    def stores(self) -> list[StoreRecord]:
        return [StoreRecord(str(s["name"]), bool(s["online"])) for s in self.broker.store_status()]

    def set_store_online(self, name: str, online: bool) -> None:
        self.broker.set_store_online(name, online)

    async def backup(self, destination: str) -> BackupRecord:
        if self._backup is None:
            raise ArgumentError("this broker was started without a data directory to back up")
        return await self._backup(destination)

    def authorize(self, token: str, path: str) -> Authorization:
        return self.broker.authorize(token, path)
