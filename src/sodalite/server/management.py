"""The ``$management`` node of an entity: request/response operations (sdk-wire-contract.md section 6).

Each operation reads its arguments from the request's map body and returns a status and a map
body; errors are Sodalite errors, reported as ``statusCode`` (the error's HTTP status) with the
AMQP condition in ``errorCondition``, which the SDK maps to its exception classes. Operations not
built yet answer 501 with ``amqp:not-implemented``: never a fake success.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sodalite.amqp.types import Array, Timestamp
from sodalite.errors import ArgumentError, NotImplementedOperation, SodaliteError
from sodalite.server import wire

if TYPE_CHECKING:
    from sodalite.server.partition_actor import PartitionActor

OK = 200
NO_CONTENT = 204


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: dict[str, Any] | None = None
    description: str = "OK"
    condition: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Operation = Callable[["PartitionActor", dict[str, Any]], Response]


def _int_arg(body: dict[str, Any], key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentError(f"'{key}' must be an integer")
    return int(value)


def _tokens(body: dict[str, Any]) -> list[uuid.UUID]:
    value = body.get("lock-tokens")
    items = list(value) if isinstance(value, Array | list | tuple) else []
    if not items or not all(isinstance(t, uuid.UUID) for t in items):
        raise ArgumentError("'lock-tokens' must be a non-empty array of uuids")
    return items


def renew_lock(actor: PartitionActor, body: dict[str, Any]) -> Response:
    expirations = [Timestamp(actor.renew_lock(token)) for token in _tokens(body)]
    return Response(OK, {"expirations": Array("timestamp", tuple(expirations))})


def peek_message(actor: PartitionActor, body: dict[str, Any]) -> Response:
    start = _int_arg(body, "from-sequence-number", 1)
    count = _int_arg(body, "message-count", 1)
    records = actor.peek(start, max(0, count))
    if not records:
        return Response(NO_CONTENT, None, "No messages to peek")
    return Response(OK, {"messages": [
        {"message": wire.delivery_payload(r, None, with_state=True)} for r in records
    ]})


OPERATIONS: dict[str, Operation] = {
    "com.microsoft:renew-lock": renew_lock,
    "com.microsoft:peek-message": peek_message,
}


def execute(actor: PartitionActor, operation: Any, body: Any) -> Response:
    """Run one request; every failure becomes a response, never an exception."""
    handler = OPERATIONS.get(str(operation))
    try:
        if handler is None:
            raise NotImplementedOperation(f"the management operation {operation!r} is not implemented yet")
        if not isinstance(body, dict):
            raise ArgumentError("the request body must be a map")
        return handler(actor, {str(k): v for k, v in body.items()})
    except SodaliteError as exc:
        return Response(exc.http_status, None, exc.description, exc.condition)
