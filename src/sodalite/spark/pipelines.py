"""Pipelines on the ``sodalite`` data source, each a function returning the running StreamingQuery.

* :func:`export`: an entity (or its dead-letter queue) to Parquet or any Spark file format,
  partitioned by the enqueued date; browse, or consume what was exported.
* :func:`replicate`: entities of namespace A to namespace B (queue to the queue of the same name,
  subscription ``t/subscriptions/s`` to topic ``t``), each message sent as its sender encoded it
  (``amqpMessage``), so MessageIds, sessions and typed properties are kept; optionally consuming.
* :func:`syphon`: the backlog queues of a secondary namespace into their ``x-ms-path`` entities in the
  primary, restored as the paired client restores them (:mod:`sodalite.spark.syphon`), consuming.
* :func:`redrive`: a dead-letter queue's messages that match a Spark SQL filter back to their entity
  (or to another), with the broker's move operation (:mod:`sodalite.spark.redrive`); a batch job.

:func:`progress` summarises a query's progress: messages moved, rate and lag per partition.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from sodalite.errors import ConfigurationError
from sodalite.spark import register


def _source(spark: SparkSession, conn: str, entity: str, *, dead_letter: bool, consume: bool,
            max_messages_per_trigger: int | None, starting_position: str, schema: str | None = None) -> DataFrame:
    """The streaming source; ``schema`` names the only columns a pipeline reads, so nothing else is decoded."""
    register(spark)
    reader = spark.readStream.format("sodalite")
    if schema is not None:
        reader = reader.schema(schema)
    reader = (reader.option("connectionString", conn).option("entity", entity)
              .option("consume", "complete" if consume else "none").option("startingPosition", starting_position))
    if dead_letter:
        reader = reader.option("subQueue", "deadletter")
    if max_messages_per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", str(max_messages_per_trigger))
    return reader.load()


def _trigger(writer: DataStreamWriter, available_now: bool, processing_time: str) -> StreamingQuery:
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=processing_time).start()


def export(spark: SparkSession, connection_string: str, entity: str, path: str, checkpoint: str, *,
           dead_letter: bool = False, consume: bool = False, file_format: str = "parquet",
           max_messages_per_trigger: int | None = 10_000, available_now: bool = False,
           processing_time: str = "10 seconds", starting_position: str = "earliest") -> StreamingQuery:
    """Write ``entity``'s messages under ``path`` as ``file_format``, partitioned by ``date`` (the UTC
    day each was enqueued). Spark's file sink writes each batch once, so a restart from
    ``checkpoint`` writes every message exactly once."""
    df = _source(spark, connection_string, entity, dead_letter=dead_letter, consume=consume,
                 max_messages_per_trigger=max_messages_per_trigger, starting_position=starting_position)
    df = df.withColumn("date", F.to_date(F.to_utc_timestamp(F.col("enqueuedTime"),
                                                            spark.conf.get("spark.sql.session.timeZone") or "UTC")))
    writer = (df.writeStream.format(file_format).option("path", path).option("checkpointLocation", checkpoint)
              .partitionBy("date").queryName(f"sodalite-export-{entity}".replace("/", "-")))
    return _trigger(writer, available_now, processing_time)


def replication_target(entity: str) -> str:
    """Where replicate sends an entity's messages: a queue to itself, a subscription to its topic."""
    parts = entity.split("/")
    if len(parts) == 3 and parts[1].lower() == "subscriptions":
        return parts[0]
    if len(parts) != 1 or not entity:
        raise ConfigurationError(f"replicate: '{entity}' is neither a queue nor topic/subscriptions/name")
    return entity


def replicate(spark: SparkSession, source_connection_string: str, target_connection_string: str,
              entities: Sequence[str], checkpoint: str, *, consume: bool = False,
              max_messages_per_trigger: int | None = 10_000, available_now: bool = False,
              processing_time: str = "10 seconds", starting_position: str = "earliest") -> StreamingQuery:
    """Copy (or, with ``consume``, move) every message of ``entities`` from namespace A to B.

    Each message goes as its sender encoded it, MessageId included, in sequence order per partition
    (so per session); the sink is at-least-once, so a target with duplicate detection makes a
    replay after a crash harmless."""
    if not entities:
        raise ConfigurationError("replicate: name at least one entity")
    frames = []
    for entity in entities:
        df = _source(spark, source_connection_string, entity, dead_letter=False, consume=consume,
                     max_messages_per_trigger=max_messages_per_trigger, starting_position=starting_position,
                     schema="amqpMessage binary, sequenceNumber long, partition int")
        frames.append(df.select("amqpMessage", "sequenceNumber", "partition",
                                F.lit(replication_target(entity)).alias("entity")))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    writer = (union.writeStream.format("sodalite").option("connectionString", target_connection_string)
              .option("sourceEntity", ",".join(entities)).option("checkpointLocation", checkpoint)
              .queryName("sodalite-replicate"))
    return _trigger(writer, available_now, processing_time)


