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

With ``consume=complete`` the source removes what Spark has committed, and exactly that: the
numbers a batch reads are fixed when ``latestOffset`` plans it (a peek of its ranges on the driver)
and kept in its end offset (``"read"``: per entity and partition, inclusive runs), which Spark
checkpoints before the batch runs; the batch's tasks read only those numbers, and the source removes
them, with the broker's "complete sequence numbers" (which skips locked messages and is
idempotent), in ``commit(end)`` and again in ``latestOffset(start)`` (Spark commits batch N only
while it plans N+1, and never calls commit for the last batch of a run). Never "everything below
N": a ReceiveAndDelete message whose transfer was never written is put back under its own number,
below numbers already read, and was not read.

Everything here pickles: connections open on first use and are dropped when pickled.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, cast

from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sodalite.errors import ConfigurationError
from sodalite.spark import rows, verbatim
from sodalite.spark.broker import Bounds, Broker, BrokerRequestError, sequence_number
from sodalite.spark.options import (
    EARLIEST,
    LATEST,
    SinkOptions,
    SourceOptions,
    entity_starting_positions,
    matching,
    sink_options,
    source_options,
    starting_positions,
    with_entities,
)

Offset = dict[str, object]  # JSON, as Spark keeps it in the checkpoint
Batches = Iterator[object]  # pyarrow RecordBatches, handed to Spark as they are
Key = tuple[str, int]  # (entity path, partition)
SOURCE_ENTITY: Final = "sourceEntity"


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """One Spark task: the messages of one entity partition numbered in [start, end)."""

    partition: int
    start: int
    end: int
    entity: str = ""  # the entity's path on the broker; "" in ranges planned before several entities
    # consume=complete: the numbers this batch reads, as inclusive runs (planned on the driver and kept
    # in the batch's end offset, so a replay reads and removes the same); None: whatever the range holds.
    numbers: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    messages: int


def _schema(several: bool) -> str:
    return rows.SCHEMA + (f", {SOURCE_ENTITY} string" if several else "")


_SIMPLE: Final = {"long": "bigint"}  # the schema's type names as Spark prints them


def _columns(options: SourceOptions, schema: StructType) -> tuple[str, ...]:
    """The columns the reader builds: those of ``schema`` (the user's, through ``.schema(...)``, or the
    full one), checked against the source's own, so a narrower schema decodes less."""
    names = []
    for field in schema.fields:
        kind = rows.KINDS.get(field.name) if field.name != SOURCE_ENTITY or not options.several else "string"
        if kind is None:
            raise ConfigurationError(
                f"schema: '{field.name}' is not a column of the sodalite source (columns: {', '.join(rows.COLUMNS)}"
                f"{', ' + SOURCE_ENTITY if options.several else ''})")
        if field.dataType.simpleString() != _SIMPLE.get(kind, kind):
            raise ConfigurationError(f"schema: column '{field.name}' is {kind}, not {field.dataType.simpleString()}")
        names.append(field.name)
    if not names:
        raise ConfigurationError("schema: give at least one column")
    return tuple(names)


