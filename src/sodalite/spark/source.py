"""The ``sodalite`` PySpark data source: batch and streaming reads of an entity, batch and streaming writes.

Theory of operation (docs/spark.md). An offset is, per partition of the entity, the next sequence
number to read: ``{"entity": path, "partitions": {"0": n0, "1": n1, ...}}``. A batch covers, per
partition, the numbers in [start, end); its rows are whatever a peek of that range returns, and
since a partition never makes a number visible before a lower one (clarifications, "Sequence
numbers are visible in order"), ``end`` is taken at or below the partition's next number and a
replay of the same (start, end) reads the same messages, unless something removed them meanwhile.
Nothing is locked or removed by reading.

``latestOffset`` asks the broker for each partition's bounds (first stored number, next number),
skips empty stretches, and honours the read limit (``maxMessagesPerTrigger``: ``ReadMaxRows``) by
sharing it across partitions in sequence-number spans, which never undercount messages. Under
``Trigger.AvailableNow`` the bounds taken when the trigger starts cap every batch.

With ``consume=complete`` the source removes what Spark has committed: in ``commit(end)``, and in
``latestOffset(start)`` for everything below ``start`` (Spark commits batch N only while it plans
N+1, and never calls commit for the last batch of a run). Removal is the broker's "complete through
sequence number in partition", which skips locked messages and is idempotent.

Everything here pickles: connections open on first use and are dropped when pickled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sodalite.errors import ConfigurationError
from sodalite.spark import rows
from sodalite.spark.broker import Bounds, Broker, BrokerRequestError
from sodalite.spark.options import (
    EARLIEST,
    LATEST,
    SinkOptions,
    SourceOptions,
    sink_options,
    source_options,
    starting_positions,
)

Offset = dict[str, Any]


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """One Spark task: the messages of one entity partition numbered in [start, end)."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    messages: int


class SodaliteDataSource(DataSource):
    """``spark.read|readStream.format("sodalite")`` and ``df.write|writeStream.format("sodalite")``."""

    @classmethod
    def name(cls) -> str:
        return "sodalite"

    def schema(self) -> str:
        return rows.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(sink_options(self.options), schema)


ARROW_BATCH_ROWS = 2000


def _read(broker: Broker, path: str, part: SequenceRange) -> Iterator[Any]:
    """The range's rows as Arrow record batches: Spark takes them without converting row by row."""
    try:
        pending: list[tuple[Any, ...]] = []
        for row in broker.peek_range(path, part.partition, part.start, part.end):
            pending.append(row)
            if len(pending) == ARROW_BATCH_ROWS:
                yield rows.record_batch(pending)
                pending = []
        if pending:
            yield rows.record_batch(pending)
    finally:
        broker.close()


