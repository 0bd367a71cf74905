"""The control plane: one service with typed records, which every face (JSON API, console) translates.

The records are frozen and JSON-able through :func:`to_json`. The service's operations are the
ones the portal's explorer and Service Bus Explorer users rely on: the namespace with each
entity's live counts; entities and rules; peek by sequence number in any sub-queue; one message;
send; purge; move and resubmit; cancel scheduled; keys; stores. Every face is a translation of
these: the ATOM API (``admin.service``, records to XML), the JSON API (``admin.api``), the console
(which calls the JSON API) and the CLI (which calls the JSON API too).

The broker runtime reaches this layer through :class:`RuntimePort`, which the server implements
once over the broker (``server/control_plane.py``, wired by the CLI's composition root; the admin
layer imports only the model, the store port and the errors). Every change writes one audit line
to the ``sodalite.audit`` logger: who (the key name the caller presented), what, on which entity,
and the outcome's count.

Rights (clarifications, issue 17), enforced here so every face enforces the same: peek, purge
and show need Listen on the entity; send needs Send; a move needs Listen on its source and Send
on its target; entities, rules, keys, stores and the namespace listing need Manage.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Protocol

from sodalite.admin.counts import EntityCounts as EntityCounts
from sodalite.errors import ArgumentError, EntityNotFound, Forbidden, SodaliteError
from sodalite.model.authorization import AccessRights, Authorization
from sodalite.model.entities import (
    DEFAULT_RULE_NAME,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
)

audit_log = logging.getLogger("sodalite.audit")

MAX_PEEK = 100  # messages per page, as the portal's explorer


class SubQueueName(enum.StrEnum):
    """Where messages are browsed: an entity's active, deferred or scheduled messages, or a DLQ."""

    ACTIVE = "active"
    DEFERRED = "deferred"
    SCHEDULED = "scheduled"
    DEAD_LETTER = "deadletter"
    TRANSFER_DEAD_LETTER = "transferdeadletter"

    @classmethod
    def parse(cls, text: str) -> SubQueueName:
        try:
            return cls(text.lower())
        except ValueError:
            raise ArgumentError(f"unknown sub-queue '{text}': use one of "
                                f"{', '.join(s.value for s in cls)}") from None


# ---- records ----------------------------------------------------------------------------------------


EntityProperties = QueueProperties | TopicProperties | SubscriptionProperties
KINDS: dict[str, type[EntityProperties]] = {
    "queue": QueueProperties, "topic": TopicProperties, "subscription": SubscriptionProperties}


def kind_of(properties: EntityProperties) -> str:
    return next(kind for kind, cls in KINDS.items() if isinstance(properties, cls))


@dataclass(frozen=True, slots=True)
class EntityTimes:
    """Milliseconds since the epoch: created and last updated (as the broker keeps them), last used
    (None: not used since the broker opened it; AccessedAt then reads 0001-01-01, as Service Bus's)."""

    created_at: int
    updated_at: int
    accessed_at: int | None


@dataclass(frozen=True, slots=True)
class TopicFigures:
    """What a topic's figures add: its subscriptions and their filters (True/False filters count as SQL)."""

    subscription_count: int
    sql_filter_count: int
    correlation_filter_count: int


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """A queue, topic or subscription with its runtime counts.

    A topic's counts are its subscriptions' view of it: its size is every subscription's stored
    bytes (its quota covers them), and its scheduled count the largest subscription's plus what the
    topic holds itself."""

    path: str  # 'orders', 'events', 'events/subscriptions/audit'
    kind: str  # queue | topic | subscription
    counts: EntityCounts
    availability: str  # Available | Limited
    times: EntityTimes
    status: str = "Active"  # Active | Disabled | SendDisabled | ReceiveDisabled (its Status property)
    topic: str | None = None  # a subscription's topic
    properties: EntityProperties | None = None  # detail views only (lists leave it out: cheap counts)
    messages_in: int = 0  # since the broker started: acknowledged sends (faces turn two readings into a rate)
    messages_out: int = 0  # since the broker started: completed, or received in ReceiveAndDelete
    topic_figures: TopicFigures | None = None  # topics only
    partition_count: int = 1  # a partitioned queue's or topic's partitions (its MaxSizeInMegabytes is per partition)

    @property
    def name(self) -> str:
        """Its own name: a subscription's without its topic."""
        return self.path.rpartition("/subscriptions/")[2] if self.kind == "subscription" else self.path