class SodaliteDataSource(DataSource):
    """``spark.read|readStream.format("sodalite")`` and ``df.write|writeStream.format("sodalite")``."""

    @classmethod
    def name(cls) -> str:
        return "sodalite"

    def schema(self) -> str:  # (a sink has no source options)
        return _schema(bool((self.options.get("entities") or "").strip()) or "entitypattern" in self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _resolved(source_options(self.options))
        return BatchReader(options, _columns(options, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = _resolved(source_options(self.options))
        return StreamReader(options, _columns(options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(sink_options(self.options), schema)


def _resolved(options: SourceOptions) -> SourceOptions:
    """Options given as 'entityPattern' with the entities it matches now (listed by the broker)."""
    if options.entity_pattern is None:
        return options
    broker = Broker(options.connection_string)
    try:
        return with_entities(options, matching(options.entity_pattern, broker.entity_names()))
    finally:
        broker.close()


def _read(broker: Broker, options: SourceOptions, columns: tuple[str, ...], part: SequenceRange) -> Batches:
    """The range's rows as Arrow record batches: the broker's columnar pages as they arrive, or, from a
    broker that does not serve them, one batch per peeked page, built here column by column."""
    path = part.entity or options.path
    extra = {SOURCE_ENTITY: path} if options.several else None
    wanted = None if part.numbers is None else {n for low, high in part.numbers for n in range(low, high + 1)}
    try:
        batches = _column_batches(broker, columns, part, path, extra)
        if batches is not None:
            yield from batches
            return
        for page in broker.peek_pages(path, part.partition, part.start, part.end):
            if wanted is not None:
                page = [payload for payload in page if sequence_number(payload) in wanted]
                if not page:
                    continue
            yield rows.peeked_batch(page, columns, extra)
    finally:
        broker.close()


def _column_batches(broker: Broker, columns: tuple[str, ...], part: SequenceRange, path: str,
                    extra: dict[str, str] | None) -> Batches | None:
    """The range's rows from the broker's columnar pages (None when it does not serve them): kept as they
    come when they hold exactly ``columns``; a batch that reads chosen numbers only (consume=complete)
    is filtered on its sequence numbers, and ``sourceEntity`` is added as a constant column."""
    asked = tuple(name for name in columns if not (extra and name in extra))
    if part.numbers is not None and "sequenceNumber" not in asked:
        asked += ("sequenceNumber",)
    pages = broker.column_pages(path, part.partition, part.start, part.end, asked)
    if pages is None:
        return None
    if asked == columns and part.numbers is None:
        return pages
    return _reshaped(pages, columns, part.numbers, extra)


def _reshaped(pages: Iterator[Any], columns: tuple[str, ...], numbers: tuple[tuple[int, int], ...] | None,
              extra: dict[str, str] | None) -> Batches:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    chosen = None if numbers is None else pa.array([n for low, high in numbers for n in range(low, high + 1)],
                                                   type=pa.int64())
    for batch in pages:
        if chosen is not None:
            batch = batch.filter(pc.is_in(batch.column("sequenceNumber"), value_set=chosen))
            if batch.num_rows == 0:
                continue
        arrays, fields = [], []
        for name in columns:
            if extra and name in extra:
                arrays.append(pa.array([extra[name]] * batch.num_rows, type=pa.string()))
                fields.append(pa.field(name, pa.string()))
            else:
                arrays.append(batch.column(name))
                fields.append(batch.schema.field(name))
        yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _runs(numbers: list[int]) -> list[list[int]]:
    """Ascending numbers as inclusive [low, high] runs (an offset stays small: numbers are mostly consecutive)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs


def _partition_base(partition: int) -> int:
    return partition << rows.PARTITION_SHIFT


class BatchReader(DataSourceReader):
    """Browse every message stored now, one task per non-empty partition of each entity."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...] = rows.COLUMNS) -> None:
        self.options = options
        self.columns = columns
        self.broker = Broker(options.connection_string)

    def partitions(self) -> list[SequenceRange]:
        ranges = []
        try:
            for path in self.options.paths:
                ranges += [SequenceRange(b.partition, b.first, b.next, path)
                           for b in self.broker.bounds(path) if b.first is not None]
        finally:
            self.broker.close()
        return ranges or [SequenceRange(0, 0, 0, self.options.path)]

    def read(self, partition: InputPartition) -> Batches:
        assert isinstance(partition, SequenceRange)
        return _read(self.broker, self.options, self.columns, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, columns: tuple[str, ...] = rows.COLUMNS) -> None:
        self.options = options
        self.columns = columns
        self.broker = Broker(options.connection_string)
        self._bounds = self._fetch_bounds()  # checks each entity and the key on the driver, now
        self._available_now: dict[Key, int] | None = None
        self._removed: dict[object, object] | None = None  # the last "read" entry removed (once per run)
        self._wanted()

    def __getstate__(self) -> dict[str, object]:
        return {"options": self.options, "columns": self.columns, "broker": self.broker, "_bounds": self._bounds,
                "_available_now": self._available_now, "_removed": self._removed}

    def _follow_pattern(self) -> None:
        """With 'entityPattern', read the entities it matches now (kept as they were if it matches none)."""
        pattern = self.options.entity_pattern
        if pattern is not None:
            names = matching(pattern, self.broker.entity_names())
            if names:
                self.options = with_entities(self.options, names)

    def _fetch_bounds(self) -> dict[str, list[Bounds]]:
        return {path: self.broker.bounds(path) for path in self.options.paths}

    def _wanted(self) -> dict[Key, int]:
        """Each partition's starting position (EARLIEST, LATEST or a sequence number)."""
        o = self.options
        if o.several:
            texts = entity_starting_positions(o.starting_position, o.entities, strict=o.entity_pattern is None)
            per_path = {o.path_of(e): texts[e] for e in o.entities}
        else:
            per_path = {o.path: o.starting_position}
        return {(path, p): n for path, bounds in self._bounds.items()
                for p, n in starting_positions(per_path[path], len(bounds)).items()}

    def _offset(self, positions: dict[Key, int]) -> Offset:
        if not self.options.several:
            return {"entity": self.options.path,
                    "partitions": {str(p): n for (_, p), n in sorted(positions.items())}}
        entities: dict[str, dict[str, int]] = {path: {} for path in self.options.paths}
        for (path, p), n in sorted(positions.items()):
            entities[path][str(p)] = n
        return {"entities": entities}

    def _positions(self, offset: Offset) -> dict[Key, int]:
        if self.options.several:
            entities = offset.get("entities")
            held = sorted(entities) if isinstance(entities, dict) else [offset.get("entity")]
            if self.options.entity_pattern is not None and isinstance(entities, dict):
                # A pattern's entities come and go: one it matches no more is left; a new one starts at its
                # first message (latestOffset).
                entities = {path: parts for path, parts in entities.items() if path in self.options.paths}
            elif held != sorted(self.options.paths):
                raise ConfigurationError(
                    f"the checkpoint holds offsets of entities {held}, but this query reads "
                    f"{sorted(self.options.paths)}: use a new checkpointLocation for a different set of entities")
            assert isinstance(entities, dict)
            try:
                return {(path, int(p)): int(n) for path, parts in entities.items() for p, n in parts.items()}
            except (AttributeError, TypeError, ValueError):
                raise ConfigurationError(f"the checkpoint's offset {offset!r} is not a Sodalite offset") from None
        entity = offset.get("entity")
        if entity != self.options.path:
            held_text = (f"entities {sorted(cast(Iterable[str], offset['entities']))}" if "entities" in offset
                         else f"entity '{entity}'")
            raise ConfigurationError(
                f"the checkpoint holds offsets of {held_text}, but this query reads '{self.options.path}': "
                "use a new checkpointLocation for a different entity")
        partitions = offset.get("partitions")
        if not isinstance(partitions, dict):
            raise ConfigurationError(f"the checkpoint's offset {offset!r} is not a Sodalite offset")
        return {(entity, int(p)): int(n) for p, n in partitions.items()}

    # ---- the offset contract ------------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        self._bounds = self._fetch_bounds()
        wanted = self._wanted()
        positions = {}
        for path, bounds in self._bounds.items():
            for b in bounds:
                start = wanted.get((path, b.partition), EARLIEST)
                if start == EARLIEST:
                    positions[path, b.partition] = _partition_base(b.partition)
                elif start == LATEST:
                    positions[path, b.partition] = b.next
                else:
                    positions[path, b.partition] = start
        return self._offset(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {(path, b.partition): b.next
                               for path, bounds in self._fetch_bounds().items() for b in bounds}

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        self._follow_pattern()
        positions = self._positions(start)
        if self.options.consume:
            self._complete_read(start)  # the batch that ended at start: Spark has committed it by now
        self._bounds = self._fetch_bounds()
        low: dict[Key, int] = {}
        high: dict[Key, int] = {}
        for path, bounds in self._bounds.items():
            for b in bounds:
                key = (path, b.partition)
                begin = positions.get(key, _partition_base(b.partition))
                cap = b.next if self._available_now is None else min(b.next, self._available_now.get(key, b.next))
                top = max(cap, begin)
                first = top if b.first is None else min(max(b.first, begin), top)
                low[key], high[key] = max(begin, first), top
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_messages_per_trigger
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes_per_trigger
        if isinstance(limit, ReadAllAvailable):
            max_rows = max_bytes = None
        take = _share(low, high, max_rows)
        if max_bytes is not None:
            take = self._within_bytes(low, take, max_bytes)
        end = dict(positions)
        for key in low:
            end[key] = max(positions.get(key, _partition_base(key[1])), low[key] + take[key])
        offset = self._offset(end)
        if self.options.consume:
            # The numbers the batch will read, fixed now and kept in its offset (durable in the
            # checkpoint): it reads and removes exactly those, never "everything below N" (a
            # message put back below N, a ReceiveAndDelete transfer never written, was not read).
            read: dict[str, dict[str, list[list[int]]]] = {}
            for (path, partition), n in end.items():
                begin = positions.get((path, partition), _partition_base(partition))
                if n > begin:
                    numbers = self.broker.sequence_numbers(path, partition, begin, n)
                    if numbers:
                        read.setdefault(path, {})[str(partition)] = _runs(numbers)
            if read:
                offset["read"] = read
        return offset

    def _within_bytes(self, low: dict[Key, int], take: dict[Key, int], budget: int) -> dict[Key, int]:
        """Cut ``take`` so the admitted messages' sizes (as stored, peeked on the driver) total at most
        ``budget``, one message from each partition in turn; at least one message when any is waiting."""
        pages = {key: self.broker.peek_pages(key[0], key[1], low[key], low[key] + n, page=100)
                 for key, n in take.items() if n > 0}
        waiting: dict[Key, list[bytes]] = {key: [] for key in pages}
        admitted = dict.fromkeys(take, 0)
        used = 0
        active = list(pages)
        while active:
            for key in list(active):
                if not waiting[key]:
                    page = next(pages[key], None)
                    if page is None:  # every message of the span admitted
                        admitted[key] = take[key]
                        active.remove(key)
                        continue
                    waiting[key] = page[::-1]
                payload = waiting[key][-1]
                if used + len(payload) > budget and used > 0:
                    return admitted
                waiting[key].pop()
                used += len(payload)
                admitted[key] = sequence_number(payload) + 1 - low[key]
        return admitted

    def reportLatestOffset(self) -> Offset | None:
        if not self._bounds:
            return None
        return self._offset({(path, b.partition): b.next for path, bounds in self._bounds.items() for b in bounds})

    def partitions(self, start: Offset, end: Offset) -> list[SequenceRange]:
        begin, finish = self._positions(start), self._positions(end)
        read = end.get("read") if self.options.consume else None
        planned = read if isinstance(read, dict) else None

        def numbers(path: str, p: int) -> tuple[tuple[int, int], ...] | None:
            if planned is None:
                return None
            runs = planned.get(path, {}).get(str(p), [])
            return tuple((int(low), int(high)) for low, high in runs)

        return [SequenceRange(p, begin.get((path, p), _partition_base(p)), n, path, numbers(path, p))
                for (path, p), n in sorted(finish.items()) if n > begin.get((path, p), _partition_base(p))]

    def read(self, partition: InputPartition) -> Batches:
        assert isinstance(partition, SequenceRange)
        return _read(self.broker, self.options, self.columns, partition)

    def commit(self, end: Offset) -> None:
        if self.options.consume:
            self._complete_read(end)

    def stop(self) -> None:
        self.broker.close()

    def _complete_read(self, offset: Offset) -> None:
        """Remove exactly the messages the batch ending at ``offset`` read (its ``read`` entry), once."""
        read = offset.get("read")
        if not isinstance(read, dict) or read == self._removed:
            return
        for path, parts in read.items():
            for partition, runs in parts.items():
                numbers = [n for low, high in runs for n in range(int(low), int(high) + 1)]
                self.broker.complete_numbers(path, int(partition), numbers)
        self._removed = read


def _share(low: dict[Key, int], high: dict[Key, int], budget: int | None) -> dict[Key, int]:
    """How many sequence numbers to admit from each partition: all of them, or ``budget`` shared evenly
    in sequence-number spans (which never undercount messages)."""
    if budget is None:
        return {key: high[key] - low[key] for key in low}
    take = dict.fromkeys(low, 0)
    remaining = budget
    while remaining > 0:
        active = [key for key in low if take[key] < high[key] - low[key]]
        if not active:
            break
        share = max(1, remaining // len(active))
        for key in active:
            step = min(share, high[key] - low[key] - take[key], remaining)
            take[key] += step
            remaining -= step
            if remaining == 0:
                break
    return take


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


def send_rows(options: SinkOptions, iterator: Iterator[Any]) -> int:  # pyspark Rows
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
                if verbatim.is_verbatim(values):  # a stored message as it is (replicate): not decoded
                    payload = verbatim.verbatim_message(values, options.source_entity)
                else:
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

    def write(self, iterator: Iterator[Row]) -> Written:
        return Written(send_rows(self.options, iterator))


class StreamWriter(DataSourceStreamWriter):
    """At least once per micro-batch (a replayed batch is sent again): exactly once into a target with
    duplicate detection, since MessageIds are kept or derived deterministically."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_sink(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Written:
        return Written(send_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
