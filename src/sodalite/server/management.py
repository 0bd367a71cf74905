"""The ``$management`` node of an entity: request/response operations (sdk-wire-contract.md section 6).

Each operation reads its arguments from the request's map body and returns a status and a map
body. Operations that change messages answer only after their store commit. Errors are Sodalite
errors, reported as ``statusCode`` (the error's HTTP status) with the AMQP condition in
``errorCondition``, which the SDK maps to its exception classes. Operations not built yet answer
501 with ``amqp:not-implemented``: never a fake success.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, Required, TypedDict, TypeVar, cast

from sodalite.amqp.types import AmqpMap, AmqpValue, Array, Described, Long, Timestamp
from sodalite.errors import ArgumentError, NotImplementedOperation
from sodalite.model.authorization import AccessRights
from sodalite.model.copies import with_claim_counted
from sodalite.model.entities import RuleDescription
from sodalite.model.routing import without_pings
from sodalite.model.settlement import from_disposition_status
from sodalite.model.store_ops import MoveItem
from sodalite.server import outcomes, pages, wire
from sodalite.server.amqp_errors import report
from sodalite.server.core_actor import CoreActor
from sodalite.server.endpoint import ConnectionPort
from sodalite.server.entity_settings import SubQueue
from sodalite.server.metrics import BrokerMetrics
from sodalite.server.partitioned_actor import EntityActor, each
from sodalite.server.registry import SUBSCRIPTION, Entity
from sodalite.server.rule_wire import rule_description, rule_from_request, rule_to_wire

T = TypeVar("T")

OK = 200
NO_CONTENT = 204
PEEK_LOCK = 1  # receiver-settle-mode in receive-by-sequence-number (the SDK sends a uint)


# ---- request bodies: the keys each operation reads (sdk-wire-contract.md 6.2-6.11). The values are
# as decoded, unchecked (AmqpValue); each operation checks the ones it uses and answers 400 if wrong.

RenewLockRequest = TypedDict("RenewLockRequest", {"lock-tokens": AmqpValue}, total=False)  # array<uuid>
PeekRequest = TypedDict("PeekRequest", {
    "from-sequence-number": AmqpValue,  # long
    "message-count": AmqpValue,  # int
    "session-id": AmqpValue,  # str, from a session receiver
}, total=False)
# Each entry of "messages" is a map: "message" (bin, the encoded message) and, unread here,
# "message-id", "session-id", "partition-key".
class ScheduleRequest(TypedDict, total=False):
    messages: AmqpValue
CancelScheduledRequest = TypedDict("CancelScheduledRequest", {"sequence-numbers": AmqpValue}, total=False)
ReceiveBySequenceNumberRequest = TypedDict("ReceiveBySequenceNumberRequest", {
    "sequence-numbers": AmqpValue,  # array<long>
    "receiver-settle-mode": AmqpValue,  # uint: 1 PeekLock, 0 ReceiveAndDelete
    "session-id": AmqpValue,
}, total=False)
UpdateDispositionRequest = TypedDict("UpdateDispositionRequest", {
    "lock-tokens": AmqpValue,  # array<uuid>
    "disposition-status": AmqpValue,  # "completed" | "abandoned" | "defered" | "suspended"
    "deadletter-reason": AmqpValue,
    "deadletter-description": AmqpValue,
    "properties-to-modify": AmqpValue,  # map; never sent by the Python SDK
    "session-id": AmqpValue,
}, total=False)
SessionRequest = TypedDict("SessionRequest", {"session-id": AmqpValue}, total=False)  # renew lock, get state
SetSessionStateRequest = TypedDict("SetSessionStateRequest", {
    "session-id": AmqpValue,
    "session-state": AmqpValue,  # bin, or null to clear
}, total=False)
GetMessageSessionsRequest = TypedDict("GetMessageSessionsRequest", {
    "last-updated-time": AmqpValue,  # ts; LIST_ALL_SESSIONS for the default listing
    "skip": AmqpValue,
    "top": AmqpValue,
}, total=False)
AddRuleRequest = TypedDict("AddRuleRequest", {
    "rule-name": AmqpValue,
    "rule-description": AmqpValue,  # a map, read as a rule_wire.RuleDescriptionMap
}, total=False)
RemoveRuleRequest = TypedDict("RemoveRuleRequest", {"rule-name": AmqpValue}, total=False)


class EnumerateRulesRequest(TypedDict, total=False):
    skip: AmqpValue
    top: AmqpValue


class PartitionRequest(TypedDict, total=False):
    partition: AmqpValue


CompleteThroughRequest = TypedDict("CompleteThroughRequest", {
    "partition": AmqpValue,
    "sequence-number": AmqpValue,
}, total=False)
CompleteNumbersRequest = TypedDict("CompleteNumbersRequest", {
    "partition": AmqpValue,
    "sequence-numbers": AmqpValue,
}, total=False)
PeekPartitionRequest = TypedDict("PeekPartitionRequest", {
    "partition": AmqpValue,
    "from-sequence-number": AmqpValue,
    "message-count": AmqpValue,
}, total=False)
PeekColumnsRequest = TypedDict("PeekColumnsRequest", {
    "partition": AmqpValue,
    "from-sequence-number": AmqpValue,
    "to-sequence-number": AmqpValue,  # long, exclusive; optional
    "message-count": AmqpValue,  # rows at most (capped at pages.MAX_ROWS)
    "max-bytes": AmqpValue,  # stored bytes at most (capped at pages.MAX_BYTES)
    "columns": AmqpValue,  # list of column names (docs/spark.md, "Schema")
}, total=False)
# Every key any operation reads: what execute() hands on. Each operation's own request type above
# names a subset of these keys, so it accepts this.
ManagementRequest = TypedDict("ManagementRequest", {
    "lock-tokens": AmqpValue, "from-sequence-number": AmqpValue, "message-count": AmqpValue,
    "session-id": AmqpValue, "messages": AmqpValue, "sequence-numbers": AmqpValue,
    "receiver-settle-mode": AmqpValue, "disposition-status": AmqpValue, "deadletter-reason": AmqpValue,
    "deadletter-description": AmqpValue, "properties-to-modify": AmqpValue, "session-state": AmqpValue,
    "last-updated-time": AmqpValue, "skip": AmqpValue, "top": AmqpValue, "rule-name": AmqpValue,
    "rule-description": AmqpValue, "partition": AmqpValue, "sequence-number": AmqpValue,
    "to-sequence-number": AmqpValue, "max-bytes": AmqpValue, "columns": AmqpValue,
}, total=False)


# ---- response bodies


class Empty(TypedDict):
    """The body of an operation that answers only its status."""


# One message in peek-message, receive-by-sequence-number and peek-partition answers: the encoded
# message, and its lock token when received in PeekLock.
DeliveredMessage = TypedDict("DeliveredMessage", {"message": Required[bytes], "lock-token": uuid.UUID}, total=False)


class MessagesResponse(TypedDict):
    messages: list[DeliveredMessage]


class RenewLockResponse(TypedDict):
    expirations: Array  # array<ts>


ScheduleResponse = TypedDict("ScheduleResponse", {"sequence-numbers": Array})  # array<long>


class RenewSessionLockResponse(TypedDict):
    expiration: Timestamp


GetSessionStateResponse = TypedDict("GetSessionStateResponse", {"session-state": bytes | None})
GetMessageSessionsResponse = TypedDict("GetMessageSessionsResponse", {"skip": int, "sessions-ids": Array})
RuleEntry = TypedDict("RuleEntry", {"rule-description": Described})


class EnumerateRulesResponse(TypedDict):
    rules: list[RuleEntry]


class CountResponse(TypedDict):
    count: Long


PartitionBounds = TypedDict("PartitionBounds", {
    "partition": int, "first-sequence-number": Long | None, "next-sequence-number": Long,
})


class PartitionBoundsResponse(TypedDict):
    partitions: list[PartitionBounds]


# A columnar page: the Arrow IPC stream, how many rows it holds, and where the next page starts.
PageResponse = TypedDict("PageResponse", {"page": bytes, "count": Long, "next-sequence-number": Long})


ResponseBody = (Empty | MessagesResponse | RenewLockResponse | ScheduleResponse | RenewSessionLockResponse
                | GetSessionStateResponse | GetMessageSessionsResponse | EnumerateRulesResponse | CountResponse
                | PartitionBoundsResponse | PageResponse)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: ResponseBody | None = None
    description: str = "OK"
    condition: str | None = None
    # Run if the response is never written (its link went first): what the operation took goes back.
    give_back: Callable[[], None] | None = field(default=None, compare=False)


class Rules(Protocol):
    """What rule operations need of the broker."""

    metrics: BrokerMetrics

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None: ...

    async def remove_rule(self, subscription: Entity, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Context:
    actor: EntityActor
    sub_queue: SubQueue
    owner: ConnectionPort  # holds locks taken here (the client connection); they outlive it, until they expire
    max_message_size: int
    broker: Rules | None = None  # for rule operations on a subscription
    entity: Entity | None = None
    # Raises Unauthorized unless the caller's token grants the right (None: no check, e.g. in unit tests).
    authorise: Callable[[AccessRights], None] | None = None
    python_sdk_decimals: bool = False  # the client cannot read decimal128 (wire.python_sdk_decimals)

    @property
    def metrics(self) -> BrokerMetrics | None:
        metrics = getattr(self.broker, "metrics", None)
        return metrics if isinstance(metrics, BrokerMetrics) else None


Operation = Callable[[Context, ManagementRequest], Awaitable[Response]]


def _int_arg(body: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentError(f"'{key}' must be an integer")
    return int(value)


def _array(body: Mapping[str, object], key: str, kind: type[T]) -> list[T]:
    value = body.get(key)
    items = list(value) if isinstance(value, Array | list | tuple) else []
    kept = [v for v in items if isinstance(v, kind) and not isinstance(v, bool)]
    if not items or len(kept) < len(items):
        raise ArgumentError(f"'{key}' must be a non-empty array")
    return kept


async def renew_lock(ctx: Context, body: RenewLockRequest) -> Response:
    expirations = [Timestamp(await ctx.actor.renew_lock(token))
                   for token in _array(body, "lock-tokens", uuid.UUID)]
    return Response(OK, {"expirations": Array("timestamp", tuple(expirations))})


def _session_id(body: Mapping[str, object], required: bool = True) -> str | None:
    value = body.get("session-id")
    if isinstance(value, str):
        return value
    if required:
        raise ArgumentError("'session-id' must be a string")
    return None


async def peek_message(ctx: Context, body: PeekRequest) -> Response:
    start = _int_arg(body, "from-sequence-number", 1)
    count = _int_arg(body, "message-count", 1)
    records = await ctx.actor.peek(ctx.sub_queue, start, max(0, count), _session_id(body, required=False))
    if not records:
        return Response(NO_CONTENT, None, "No messages to peek")
    return Response(OK, {"messages": [
        {"message": wire.delivery_payload(r, None, with_state=True, python_sdk_decimals=ctx.python_sdk_decimals)}
        for r in records
    ]})


async def schedule_message(ctx: Context, body: ScheduleRequest) -> Response:
    entries = body.get("messages")
    if not isinstance(entries, list) or not entries:
        raise ArgumentError("'messages' must be a non-empty list")
    drafts = []
    for entry in entries:
        encoded = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(encoded, bytes):
            raise ArgumentError("each scheduled message needs its encoded 'message'")
        drafts.append(wire.received_messages(encoded, 0, ctx.max_message_size)[0])
    kept = without_pings(drafts)[0]
    if any(d.scheduled_enqueue_time is None for d in kept):
        raise ArgumentError("a scheduled message needs x-opt-scheduled-enqueue-time")
    numbers: list[int] = []
    actor = ctx.actor
    if kept:
        numbers = await actor.schedule(kept)
    if len(kept) < len(drafts):
        # Pings are never scheduled (clarification 15): dropped as a sent ping is, after the Send right
        # was checked; each gets sequence number 0, which names no message (cancelling it is refused).
        ctx.actor.note_activity()
        given = iter(numbers)
        numbers = [0 if d.ping else next(given) for d in drafts]
    return Response(OK, {"sequence-numbers": Array("long", tuple(Long(n) for n in numbers))})


async def cancel_scheduled_message(ctx: Context, body: CancelScheduledRequest) -> Response:
    await ctx.actor.cancel_scheduled(_array(body, "sequence-numbers", int))
    return Response(OK, Empty())


async def receive_by_sequence_number(ctx: Context, body: ReceiveBySequenceNumberRequest) -> Response:
    numbers = _array(body, "sequence-numbers", int)
    mode = _int_arg(body, "receiver-settle-mode", PEEK_LOCK)
    taken_now = await ctx.actor.receive_deferred(ctx.sub_queue, numbers, mode == PEEK_LOCK,
                                                 _session_id(body, required=False))
    messages: list[DeliveredMessage] = [
        {"message": wire.delivery_payload(r, until, with_state=True, lock_token=token,
                                          python_sdk_decimals=ctx.python_sdk_decimals), "lock-token": token}
        if token is not None else
        {"message": wire.delivery_payload(r, None, with_state=True, python_sdk_decimals=ctx.python_sdk_decimals)}
        for r, token, until in taken_now]
    if mode == PEEK_LOCK or not taken_now:
        return Response(OK, {"messages": messages})
    # ReceiveAndDelete: deleted already; if the response never leaves, they go back in place (with the
    # claim counted, as the core's Unsent takes them).
    actor, sub = ctx.actor, ctx.sub_queue
    taken = [with_claim_counted(r) for r, _, _ in taken_now]
    return Response(OK, {"messages": messages}, give_back=lambda: actor.unsent(sub, taken))


async def update_disposition(ctx: Context, body: UpdateDispositionRequest) -> Response:
    tokens = _array(body, "lock-tokens", uuid.UUID)
    if not tokens:
        return Response(OK, Empty())
    settlement = from_disposition_status(body.get("disposition-status"),
                                         deadletter_reason=body.get("deadletter-reason"),
                                         deadletter_description=body.get("deadletter-description"),
                                         properties_to_modify=body.get("properties-to-modify"))
    actor = ctx.actor
    futures: list[asyncio.Future[None]] = []
    for token in tokens:
        future = outcomes.carry_out(actor, token, settlement)
        if future is None:
            continue  # (no disposition-status names a release)
        futures.append(future)
        if settlement.removes and ctx.metrics is not None:
            ctx.metrics.count_out(future, actor, ctx.sub_queue)
    await asyncio.gather(*futures)
    return Response(OK, Empty())


async def renew_session_lock(ctx: Context, body: SessionRequest) -> Response:
    session_id = _session_id(body)
    assert session_id is not None
    return Response(OK, {"expiration": Timestamp(await ctx.actor.renew_session_lock(session_id))})


async def get_session_state(ctx: Context, body: SessionRequest) -> Response:
    session_id = _session_id(body)
    assert session_id is not None
    return Response(OK, {"session-state": await ctx.actor.get_session_state(session_id)})


async def set_session_state(ctx: Context, body: SetSessionStateRequest) -> Response:
    session_id = _session_id(body)
    assert session_id is not None
    state = body.get("session-state")
    if state is not None and not isinstance(state, bytes):
        raise ArgumentError("'session-state' must be binary or null")
    await ctx.actor.set_session_state(session_id, state)
    return Response(OK, Empty())


# "no filter": DateTime.MaxValue in ms, which the SDK sends for a default listing (contract 6.10)
LIST_ALL_SESSIONS = 253402300800000


async def get_message_sessions(ctx: Context, body: GetMessageSessionsRequest) -> Response:
    since = _int_arg(body, "last-updated-time", LIST_ALL_SESSIONS)
    skip = max(0, _int_arg(body, "skip", 0))
    top = max(0, _int_arg(body, "top", 100))
    sessions = await ctx.actor.list_sessions(None if since >= LIST_ALL_SESSIONS else since)
    page = sessions[skip : skip + top]
    if not page:
        return Response(NO_CONTENT, None, "No sessions")
    return Response(OK, {"skip": skip + len(page), "sessions-ids": Array("string", tuple(page))})


def _subscription(ctx: Context) -> Entity:
    if ctx.entity is None or ctx.entity.kind != SUBSCRIPTION:
        raise ArgumentError("rule operations are for a subscription's $management node")
    return ctx.entity


def _rules(ctx: Context) -> Rules:
    if ctx.broker is None:
        raise ArgumentError("rule operations need the broker")
    return ctx.broker


async def add_rule(ctx: Context, body: AddRuleRequest) -> Response:
    name = body.get("rule-name")
    if not isinstance(name, str) or not name:
        raise ArgumentError("'rule-name' must be a non-empty string")
    subscription = _subscription(ctx)
    await _rules(ctx).add_rule(subscription, rule_from_request(name, rule_description(body.get("rule-description"))))
    return Response(OK, Empty())


async def remove_rule(ctx: Context, body: RemoveRuleRequest) -> Response:
    name = body.get("rule-name")
    if not isinstance(name, str):
        raise ArgumentError("'rule-name' must be a string")
    subscription = _subscription(ctx)
    await _rules(ctx).remove_rule(subscription, name)
    return Response(OK, Empty())


async def enumerate_rules(ctx: Context, body: EnumerateRulesRequest) -> Response:
    skip = max(0, _int_arg(body, "skip", 0))
    top = max(0, _int_arg(body, "top", 100))
    rules = [r.description for r in _subscription(ctx).rules][skip : skip + top]
    if not rules:
        return Response(NO_CONTENT, None, "No rules")
    return Response(OK, {"rules": [{"rule-description": rule_to_wire(r)} for r in rules]})


# ---- Sodalite extensions (docs/spark.md): what the Spark data source needs; no Service Bus SDK sends them.

COMPLETE_THROUGH = "com.sodalite:complete-through-sequence-number"
COMPLETE_NUMBERS = "com.sodalite:complete-sequence-numbers"
PARTITION_BOUNDS = "com.sodalite:partition-bounds"
PEEK_PARTITION = "com.sodalite:peek-partition"
PEEK_PARTITION_COLUMNS = "com.sodalite:peek-partition-columns"


def _partition(ctx: Context, body: Mapping[str, object]) -> CoreActor:
    partitions = each(ctx.actor)
    index = _int_arg(body, "partition", 0)
    if not 0 <= index < len(partitions):
        raise ArgumentError(f"'partition' must be between 0 and {len(partitions) - 1}")
    return partitions[index]


async def complete_through_sequence_number(ctx: Context, body: CompleteThroughRequest) -> Response:
    """Remove every unlocked message of one partition numbered ``sequence-number`` or lower; answers
    ``count`` (how many went) once the delete is durable. Idempotent: a repeat removes nothing more."""
    partition = _partition(ctx, body)
    count = await partition.complete_through(ctx.sub_queue, _int_arg(body, "sequence-number"))
    return Response(OK, {"count": Long(count)})


async def complete_sequence_numbers(ctx: Context, body: CompleteNumbersRequest) -> Response:
    """Remove exactly the unlocked messages of one partition with these numbers (in any state); answers
    ``count`` (how many went) once the delete is durable. Idempotent: a number gone is skipped. The
    Spark reader removes what its committed batches read this way, never "everything below N" (a
    message put back below N, a ReceiveAndDelete transfer never written, was not read)."""
    partition = _partition(ctx, body)
    numbers = list(dict.fromkeys(_array(body, "sequence-numbers", int)))
    gone = await partition.move_out(ctx.sub_queue, [MoveItem(n) for n in numbers], None)
    return Response(OK, {"count": Long(sum(1 for n in gone if n is not None))})


async def partition_bounds(ctx: Context, body: PartitionRequest) -> Response:
    """Per partition: the first stored sequence number (null when empty) and the next one to be made
    visible; everything numbered below ``next-sequence-number`` that will ever be visible already is."""
    partitions = each(ctx.actor)
    bounds: list[PartitionBounds] = []
    for index, partition in enumerate(partitions):
        first, next_number = await partition.bounds(ctx.sub_queue)
        bounds.append({"partition": index, "first-sequence-number": None if first is None else Long(first),
                       "next-sequence-number": Long(next_number)})
    return Response(OK, {"partitions": bounds})


async def peek_partition(ctx: Context, body: PeekPartitionRequest) -> Response:
    """Peek within one partition only, failing (rather than skipping it) when its store is unavailable."""
    partition = _partition(ctx, body)
    start = _int_arg(body, "from-sequence-number", 0)
    count = max(0, _int_arg(body, "message-count", 1))
    records = await partition.peek(ctx.sub_queue, start, count)
    return Response(OK, {"messages": [
        {"message": wire.delivery_payload(r, None, with_state=True)} for r in records
    ]})


async def peek_partition_columns(ctx: Context, body: PeekColumnsRequest) -> Response:
    """Peek within one partition, answered as a columnar page (server/pages.py): an Arrow IPC stream of
    the ``columns`` asked for, of the messages numbered from ``from-sequence-number`` up to (not
    including) ``to-sequence-number``, bounded by ``message-count`` rows and ``max-bytes`` of stored
    messages. Not implemented (the reader then peeks rows) where pyarrow is not installed."""
    if not pages.available():
        raise NotImplementedOperation(f"{PEEK_PARTITION_COLUMNS} needs pyarrow on the broker; "
                                      f"use {PEEK_PARTITION}")
    partition = _partition(ctx, body)
    names = pages.columns(body.get("columns"))
    start = _int_arg(body, "from-sequence-number", 0)
    end = None if body.get("to-sequence-number") is None else _int_arg(body, "to-sequence-number")
    rows = min(max(1, _int_arg(body, "message-count", pages.DEFAULT_ROWS)), pages.MAX_ROWS)
    max_bytes = min(max(1, _int_arg(body, "max-bytes", pages.DEFAULT_BYTES)), pages.MAX_BYTES)
    count = rows if end is None else max(0, min(rows, end - start))
    peeked = await partition.peek(ctx.sub_queue, start, count) if count else []
    records = pages.within([r for r in peeked if end is None or r.sequence_number < end], max_bytes)
    page = await asyncio.get_running_loop().run_in_executor(None, pages.build, records, names)
    after = records[-1].sequence_number + 1 if records else start
    return Response(OK, {"page": page, "count": Long(len(records)), "next-sequence-number": Long(after)})


OPERATIONS: dict[str, Operation] = {
    "com.microsoft:renew-lock": renew_lock,
    "com.microsoft:peek-message": peek_message,
    "com.microsoft:schedule-message": schedule_message,
    "com.microsoft:cancel-scheduled-message": cancel_scheduled_message,
    "com.microsoft:receive-by-sequence-number": receive_by_sequence_number,
    "com.microsoft:update-disposition": update_disposition,
    "com.microsoft:renew-session-lock": renew_session_lock,
    "com.microsoft:get-session-state": get_session_state,
    "com.microsoft:set-session-state": set_session_state,
    "com.microsoft:get-message-sessions": get_message_sessions,
    "com.microsoft:add-rule": add_rule,
    "com.microsoft:remove-rule": remove_rule,
    "com.microsoft:enumerate-rules": enumerate_rules,
    COMPLETE_THROUGH: complete_through_sequence_number,
    COMPLETE_NUMBERS: complete_sequence_numbers,
    PARTITION_BOUNDS: partition_bounds,
    PEEK_PARTITION: peek_partition,
    PEEK_PARTITION_COLUMNS: peek_partition_columns,
}


# The right each operation needs (Manage implies the other two): reading and settling is Listen's,
# scheduling is Send's, changing a subscription's rules is Manage's.
REQUIRED_RIGHTS: dict[str, AccessRights] = {
    "com.microsoft:renew-lock": AccessRights.LISTEN,
    "com.microsoft:peek-message": AccessRights.LISTEN,
    "com.microsoft:schedule-message": AccessRights.SEND,
    "com.microsoft:cancel-scheduled-message": AccessRights.SEND,
    "com.microsoft:receive-by-sequence-number": AccessRights.LISTEN,
    "com.microsoft:update-disposition": AccessRights.LISTEN,
    "com.microsoft:renew-session-lock": AccessRights.LISTEN,
    "com.microsoft:get-session-state": AccessRights.LISTEN,
    "com.microsoft:set-session-state": AccessRights.LISTEN,
    "com.microsoft:get-message-sessions": AccessRights.LISTEN,
    "com.microsoft:add-rule": AccessRights.MANAGE,
    "com.microsoft:remove-rule": AccessRights.MANAGE,
    "com.microsoft:enumerate-rules": AccessRights.MANAGE,
    COMPLETE_THROUGH: AccessRights.LISTEN,
    COMPLETE_NUMBERS: AccessRights.LISTEN,
    PARTITION_BOUNDS: AccessRights.LISTEN,
    PEEK_PARTITION: AccessRights.LISTEN,
    PEEK_PARTITION_COLUMNS: AccessRights.LISTEN,
}


def _request(body: AmqpMap) -> ManagementRequest:
    """The request map with string keys. Its values stay unchecked (each operation checks what it
    reads) and keys no operation reads are carried along unread: hence the cast."""
    return cast(ManagementRequest, {str(k): v for k, v in body.items()})


async def execute(ctx: Context, operation: AmqpValue, body: AmqpValue) -> Response:
    """Run one request; every failure becomes a response, never an exception."""
    handler = OPERATIONS.get(str(operation))
    try:
        if handler is None:
            raise NotImplementedOperation(f"the management operation {operation!r} is not implemented yet")
        if ctx.authorise is not None:
            ctx.authorise(REQUIRED_RIGHTS.get(str(operation), AccessRights.MANAGE))
        if not isinstance(body, dict):
            raise ArgumentError("the request body must be a map")
        return await handler(ctx, _request(body))
    except Exception as exc:  # an unexpected failure is answered too, as an internal error
        entity = ctx.entity.name if ctx.entity is not None else ctx.actor.ref.entity
        # (getattr: the unit tests stand a bare object in for the connection)
        error, description = report(exc, ctx.metrics, getattr(ctx.owner, "peer", None), entity, "management")
        return Response(error.http_status, None, description, error.condition)