@dataclass(frozen=True, slots=True)
class RuleRecord:
    name: str
    rule: RuleDescription  # as JSON, Config.json's shape: {"Name", "Properties": {"FilterType", ...}}


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_name: str
    rights: tuple[str, ...]
    primary_key: str | None
    secondary_key: str | None
    entity: str | None = None  # None: a namespace rule
    primary_connection_string: str | None = None  # for the broker's AMQP listener, with this key
    secondary_connection_string: str | None = None


@dataclass(frozen=True, slots=True)
class StoreRecord:
    name: str
    online: bool


@dataclass(frozen=True, slots=True)
class BackupRecord:
    """A backup made (``sodalite backup``): where, as of when (ms since the epoch), which stores, its size."""

    destination: str
    taken_at: int
    stores: tuple[str, ...]
    files: tuple[str, ...]
    size_in_bytes: int


@dataclass(frozen=True, slots=True)
class NamespaceRecord:
    name: str
    entities: tuple[EntityRecord, ...]
    stores: tuple[StoreRecord, ...]


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A message as the browser shows it: system properties, application properties, body bytes."""

    sequence_number: int
    sub_queue: str
    state: str  # Active | Deferred | Scheduled
    message_id: str | None
    enqueued_time: int  # ms since the epoch
    delivery_count: int
    size: int
    session_id: str | None = None
    partition_key: str | None = None
    content_type: str | None = None
    subject: str | None = None
    correlation_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    time_to_live_ms: int | None = None
    expires_at: int | None = None
    scheduled_enqueue_time: int | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    application_properties: Mapping[str, object] = field(default_factory=dict)  # JSON-able values
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class SendRequest:
    body: bytes
    content_type: str | None = None
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    subject: str | None = None
    correlation_id: str | None = None
    time_to_live_ms: int | None = None
    scheduled_enqueue_time: int | None = None  # ms since the epoch
    application_properties: Mapping[str, object] = field(default_factory=dict)  # JSON-able values


@dataclass(frozen=True, slots=True)
class Selection:
    """Which messages a move or resubmit takes: named ones, those a SQL filter selects, or all."""

    sequence_numbers: tuple[int, ...] | None = None
    sql_filter: str | None = None

    @property
    def everything(self) -> bool:
        return self.sequence_numbers is None and not self.sql_filter


@dataclass(frozen=True, slots=True)
class MoveOutcome:
    selected: int
    moved: int
    skipped: int  # locked, or gone meanwhile


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """A move or purge running in the background, for its progress: ``state`` is running, succeeded or
    failed; a purge's outcome counts the messages deleted as moved."""

    id: str
    kind: str
    source: str
    target: str
    state: str
    done: int
    total: int
    outcome: MoveOutcome | None = None
    error: str | None = None


# ---- the runtime port ---------------------------------------------------------------------------------