def syphon(spark: SparkSession, primary_connection_string: str, secondary_connection_string: str,
           backlog_queues: Sequence[str], checkpoint: str, *, max_messages_per_trigger: int | None = 10_000,
           available_now: bool = False, processing_time: str = "10 seconds") -> StreamingQuery:
    """Drain ``backlog_queues`` of the secondary into the primary, each message to its ``x-ms-path``.

    Each message gets back its SessionId, scheduled time and remaining time-to-live; pings and messages
    whose time-to-live ran out are removed without being sent; a message that is not a backlog message
    fails the query, naming it. The sink is at-least-once: give the primary's entities duplicate
    detection (MessageIds are kept) and a replay after a crash is harmless."""
    from sodalite.spark.syphon import restore_row

    if not backlog_queues:
        raise ConfigurationError("syphon: name at least one backlog queue")
    restore = F.udf(restore_row, returnType="struct<amqpMessage:binary,entity:string>")
    frames = []
    for queue in backlog_queues:
        df = _source(spark, secondary_connection_string, queue, dead_letter=False, consume=True,
                     max_messages_per_trigger=max_messages_per_trigger, starting_position="earliest",
                     schema="amqpMessage binary, enqueuedTime timestamp, sequenceNumber long, partition int")
        frames.append(df.select(restore("amqpMessage", F.unix_millis("enqueuedTime")).alias("restored"),
                                "sequenceNumber", "partition"))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    routed = union.where("restored IS NOT NULL").select("restored.amqpMessage", "restored.entity",
                                                         "sequenceNumber", "partition")
    writer = (routed.writeStream.format("sodalite").option("connectionString", primary_connection_string)
              .option("sourceEntity", "syphon").option("checkpointLocation", checkpoint)
              .queryName("sodalite-syphon"))
    return _trigger(writer, available_now, processing_time)


@dataclass(frozen=True, slots=True)
class Redriven:
    selected: int  # sequence numbers sent to the broker's move operation
    moved: int
    skipped: int  # locked by a receiver, or gone meanwhile


def redrive(spark: SparkSession, connection_string: str, entity: str, api_url: str, *,
            condition: str | None = None, target: str | None = None, ca_file: str | None = None) -> Redriven:
    """Move the dead-lettered messages of ``entity`` that match ``condition`` (Spark SQL over the schema's
    columns, e.g. ``deadLetterReason = 'MaxDeliveryCountExceeded'``; None for all) to ``target`` (None:
    back to ``entity``). Spark picks the sequence numbers from a batch read of the dead-letter queue; the
    broker moves them, each once, delivery count reset; a message that is gone by then is skipped."""
    from sodalite.spark.redrive import MoveApi, move_rows

    api = MoveApi.of(api_url, connection_string, ca_file)
    register(spark)
    df = (spark.read.format("sodalite").option("connectionString", connection_string).option("entity", entity)
          .option("subQueue", "deadletter").load())
    if condition:
        df = df.where(condition)
    chosen = df.select("sequenceNumber")
    outcomes = chosen.rdd.mapPartitions(lambda rows: move_rows(api, entity, target, rows)).collect()
    return Redriven(sum(o[0] for o in outcomes), sum(o[1] for o in outcomes), sum(o[2] for o in outcomes))


@dataclass(frozen=True, slots=True)
class Progress:
    moved: int  # messages read by the batches seen so far
    rate: float  # messages per second in the last batch
    lag: dict[str, int]  # "<entity>#<partition>" -> sequence numbers still to read (an upper bound on messages)


def progress(query: StreamingQuery, seen: dict[int, int]) -> Progress:
    """The query's progress; ``seen`` (batch id -> rows) accumulates across calls."""
    for p in query.recentProgress:
        seen[int(p["batchId"])] = int(p["numInputRows"])
    last = query.lastProgress
    lag: dict[str, int] = {}
    rate = 0.0
    if last:
        rate = float(last.get("processedRowsPerSecond") or 0.0)
        for source in last.get("sources", []):
            latest, end = _offset(source.get("latestOffset")), _offset(source.get("endOffset"))
            if latest is None or end is None:
                continue
            for entity, partitions in _by_entity(latest).items():
                ends = _by_entity(end).get(entity, {})
                for partition, number in partitions.items():
                    lag[f"{entity}#{partition}"] = max(0, int(number) - int(ends.get(partition, number)))
    return Progress(sum(seen.values()), rate, lag)


def _by_entity(offset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An offset's partitions per entity: one entity (option 'entity') or several ('entities')."""
    if isinstance(offset.get("entities"), dict):
        return {str(e): p for e, p in offset["entities"].items() if isinstance(p, dict)}
    partitions = offset.get("partitions")
    return {str(offset.get("entity")): partitions} if isinstance(partitions, dict) else {}


def _offset(text: Any) -> dict[str, Any] | None:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
