"""The `sodalite` data source's admission by bytes, several entities in one source, and a narrower schema,
with real PySpark (local[2], one session for the module) against one `sodalite serve` broker.

Messages are sent with the official SDK; each test uses queues of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402

pytestmark = pytest.mark.interop

QUEUES = [{"Name": name, "Properties": properties} for name, properties in [
    ("eb-bytes", {"EnablePartitioning": True}), ("eb-both", {}),
    ("eb-orders", {"EnablePartitioning": True}), ("eb-invoices", {}), ("eb-other", {}),
    ("eb-narrow", {}),
]]
BODY = 1000  # bytes of each message's body; as stored (with properties and annotations) each is larger


@pytest.fixture(scope="module")
def eb_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("eb-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def send(broker: BrokerProcess, queue: str, ids: list[str], size: int = BODY) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(i.encode().ljust(size, b"."), message_id=i,
                                                    partition_key=f"k{n % 4}") for n, i in enumerate(ids)])


def source(spark: SparkSession, broker: BrokerProcess, stream: bool = False, schema: str | None = None,
           **options: Any) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("sodalite").option("connectionString", broker.connection_string)
    if schema:
        r = r.schema(schema)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    return query


def batches(query: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"] > 0]


def error_text(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def test_max_bytes_per_trigger_caps_each_batch(spark: SparkSession, eb_broker: BrokerProcess,
                                               tmp_path: Path) -> None:
    ids = [f"b{i}" for i in range(24)]
    send(eb_broker, "eb-bytes", ids)
    df = source(spark, eb_broker, stream=True, entity="eb-bytes", maxBytesPerTrigger=3 * BODY + 500)
    query = available_now(df.select("messageId"), tmp_path / "out", tmp_path / "c")
    sizes = batches(query)
    # each message is over BODY bytes as stored, so no batch holds more than three, and none is empty
    assert len(sizes) >= 8 and all(1 <= n <= 3 for n in sizes), sizes
    got = [r["messageId"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(got) == sorted(ids)  # every message, once

    # a message larger than the whole budget still goes, alone: the stream never stalls
    send(eb_broker, "eb-bytes", ["big"], size=20 * BODY)
    query = available_now(df.select("messageId"), tmp_path / "out", tmp_path / "c")
    assert batches(query) == [1]


def test_whichever_limit_is_hit_first(spark: SparkSession, eb_broker: BrokerProcess, tmp_path: Path) -> None:
    send(eb_broker, "eb-both", [f"w{i}" for i in range(12)])
    rows_first = source(spark, eb_broker, stream=True, entity="eb-both", maxMessagesPerTrigger=2,
                        maxBytesPerTrigger=1_000_000)
    assert set(batches(available_now(rows_first.select("messageId"), tmp_path / "o1", tmp_path / "c1"))) == {2}
    bytes_first = source(spark, eb_broker, stream=True, entity="eb-both", maxMessagesPerTrigger=10,
                         maxBytesPerTrigger=2 * BODY + 500)
    sizes = batches(available_now(bytes_first.select("messageId"), tmp_path / "o2", tmp_path / "c2"))
    assert sum(sizes) == 12 and max(sizes) <= 2, sizes


def test_several_entities_in_one_source(spark: SparkSession, eb_broker: BrokerProcess, tmp_path: Path) -> None:
    send(eb_broker, "eb-orders", [f"o{i}" for i in range(9)])
    send(eb_broker, "eb-invoices", [f"i{i}" for i in range(4)])

    browsed = source(spark, eb_broker, entities="eb-orders, eb-invoices").select("sourceEntity", "messageId").collect()
    assert sorted((r["sourceEntity"], r["messageId"]) for r in browsed) == sorted(
        [("eb-orders", f"o{i}") for i in range(9)] + [("eb-invoices", f"i{i}") for i in range(4)])

    out, checkpoint = tmp_path / "out", tmp_path / "c"
    df = source(spark, eb_broker, stream=True, entities="eb-orders,eb-invoices", maxMessagesPerTrigger=5)
    query = available_now(df.select("sourceEntity", "messageId", "partition"), out, checkpoint)
    assert len(batches(query)) >= 3 and max(batches(query)) <= 5  # one limit across both entities
    offset = json.loads(query.recentProgress[-1]["sources"][0]["endOffset"])
    assert set(offset["entities"]) == {"eb-orders", "eb-invoices"}  # offsets per entity and partition
    assert len(offset["entities"]["eb-orders"]) > 1 and list(offset["entities"]["eb-invoices"]) == ["0"]
    assert len(spark.read.parquet(str(out)).collect()) == 13

    send(eb_broker, "eb-invoices", ["late"])
    available_now(df.select("sourceEntity", "messageId", "partition"), out, checkpoint)
    rows = [(r["sourceEntity"], r["messageId"]) for r in spark.read.parquet(str(out)).collect()]
    assert len(rows) == 14 and rows.count(("eb-invoices", "late")) == 1  # the restart read only what was new

    text = error_text(lambda: available_now(
        source(spark, eb_broker, stream=True, entities="eb-orders,eb-other").select(
            "sourceEntity", "messageId", "partition"), out, checkpoint))
    assert "checkpoint holds offsets of entities" in text and "eb-other" in text


def test_a_narrower_schema_reads_only_its_columns(spark: SparkSession, eb_broker: BrokerProcess) -> None:
    send(eb_broker, "eb-narrow", ["n0", "n1"])
    rows = source(spark, eb_broker, schema="sequenceNumber long, body binary", entity="eb-narrow").collect()
    assert [r["body"][:2] for r in sorted(rows, key=lambda r: r["sequenceNumber"])] == [b"n0", b"n1"]
    assert list(rows[0].asDict()) == ["sequenceNumber", "body"]
    text = error_text(lambda: source(spark, eb_broker, schema="body binary, color string", entity="eb-narrow")
                      .collect())
    assert "'color' is not a column" in text
    text = error_text(lambda: source(spark, eb_broker, schema="body string", entity="eb-narrow").collect())
    assert "column 'body' is binary" in text


def test_bad_admission_and_entity_options(spark: SparkSession, eb_broker: BrokerProcess) -> None:
    for value in ("0", "-5", "lots"):
        text = error_text(lambda v=value: source(spark, eb_broker, stream=True, entity="eb-narrow",  # type: ignore[misc]
                                                 maxBytesPerTrigger=v).writeStream.format("memory")
                          .queryName(f"bad_{abs(hash(v))}").start().awaitTermination(30))
        assert "option 'maxBytesPerTrigger'" in text and "positive integer" in text
    text = error_text(lambda: source(spark, eb_broker, entity="eb-narrow", entities="eb-orders").collect())
    assert "'entity' and 'entities' exclude each other" in text
    text = error_text(lambda: source(spark, eb_broker, entities="eb-orders,,eb-invoices").collect())
    assert "option 'entities'" in text
    text = error_text(lambda: source(spark, eb_broker, entities="eb-orders,eb-missing").collect())
    assert "'eb-missing' does not exist" in text
    text = error_text(lambda: source(spark, eb_broker, stream=True, entities="eb-orders,eb-invoices",
                                     startingPosition='{"eb-nope": "latest"}').writeStream.format("memory")
                      .queryName("bad_start").start().awaitTermination(30))
    assert "option 'startingPosition'" in text and "eb-nope" in text