class RuntimePort(Protocol):
    """What the control plane needs of the broker runtime: one narrow port, implemented once (cli/).

    Lookups are case-insensitive; changes raise ``EntityNotFound`` for a missing parent or target and
    ``EntityAlreadyExists`` for a name in use."""

    def entity_records(self, kind: str | None = None, topic: str | None = None) -> list[EntityRecord]:
        """Every queue, topic and subscription (of ``kind``; a topic's subscriptions), by path, without
        their properties (their counts are cheap: what the runtime keeps as it goes)."""

    def entity_record(self, path: str) -> EntityRecord | None:
        """Any queue, topic or subscription by path (case-insensitive), with its properties."""

    def rules(self, subscription_path: str) -> list[RuleRecord]:
        """In the order the subscription evaluates them."""

    async def create_entity(self, path: str, properties: EntityProperties, rule: RuleDescription | None) -> None:
        """A queue, topic or subscription (by the properties' type); a subscription starts with ``rule``."""

    async def update_entity(self, path: str, properties: EntityProperties) -> None:
        """A subscription keeps its rules."""

    async def delete_entity(self, path: str) -> None:
        """A topic takes its subscriptions with it."""

    async def create_rule(self, subscription_path: str, rule: RuleDescription) -> None: ...

    async def update_rule(self, subscription_path: str, rule: RuleDescription) -> None:
        """Raises EntityNotFound when the subscription has no rule of that name."""

    async def delete_rule(self, subscription_path: str, name: str) -> None: ...

    async def peek(self, path: str, sub: SubQueueName, from_sequence_number: int, count: int) -> list[MessageRecord]:
        """Raises EntityNotFound for an unknown entity. A queue is read from its store."""

    async def send(self, path: str, message: SendRequest) -> None: ...

    async def purge(self, path: str, sub: SubQueueName, progress: Callable[[int, int], None] | None = None) -> int:
        """``progress`` hears (looked at so far, total) after each chunk."""

    async def move(self, path: str, sub: SubQueueName, selection: Selection, target: str,
                   dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> MoveOutcome:
        """Raises FilterSyntaxError for a filter that does not parse, before anything moves; with
        ``dry_run`` nothing moves and the outcome says how many messages were selected. ``progress``
        hears (done, total) after each chunk."""

    async def cancel_scheduled(self, path: str, sequence_numbers: Sequence[int]) -> None: ...

    def keys(self) -> list[KeyRecord]: ...

    async def regenerate_key(self, entity: str | None, key_name: str, key_type: str, key: str | None) -> KeyRecord:
        """Store a new key (``key``, or 32 random bytes): tokens signed with the old one fail from then on."""

    def stores(self) -> list[StoreRecord]: ...

    def set_store_online(self, name: str, online: bool) -> None: ...

    async def backup(self, destination: str) -> BackupRecord:
        """Copy every messaging store and the configuration into the new directory ``destination``
        (an absolute path on the broker's machine), as of one point in time, while serving."""

    def authorize(self, token: str, path: str) -> Authorization:
        """What a SAS token grants for ``path`` (raises Unauthorized for a bad or expired token)."""


# ---- the service ---------------------------------------------------------------------------------------


class GeoPort(Protocol):
    """A geo-replicated node's view of the two sites (``--geo-site``), and promotion."""

    def status(self) -> dict[str, Any]: ...

    async def promote(self, site: str, mode: str) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: their token and key name (for the audit line). ``granted`` is what a face's own
    authorization already made of the token for the request's path (the ATOM API's middleware); the
    key's rights and entity are checked against it all the same."""

    token: str
    key_name: str
    granted: Authorization | None = None


def _require(granted: Authorization, path: str, right: AccessRights) -> None:
    if not granted.covers(path.strip("/")):
        raise Forbidden(f"the token does not cover '/{path.strip('/')}'")
    if not granted.allows(right):
        raise Forbidden(f"Unauthorized access. '{right.value}' claim(s) are required to perform this operation.")


MAX_OPERATIONS = 100  # finished background operations remembered for their callers


