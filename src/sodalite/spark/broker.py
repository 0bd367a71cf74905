"""What the data source asks of the broker, over Sodalite's own AMQP client.

Peeks, partition bounds and complete-through are ``$management`` requests (the last two and the
per-partition peek are Sodalite extensions, docs/spark.md); sends are unsettled transfers that
each wait for the broker's acceptance, i.e. until the message is durable. A failed request raises
:class:`BrokerRequestError` naming the entity and the broker's reason.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sodalite.amqpclient import AmqpClient, ClientError, connection_string
from sodalite.errors import ConfigurationError, SodaliteError
from sodalite.message import sections
from sodalite.message.names import SEQUENCE_NUMBER
from sodalite.model import sas

COMPLETE_THROUGH: Final = "com.sodalite:complete-through-sequence-number"
COMPLETE_NUMBERS: Final = "com.sodalite:complete-sequence-numbers"
COMPLETE_CHUNK: Final = 5000  # sequence numbers per complete-sequence-numbers request
PARTITION_BOUNDS: Final = "com.sodalite:partition-bounds"
PEEK_PARTITION: Final = "com.sodalite:peek-partition"
PEEK_PAGE: Final = 1000
PEEK_COLUMNS: Final = "com.sodalite:peek-partition-columns"
PAGE_ROWS: Final = 4096  # rows per columnar page asked for (the broker caps it too)
PAGE_BYTES: Final = 4 << 20  # stored bytes per columnar page asked for (the broker caps it too)
NOT_IMPLEMENTED: Final = "amqp:not-implemented"
SEND_CHUNK: Final = 500
DEAD_LETTER_SUFFIX: Final = "/$deadletterqueue"


def sequence_number(payload: bytes) -> int:
    """A peeked message's sequence number."""
    number = sections.number(sections.walk(payload, application=False).annotations.get(SEQUENCE_NUMBER))
    if number is None:
        raise BrokerRequestError("the broker peeked a message without a sequence number", "amqp:internal-error")
    return number


class ArrowColumn(Protocol):
    def to_pylist(self) -> list[int]: ...  # the data source reads the sequenceNumber column only


class ArrowBatch(Protocol):
    """What the data source reads of a pyarrow RecordBatch here (pyarrow carries no type information)."""

    @property
    def num_rows(self) -> int: ...
    def column(self, index: int, /) -> ArrowColumn: ...


class BrokerRequestError(SodaliteError):
    """The broker refused or failed a request the data source made; ``remote_condition`` is the AMQP
    condition the broker answered with (the message includes it)."""

    condition = "amqp:internal-error"
    http_status = 500

    def __init__(self, message: str, condition: str | None = None, index: int | None = None) -> None:
        super().__init__(f"{message} [{condition}]" if condition else message)
        self.remote_condition = condition
        self.index = index  # in a send, the position of the message the broker refused


@dataclass(frozen=True, slots=True)
class Bounds:
    partition: int
    first: int | None  # lowest stored sequence number, None when the partition is empty
    next: int  # every number below it that will ever be visible is visible


def _explain(entity: str, exc: ClientError) -> BrokerRequestError:
    condition = exc.condition
    if condition == "amqp:not-found":
        return BrokerRequestError(f"entity '{entity}' does not exist: {exc.description}", condition)
    if condition == "amqp:unauthorized-access":
        return BrokerRequestError(
            f"the connection string's key is not authorised for '{entity}' (wrong key, or a right missing): "
            f"{exc.description}", condition)
    return BrokerRequestError(f"'{entity}': {exc.description}", condition)