class BatchReader(DataSourceReader):
    """Browse every message stored now, one task per non-empty partition."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.broker = Broker(options.connection_string)

    def partitions(self) -> list[SequenceRange]:
        try:
            bounds = self.broker.bounds(self.options.path)
        finally:
            self.broker.close()
        ranges = [SequenceRange(b.partition, b.first, b.next) for b in bounds if b.first is not None]
        return ranges or [SequenceRange(0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SequenceRange)
        return _read(self.broker, self.options.path, partition)


def _partition_base(partition: int) -> int:
    return partition << rows.PARTITION_SHIFT


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.broker = Broker(options.connection_string)
        self._bounds = self._fetch_bounds()  # checks the entity and the key on the driver, now
        self._available_now: dict[int, int] | None = None
        self._completed: dict[int, int] = {}
        starting_positions(options.starting_position, len(self._bounds))

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "broker": self.broker, "_bounds": self._bounds,
                "_available_now": self._available_now, "_completed": dict(self._completed)}

    def _fetch_bounds(self) -> list[Bounds]:
        return self.broker.bounds(self.options.path)

    def _offset(self, positions: dict[int, int]) -> Offset:
        return {"entity": self.options.path, "partitions": {str(p): n for p, n in sorted(positions.items())}}

    def _positions(self, offset: Offset) -> dict[int, int]:
        entity = offset.get("entity")
        if entity != self.options.path:
            raise ConfigurationError(
                f"the checkpoint holds offsets of entity '{entity}', but this query reads '{self.options.path}': "
                "use a new checkpointLocation for a different entity")
        partitions = offset.get("partitions")
        if not isinstance(partitions, dict):
            raise ConfigurationError(f"the checkpoint's offset {offset!r} is not a Sodalite offset")
        return {int(p): int(n) for p, n in partitions.items()}

    # ---- the offset contract ------------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        bounds = self._fetch_bounds()
        self._bounds = bounds
        wanted = starting_positions(self.options.starting_position, len(bounds))
        positions = {}
        for b in bounds:
            start = wanted.get(b.partition, EARLIEST)
            if start == EARLIEST:
                positions[b.partition] = _partition_base(b.partition)
            elif start == LATEST:
                positions[b.partition] = b.next
            else:
                positions[b.partition] = start
        return self._offset(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {b.partition: b.next for b in self._fetch_bounds()}

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        positions = self._positions(start)
        if self.options.consume:
            self._complete_below(positions)  # everything below start has been committed by now
        bounds = self._fetch_bounds()
        self._bounds = bounds
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        low: dict[int, int] = {}
        high: dict[int, int] = {}
        for b in bounds:
            begin = positions.get(b.partition, _partition_base(b.partition))
            top = b.next if self._available_now is None else min(b.next, self._available_now.get(b.partition, b.next))
            top = max(top, begin)
            first = top if b.first is None else min(max(b.first, begin), top)
            low[b.partition], high[b.partition] = max(begin, first), top
        take = {p: 0 for p in low}
        if budget is None:
            take = {p: high[p] - low[p] for p in low}
        else:
            remaining = budget
            while remaining > 0:
                active = [p for p in low if take[p] < high[p] - low[p]]
                if not active:
                    break
                share = max(1, remaining // len(active))
                for p in active:
                    step = min(share, high[p] - low[p] - take[p], remaining)
                    take[p] += step
                    remaining -= step
                    if remaining == 0:
                        break
        end = dict(positions)
        for p in low:
            end[p] = max(positions.get(p, _partition_base(p)), low[p] + take[p])
        return self._offset(end)

    def reportLatestOffset(self) -> Offset | None:
        return self._offset({b.partition: b.next for b in self._bounds}) if self._bounds else None

    def partitions(self, start: Offset, end: Offset) -> list[SequenceRange]:
        begin, finish = self._positions(start), self._positions(end)
        return [SequenceRange(p, begin.get(p, _partition_base(p)), n) for p, n in sorted(finish.items())
                if n > begin.get(p, _partition_base(p))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SequenceRange)
        return _read(self.broker, self.options.path, partition)

    def commit(self, end: Offset) -> None:
        if self.options.consume:
            self._complete_below(self._positions(end))

    def stop(self) -> None:
        self.broker.close()

    def _complete_below(self, positions: dict[int, int]) -> None:
        for partition, next_number in positions.items():
            through = next_number - 1
            if through >= _partition_base(partition) and through > self._completed.get(partition, -1):
                self.broker.complete_through(self.options.path, partition, through)
                self._completed[partition] = through


# ---- the sink -------------------------------------------------------------------------------------


def _task_id() -> str:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None:
            return f"task partition {context.partitionId()}"
    except ImportError:
        pass
    return "this task"


def send_rows(options: SinkOptions, iterator: Iterator[Any]) -> int:
    """Send each row's message, in order per target entity, waiting until each is durable."""
    broker = Broker(options.connection_string)
    pending: dict[str, list[tuple[int, str | None, bytes]]] = {}
    sent = 0

    def flush(entity: str) -> None:
        nonlocal sent
        batch = pending.pop(entity, [])
        if not batch:
            return
        try:
            broker.send(entity, [payload for _, _, payload in batch])
        except BrokerRequestError as exc:
            if exc.index is not None:
                index, message_id, payload = batch[exc.index]
                raise BrokerRequestError(
                    f"row {index} of {_task_id()} (messageId {message_id!r}, {len(payload)} bytes encoded) was "
                    f"refused by '{entity}': {exc}") from None
            raise
        sent += len(batch)

    try:
        for index, row in enumerate(iterator):
            values = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
            target = values.get("entity") or options.entity
            message_id = values.get("messageId")
            try:
                if not target:
                    raise ValueError("it has no target: give option 'entity' or a non-null 'entity' column")
                payload = rows.message_from_row(values, options.source_entity)
            except (ValueError, TypeError) as exc:
                for entity in list(pending):  # the rows before it are sent, as they would be in a later chunk
                    flush(entity)
                raise ConfigurationError(f"row {index} of {_task_id()} (messageId {message_id!r}): {exc}") from None
            pending.setdefault(str(target), []).append((index, message_id, payload))
            if len(pending[str(target)]) >= 500:
                flush(str(target))
        for entity in list(pending):
            flush(entity)
    finally:
        broker.close()
    return sent


def _check_sink(options: SinkOptions, schema: StructType) -> None:
    names = set(schema.fieldNames())
    if "body" not in names and "amqpMessage" not in names:
        raise ConfigurationError("the data frame written to 'sodalite' needs a 'body' column (binary or string)")
    if options.entity is None and "entity" not in names:
        raise ConfigurationError("option 'entity' is required unless the data frame has an 'entity' column")
    if options.entity is not None:
        broker = Broker(options.connection_string)
        try:
            broker.check_sender(options.entity)
        finally:
            broker.close()


class BatchWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_sink(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Any]) -> Written:
        return Written(send_rows(self.options, iterator))


class StreamWriter(DataSourceStreamWriter):
    """At least once per micro-batch (a replayed batch is sent again): exactly once into a target with
    duplicate detection, since MessageIds are kept or derived deterministically."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_sink(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Any]) -> Written:
        return Written(send_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