class ControlPlane:
    def __init__(self, runtime: RuntimePort, namespace: str, *, sku: str = "Standard",
                 max_message_size_in_kilobytes: int = 256) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.sku = sku  # Basic, Standard or Premium (only Premium lets an entity choose its message size)
        self.max_message_size_in_kilobytes = max_message_size_in_kilobytes  # the namespace's limit
        self._operations: dict[str, OperationRecord] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.geo: GeoPort | None = None  # set when the node runs with --geo-site

    # ---- authorization -------------------------------------------------------------------------

    def _check(self, caller: Caller, path: str, right: AccessRights) -> None:
        if caller.granted is not None:
            # The face matched the token's audience to its own request's path (an SDK signs a token
            # for each entity it manages); the key's rights and its entity still apply here.
            _require(replace(caller.granted, audience_path=""), path, right)
        else:
            _require(self.runtime.authorize(caller.token, path.strip("/")), path, right)

    def _audit(self, caller: Caller, action: str, target: str, **details: str | int) -> None:
        audit_log.info("audit %s %s by %s %s", action, target, caller.key_name,
                       " ".join(f"{k}={v}" for k, v in details.items()),
                       extra={"audit": True, "action": action, "target": target, "who": caller.key_name, **details})

    def _entity(self, path: str) -> EntityRecord:
        found = self.runtime.entity_record(path)
        if found is None:
            raise EntityNotFound(f"the messaging entity '{path}' could not be found")
        return found

    # ---- reading ---------------------------------------------------------------------------------

    def namespace_record(self, caller: Caller) -> NamespaceRecord:
        self._check(caller, "", AccessRights.MANAGE)
        return NamespaceRecord(self.namespace, tuple(self.runtime.entity_records()), tuple(self.runtime.stores()))

    def entity(self, caller: Caller, path: str) -> EntityRecord:
        self._check(caller, path, AccessRights.MANAGE)
        return self._entity(path)

    def entities(self, caller: Caller, kind: str, topic: str | None = None) -> list[EntityRecord]:
        """The queues, topics or a topic's subscriptions (none for an unknown topic), by path."""
        self._check(caller, topic or "", AccessRights.MANAGE)
        return self.runtime.entity_records(kind, topic)

    def find(self, caller: Caller, path: str, kind: str) -> EntityRecord | None:
        """The ``kind`` of entity at ``path`` with its properties, or None."""
        self._check(caller, path, AccessRights.MANAGE)
        found = self.runtime.entity_record(path)
        return found if found is not None and found.kind == kind else None

    def find_rule(self, caller: Caller, path: str, name: str) -> RuleRecord | None:
        """A subscription's rule by name (case-insensitive), or None."""
        self._check(caller, path, AccessRights.MANAGE)
        found = self.runtime.entity_record(path)
        if found is None or found.kind != "subscription":
            return None
        return next((r for r in self.runtime.rules(found.path) if r.name.lower() == name.lower()), None)

    def rules(self, caller: Caller, path: str) -> list[RuleRecord]:
        self._check(caller, path, AccessRights.MANAGE)
        entity = self._entity(path)
        if entity.kind != "subscription":
            raise ArgumentError(f"'{path}' is a {entity.kind}: only subscriptions have rules")
        return self.runtime.rules(entity.path)

    async def peek(self, caller: Caller, path: str, sub: SubQueueName, from_sequence_number: int = 0,
                   count: int = 50) -> list[MessageRecord]:
        self._check(caller, path, AccessRights.LISTEN)
        if not 1 <= count <= MAX_PEEK:
            raise ArgumentError(f"count must be between 1 and {MAX_PEEK}, got {count}")
        if from_sequence_number < 0:
            raise ArgumentError("fromSequenceNumber must not be negative")
        self._entity(path)
        return await self.runtime.peek(path, sub, from_sequence_number, count)

    async def message(self, caller: Caller, path: str, sub: SubQueueName, sequence_number: int) -> MessageRecord:
        self._check(caller, path, AccessRights.LISTEN)
        self._entity(path)
        found = await self.runtime.peek(path, sub, sequence_number, 1)
        if not found or found[0].sequence_number != sequence_number:
            raise EntityNotFound(f"no message with sequence number {sequence_number} in '{path}' ({sub.value})")
        return found[0]

    def keys(self, caller: Caller) -> list[KeyRecord]:
        self._check(caller, "", AccessRights.MANAGE)
        return self.runtime.keys()

    def stores(self, caller: Caller) -> list[StoreRecord]:
        self._check(caller, "", AccessRights.MANAGE)
        return self.runtime.stores()

    # ---- messages ------------------------------------------------------------------------------------

    async def send(self, caller: Caller, path: str, message: SendRequest) -> None:
        self._check(caller, path, AccessRights.SEND)
        entity = self._entity(path)
        if entity.kind == "subscription":
            raise ArgumentError(f"'{path}' is a subscription: send to its topic")
        await self.runtime.send(entity.path, message)
        self._audit(caller, "send", entity.path, count=1)

    async def purge(self, caller: Caller, path: str, sub: SubQueueName) -> int:
        self._check(caller, path, AccessRights.LISTEN)
        entity = self._entity(path)
        count = await self.runtime.purge(entity.path, sub)
        self._audit(caller, "purge", entity.path, sub_queue=sub.value, count=count)
        return count

    async def move(self, caller: Caller, path: str, sub: SubQueueName, selection: Selection,
                   target: str | None = None, *, dry_run: bool = False) -> MoveOutcome:
        """Resubmit (``target`` None: back to the message's own entity) or move to another entity;
        ``dry_run`` counts what would move (for the console's confirmation) and changes nothing."""
        self._check(caller, path, AccessRights.LISTEN)
        source = self._entity(path)
        destination = self._entity(target) if target else source
        self._check(caller, destination.path, AccessRights.SEND)
        if selection.sequence_numbers is not None and not selection.sequence_numbers:
            raise ArgumentError("no sequence numbers were selected")
        outcome = await self.runtime.move(source.path, sub, selection, destination.path, dry_run)
        if dry_run:
            return outcome
        self._audit(caller, "move", source.path, sub_queue=sub.value, to=destination.path,
                    selected=outcome.selected, moved=outcome.moved, skipped=outcome.skipped)
        return outcome

    async def start_move(self, caller: Caller, path: str, sub: SubQueueName, selection: Selection,
                         target: str | None = None) -> OperationRecord:
        """A move in the background: checked (rights, entities, filter) and counted now, so a refused
        request changes nothing; its progress is read with :meth:`operation`."""
        preview = await self.move(caller, path, sub, selection, target, dry_run=True)
        source = self._entity(path)
        destination = self._entity(target) if target else source
        record = OperationRecord(uuid.uuid4().hex, "move", source.path, destination.path, "running", 0,
                                 preview.selected)
        self._remember(record)

        def progress(done: int, total: int) -> None:
            self._operations[record.id] = replace(self._operations[record.id], done=done, total=total)

        async def run() -> None:
            try:
                outcome = await self.runtime.move(source.path, sub, selection, destination.path, False, progress)
            except SodaliteError as exc:
                self._operations[record.id] = replace(self._operations[record.id], state="failed",
                                                      error=exc.description)
                self._audit(caller, "move-failed", source.path, to=destination.path, error=exc.condition)
                return
            self._operations[record.id] = replace(self._operations[record.id], state="succeeded",
                                                  done=outcome.selected, total=outcome.selected, outcome=outcome)
            self._audit(caller, "move", source.path, sub_queue=sub.value, to=destination.path,
                        selected=outcome.selected, moved=outcome.moved, skipped=outcome.skipped)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record

    async def start_purge(self, caller: Caller, path: str, sub: SubQueueName) -> OperationRecord:
        """A purge in the background (checked now, so a refused request changes nothing); its progress
        is read with :meth:`operation`, its outcome's ``moved`` is the number deleted."""
        self._check(caller, path, AccessRights.LISTEN)
        entity = self._entity(path)
        record = OperationRecord(uuid.uuid4().hex, "purge", entity.path, entity.path, "running", 0, 0)
        self._remember(record)

        def progress(done: int, total: int) -> None:
            self._operations[record.id] = replace(self._operations[record.id], done=done, total=total)

        async def run() -> None:
            try:
                count = await self.runtime.purge(entity.path, sub, progress)
            except SodaliteError as exc:
                self._operations[record.id] = replace(self._operations[record.id], state="failed",
                                                      error=exc.description)
                self._audit(caller, "purge-failed", entity.path, error=exc.condition)
                return
            total = self._operations[record.id].total
            self._operations[record.id] = replace(self._operations[record.id], state="succeeded", done=total,
                                                  outcome=MoveOutcome(total, count, total - count))
            self._audit(caller, "purge", entity.path, sub_queue=sub.value, count=count)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record

    def _remember(self, record: OperationRecord) -> None:
        self._operations[record.id] = record
        finished = [k for k, v in self._operations.items() if v.state != "running"]
        for key in finished[: max(0, len(self._operations) - MAX_OPERATIONS)]:
            del self._operations[key]

    def operation(self, caller: Caller, operation_id: str) -> OperationRecord:
        record = self._operations.get(operation_id)
        if record is None:
            raise EntityNotFound(f"there is no operation '{operation_id}'")
        self._check(caller, record.source, AccessRights.LISTEN)
        return record

    async def cancel_scheduled(self, caller: Caller, path: str, sequence_numbers: Sequence[int]) -> None:
        self._check(caller, path, AccessRights.SEND)  # as the SDK's cancel_scheduled_messages needs
        entity = self._entity(path)
        await self.runtime.cancel_scheduled(entity.path, sequence_numbers)
        self._audit(caller, "cancel-scheduled", entity.path, count=len(sequence_numbers))

    # ---- entities and rules -------------------------------------------------------------------------

    def _of_kind(self, path: str, kind: str) -> EntityRecord:
        found = self.runtime.entity_record(path)
        if found is None or found.kind != kind:
            raise EntityNotFound(f"the {kind} '{path}' does not exist")
        return found

    async def create_entity(self, caller: Caller, path: str, properties: EntityProperties,
                            rule: RuleDescription | None = None) -> EntityRecord:
        """A queue, topic or subscription (``<topic>/subscriptions/<name>``, first rule ``rule`` or
        ``$Default``), by the properties' type."""
        self._check(caller, path, AccessRights.MANAGE)
        kind = kind_of(properties)
        if kind == "subscription":
            topic, _ = split_subscription(path)
            self._of_kind(topic, "topic")
            rule = rule or RuleDescription(DEFAULT_RULE_NAME)
        elif rule is not None:
            raise ArgumentError(f"a {kind} has no rules: only subscriptions do")
        await self.runtime.create_entity(path, properties, rule)
        self._audit(caller, f"create-{kind}", path)
        return self._entity(path)

    async def update_entity(self, caller: Caller, path: str, properties: EntityProperties) -> EntityRecord:
        """Raises EntityNotFound unless ``path`` is an entity of the properties' kind."""
        self._check(caller, path, AccessRights.MANAGE)
        kind = kind_of(properties)
        if kind == "subscription":
            self._of_kind(split_subscription(path)[0], "topic")
        entity = self._of_kind(path, kind)
        await self.runtime.update_entity(entity.path, properties)
        self._audit(caller, f"update-{kind}", entity.path)
        return self._entity(entity.path)

    async def delete_entity(self, caller: Caller, path: str, kind: str | None = None, *,
                            missing_ok: bool = False) -> bool:
        """Delete the entity at ``path`` (only if it is a ``kind``, when given); True if it existed.
        Raises EntityNotFound for none unless ``missing_ok``."""
        self._check(caller, path, AccessRights.MANAGE)
        entity = self.runtime.entity_record(path)
        if entity is None or (kind is not None and entity.kind != kind):
            if missing_ok:
                return False
            raise EntityNotFound(f"the messaging entity '{path}' could not be found")
        await self.runtime.delete_entity(entity.path)
        self._audit(caller, f"delete-{entity.kind}", entity.path)
        return True

    async def put_rule(self, caller: Caller, path: str, rule: RuleDescription, *, create: bool) -> RuleRecord:
        self._check(caller, path, AccessRights.MANAGE)
        self._of_kind(split_subscription(path)[0], "topic")
        entity = self._of_kind(path, "subscription")
        if create:
            await self.runtime.create_rule(entity.path, rule)
        else:
            await self.runtime.update_rule(entity.path, rule)
        self._audit(caller, "create-rule" if create else "update-rule", f"{entity.path}/rules/{rule.name}")
        found = self.find_rule(caller, entity.path, rule.name)
        if found is None:  # deleted between the change and the read-back
            raise EntityNotFound(f"the rule '{rule.name}' could not be found")
        return found

    async def delete_rule(self, caller: Caller, path: str, rule_name: str, *, missing_ok: bool = False) -> bool:
        """True if it existed; raises EntityNotFound for none unless ``missing_ok``."""
        self._check(caller, path, AccessRights.MANAGE)
        if self.find_rule(caller, path, rule_name) is None:
            if missing_ok:
                return False
            raise EntityNotFound(f"the rule '{rule_name}' does not exist on '{path}'")
        entity = self._entity(path)
        await self.runtime.delete_rule(entity.path, rule_name)
        self._audit(caller, "delete-rule", f"{entity.path}/rules/{rule_name}")
        return True

    # ---- keys and stores -----------------------------------------------------------------------------

    async def regenerate_key(self, caller: Caller, entity: str | None, key_name: str, key_type: str,
                             key: str | None = None) -> KeyRecord:
        self._check(caller, entity or "", AccessRights.MANAGE)
        if key_type not in ("PrimaryKey", "SecondaryKey"):
            raise ArgumentError(f"keyType must be PrimaryKey or SecondaryKey, got {key_type!r}")
        record = await self.runtime.regenerate_key(entity, key_name, key_type, key)
        self._audit(caller, "regenerate-key", f"{entity or '$namespace'}/{key_name}", key_type=key_type)
        return record

    def set_store_online(self, caller: Caller, name: str, online: bool) -> list[StoreRecord]:
        self._check(caller, "", AccessRights.MANAGE)
        self.runtime.set_store_online(name, online)
        self._audit(caller, "store-online" if online else "store-offline", name)
        return self.runtime.stores()

    def geo_status(self, caller: Caller) -> dict[str, Any]:
        self._check(caller, "", AccessRights.MANAGE)
        return self._geo().status()

    async def geo_promote(self, caller: Caller, site: object, mode: object) -> dict[str, Any]:
        self._check(caller, "", AccessRights.MANAGE)
        if not isinstance(site, str) or not site:
            raise ArgumentError("site: the name of the site to promote")
        if mode not in ("planned", "forced"):
            raise ArgumentError(f"mode: 'planned' or 'forced', got {mode!r}")
        geo = self._geo()
        self._audit(caller, "geo-promote", site, mode=mode)
        return await geo.promote(site, mode)

    def _geo(self) -> GeoPort:
        if self.geo is None:
            raise EntityNotFound("geo-replication is not configured on this node (start it with --geo-site)")
        return self.geo

    async def backup(self, caller: Caller, destination: object) -> BackupRecord:
        self._check(caller, "", AccessRights.MANAGE)
        if not isinstance(destination, str) or not destination.strip():
            raise ArgumentError("destination: the directory to write the backup into (an absolute path on the "
                                "broker's machine)")
        record = await self.runtime.backup(destination)
        self._audit(caller, "backup", record.destination, count=len(record.stores))
        return record


def split_subscription(path: str) -> tuple[str, str]:
    topic, marker, name = path.rpartition("/subscriptions/")
    if not marker or not topic or not name or "/" in name:
        raise ArgumentError(f"'{path}' is not a subscription path (<topic>/subscriptions/<name>)")
    return topic, name


_PLAIN = (str, int, float, bool, type(None))
_FIELD_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}  # record class -> (attribute, JSON name) pairs


def to_json(value: object) -> object:
    """A record (or a list of them) as JSON values: bodies as base64, enums as their values."""
    if isinstance(value, _PLAIN) and not isinstance(value, enum.Enum):
        return value
    to_config_json = getattr(value, "to_json", None)  # entity properties and rules: Config.json's shape
    if callable(to_config_json):
        return to_config_json()
    names = _FIELD_NAMES.get(type(value))
    if names is None and is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES[type(value)] = tuple((f.name, _camel(f.name)) for f in fields(value))
    if names is not None:
        return {camel: to_json(getattr(value, name)) for name, camel in names}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict | Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