class Broker:
    """One lazily opened connection to the broker a connection string names; picklable (it reconnects)."""

    def __init__(self, conn: str, timeout: float = 60.0) -> None:
        try:
            self.settings = connection_string.parse(conn)
        except ConfigurationError as exc:
            raise ConfigurationError(f"option 'connectionString': {exc}") from None
        self._conn = conn
        self._timeout = timeout
        self._client: AmqpClient | None = None
        # Whether the broker serves columnar pages: None until asked (a broker without pyarrow, or an
        # older one, answers not-implemented and the rows are peeked instead).
        self.columnar: bool | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"conn": self._conn, "timeout": self._timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["conn"], state["timeout"])  # type: ignore[misc]

    def client(self) -> AmqpClient:
        if self._client is None:
            s = self.settings
            try:
                self._client = AmqpClient(s.host, s.port, s.key_name, s.key,
                                          tls=ssl.create_default_context() if s.tls else None, timeout=self._timeout)
            except OSError as exc:
                raise BrokerRequestError(f"cannot connect to {s.host}:{s.port}: {exc}",
                                         "amqp:connection:forced") from None
        return self._client

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
            self._client = None

    def _management(self, entity: str, operation: str, body: dict[str, object]) -> Any:
        try:
            reply = self.client().management(entity, operation, body)
        except ClientError as exc:
            self.close()
            raise _explain(entity, exc) from None
        except (OSError, TimeoutError) as exc:
            self.close()
            raise BrokerRequestError(f"'{entity}': the broker connection failed: {exc}",
                                     "amqp:connection:forced") from None
        if reply.status == 204:
            return None
        if reply.status != 200:
            raise _explain(entity, ClientError(reply.condition, reply.description or f"status {reply.status}"))
        return reply.body

    def entity_names(self) -> list[str]:
        """Every queue and subscription (``topic/subscriptions/name``) of the namespace, from the broker's
        management API on the same port (listing entities needs the Manage right, as in Service Bus)."""
        import urllib.error  # (here: most readers never list, and every Spark worker imports this module)
        import urllib.request

        s = self.settings
        base = f"{'https' if s.tls else 'http'}://{s.host}:{s.port}"
        token = sas.generate_token(base, s.key_name, s.key, int(time.time()) + 600)
        request = urllib.request.Request(f"{base}/api/v1/entities", headers={
            "Authorization": "Bearer " + token, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self._timeout,
                                        context=ssl.create_default_context() if s.tls else None) as response:
                listed = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise BrokerRequestError(
                    f"option 'entityPattern': listing the entities needs a key with the Manage right, and the "
                    f"connection string's key '{s.key_name}' does not have it (HTTP {exc.code})",
                    "amqp:unauthorized-access") from None
            raise BrokerRequestError(f"option 'entityPattern': the broker refused to list its entities "
                                     f"(HTTP {exc.code})", "amqp:internal-error") from None
        except (OSError, ValueError) as exc:
            raise BrokerRequestError(f"option 'entityPattern': cannot list the entities at {base}: {exc}",
                                     "amqp:connection:forced") from None
        return [str(e["path"]) for e in listed if isinstance(e, dict) and e.get("kind") in ("queue", "subscription")]

    def bounds(self, entity: str) -> list[Bounds]:
        body = self._management(entity, PARTITION_BOUNDS, {})
        return [Bounds(int(b["partition"]), None if b["first-sequence-number"] is None
                       else int(b["first-sequence-number"]), int(b["next-sequence-number"]))
                for b in body["partitions"]]

    def peek_pages(self, entity: str, partition: int, start: int, end: int,
                   page: int = PEEK_PAGE) -> Iterator[list[bytes]]:
        """The messages of ``partition`` numbered in [start, end), in order, as peek returns them (encoded),
        a page (one ``$management`` request of up to ``page`` messages) at a time."""
        cursor = start
        while cursor < end:
            body = self._management(entity, PEEK_PARTITION, {
                "partition": partition, "from-sequence-number": cursor, "message-count": min(page, end - cursor)})
            messages = [] if body is None else body.get("messages") or []
            if not messages:
                return
            payloads = [entry["message"] for entry in messages]
            last = sequence_number(payloads[-1])
            if last < end:
                yield payloads
                cursor = last + 1
                continue
            while payloads and sequence_number(payloads[-1]) >= end:
                payloads.pop()
            if payloads:
                yield payloads
            return

    def column_pages(self, entity: str, partition: int, start: int, end: int,
                     columns: tuple[str, ...]) -> Iterator[ArrowBatch] | None:
        """The messages of ``partition`` numbered in [start, end), in order, as pyarrow record batches of
        ``columns`` built by the broker (one ``$management`` request per page); None when the broker
        does not serve columnar pages."""
        if self.columnar is False or start >= end:
            return None if self.columnar is False else iter(())
        try:
            first = self._column_page(entity, partition, start, end, columns)
        except BrokerRequestError as exc:
            if exc.remote_condition != NOT_IMPLEMENTED:
                raise
            self.columnar = False
            return None
        self.columnar = True
        return self._column_pages(entity, partition, end, columns, first)

    def _column_pages(self, entity: str, partition: int, end: int, columns: tuple[str, ...],
                      page: tuple[ArrowBatch, int]) -> Iterator[ArrowBatch]:
        while True:
            batch, after = page
            if batch.num_rows == 0:
                return
            yield batch
            if after >= end:
                return
            page = self._column_page(entity, partition, after, end, columns)

    def _column_page(self, entity: str, partition: int, start: int, end: int,
                     columns: tuple[str, ...]) -> tuple[ArrowBatch, int]:
        import pyarrow as pa  # type: ignore[import-untyped]

        body = self._management(entity, PEEK_COLUMNS, {
            "partition": partition, "from-sequence-number": start, "to-sequence-number": end,
            "message-count": PAGE_ROWS, "max-bytes": PAGE_BYTES, "columns": list(columns)})
        if not isinstance(body, dict) or not isinstance(body.get("page"), bytes):
            raise BrokerRequestError(f"'{entity}': the broker answered a columnar page without its data",
                                     "amqp:internal-error")
        batch = pa.ipc.open_stream(pa.py_buffer(body["page"])).read_next_batch()
        return batch, int(body["next-sequence-number"])

    def sequence_numbers(self, entity: str, partition: int, start: int, end: int) -> list[int]:
        """The sequence numbers of the messages of ``partition`` in [start, end), in order."""
        pages = self.column_pages(entity, partition, start, end, ("sequenceNumber",))
        if pages is not None:
            return [n for batch in pages for n in batch.column(0).to_pylist()]
        return [sequence_number(payload) for page in self.peek_pages(entity, partition, start, end)
                for payload in page]

    def complete_through(self, entity: str, partition: int, sequence_number: int) -> int:
        body = self._management(entity, COMPLETE_THROUGH, {"partition": partition,
                                                           "sequence-number": sequence_number})
        return int(body["count"])

    def complete_numbers(self, entity: str, partition: int, numbers: list[int]) -> int:
        """Remove exactly these messages of ``partition`` (the unlocked ones still there); how many went."""
        removed = 0
        for start in range(0, len(numbers), COMPLETE_CHUNK):
            body = self._management(entity, COMPLETE_NUMBERS, {
                "partition": partition, "sequence-numbers": numbers[start:start + COMPLETE_CHUNK]})
            removed += int(body["count"])
        return removed

    def check_sender(self, entity: str) -> None:
        try:
            self.client().check_sender(entity)
        except ClientError as exc:
            self.close()
            raise _explain(entity, exc) from None

    def send(self, entity: str, payloads: list[bytes]) -> None:
        """Send and wait until each message is durable; a refusal names the index of the message."""
        for offset in range(0, len(payloads), SEND_CHUNK):
            try:
                self.client().send(entity, payloads[offset : offset + SEND_CHUNK])
            except ClientError as exc:
                self.close()
                error = _explain(entity, exc)
                error.index = None if exc.index is None else offset + exc.index
                raise error from None
            except (OSError, TimeoutError) as exc:
                self.close()
                raise BrokerRequestError(f"'{entity}': the broker connection failed: {exc}",
                                         "amqp:connection:forced") from None

