"""The `sodalite` PySpark data source with real PySpark on a real JVM (local[2]) against a `sodalite serve` broker.

One Spark session and one broker for the module (a session costs seconds to start); each test uses
entities of its own. Messages are sent and checked with the official SDK.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.types import BinaryType, StringType, StructField, StructType  # noqa: E402

pytestmark = pytest.mark.interop

DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}
QUEUES = [{"Name": name, "Properties": properties} for name, properties in [
    ("sp-browse", {}), ("sp-copy-src", {}), ("sp-copy-dst", {}), ("sp-write", {}),
    ("sp-route-default", {}), ("sp-route-a", {}), ("sp-route-b", {}),
    ("sp-an", {"EnablePartitioning": True}), ("sp-pt", {}),
    ("sp-consume", {"EnablePartitioning": True}), ("sp-dlq", {}),
    ("sp-bad", {}), ("sp-bad-other", {}), ("sp-dedup", DEDUP), ("sp-replay", {}),
]]


@pytest.fixture(scope="module")
def sp_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("spark-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def send(broker: BrokerProcess, queue: str, messages: list[ServiceBusMessage]) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_sender(queue) as sender:
            sender.send_messages(messages)


def plain(broker: BrokerProcess, queue: str, count: int, prefix: str = "m") -> None:
    send(broker, queue, [ServiceBusMessage(f"{prefix}{i}", message_id=f"{prefix}{i}") for i in range(count)])


def peek_all(broker: BrokerProcess, queue: str, sub_queue: Any = None) -> list[Any]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue, sub_queue=sub_queue) as receiver:
            found: list[Any] = []
            while True:
                page = receiver.peek_messages(max_message_count=250, sequence_number=(
                    found[-1].sequence_number + 1 if found else 0))
                if not page:
                    return found
                found += page


def receive_all(broker: BrokerProcess, queue: str, expected: int) -> list[Any]:
    got: list[Any] = []
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue, max_wait_time=5) as receiver:
            while len(got) < expected:
                batch = receiver.receive_messages(max_message_count=100, max_wait_time=5)
                if not batch:
                    break
                for m in batch:
                    receiver.complete_message(m)
                got += batch
    return got


def reader(spark: SparkSession, broker: BrokerProcess, entity: str, stream: bool = False, **options: Any) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("sodalite").option("connectionString", broker.connection_string).option("entity", entity)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


# ---- batch ----------------------------------------------------------------------------------------


def test_batch_read_browses_every_column(spark: SparkSession, sp_broker: BrokerProcess) -> None:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    send(sp_broker, "sp-browse", [
        ServiceBusMessage(b"\x00\x01binary", message_id="b-1", session_id=None, correlation_id="c-1", subject="s",
                          content_type="application/octet-stream", to="somewhere", reply_to="r",
                          time_to_live=datetime.timedelta(minutes=5),
                          application_properties={"colour": "red", "size": 3, "ok": True}),
        ServiceBusMessage("text", message_id="b-2", partition_key="pk"),
    ])
    with ServiceBusClient.from_connection_string(sp_broker.connection_string) as sb:
        with sb.get_queue_sender("sp-browse") as sender:
            sender.schedule_messages(ServiceBusMessage("later", message_id="b-3"), when)
    df = reader(spark, sp_broker, "sp-browse")
    assert df.columns[-1] == "amqpMessage" and df.columns[0] == "body"
    got = {r["messageId"]: r for r in df.collect()}
    assert set(got) == {"b-1", "b-2", "b-3"}
    first = got["b-1"]
    assert bytes(first["body"]) == b"\x00\x01binary"
    assert (first["correlationId"], first["subject"], first["contentType"], first["to"], first["replyTo"]) == (
        "c-1", "s", "application/octet-stream", "somewhere", "r")
    assert first["timeToLive"] == 300_000
    assert first["applicationProperties"] == {"colour": "red", "size": "3", "ok": "true"}
    assert first["state"] == "active" and first["deliveryCount"] == 0 and first["partition"] == 0
    assert first["enqueuedTime"] is not None and first["sequenceNumber"] > 0
    assert bytes(got["b-2"]["body"]) == b"text" and got["b-2"]["partitionKey"] == "pk"
    assert got["b-3"]["state"] == "scheduled" and got["b-3"]["scheduledEnqueueTime"] is not None
    assert len(peek_all(sp_broker, "sp-browse")) == 3  # browsing removed nothing


def test_batch_write_and_faithful_copy(spark: SparkSession, sp_broker: BrokerProcess) -> None:
    send(sp_broker, "sp-copy-src", [ServiceBusMessage("one", message_id="c-1", subject="subj",
                                                      application_properties={"n": 3, "s": "x"})])
    reader(spark, sp_broker, "sp-copy-src").write.format("sodalite") \
        .option("connectionString", sp_broker.connection_string).option("entity", "sp-copy-dst") \
        .mode("append").save()
    [copy] = receive_all(sp_broker, "sp-copy-dst", 1)
    assert copy.message_id == "c-1" and copy.subject == "subj" and str(copy) == "one"
    assert copy.application_properties == {b"n": 3, b"s": b"x"}  # the integer stays an integer

    schema = StructType([StructField("body", StringType()), StructField("messageId", StringType()),
                         StructField("subject", StringType())])
    rows = [("hello", "w-1", None), ("world", None, "greeting")]
    spark.createDataFrame(rows, schema).write.format("sodalite") \
        .option("connectionString", sp_broker.connection_string).option("entity", "sp-write").mode("append").save()
    got = {str(m): m for m in receive_all(sp_broker, "sp-write", 2)}
    assert set(got) == {"hello", "world"}
    assert got["hello"].message_id == "w-1"
    assert got["world"].subject == "greeting" and got["world"].message_id  # one was made up


def test_entity_column_routes_each_row(spark: SparkSession, sp_broker: BrokerProcess) -> None:
    schema = StructType([StructField("body", BinaryType()), StructField("entity", StringType())])
    df = spark.createDataFrame([(b"a", "sp-route-a"), (b"b", "sp-route-b"), (b"d", None)], schema)
    df.write.format("sodalite").option("connectionString", sp_broker.connection_string) \
        .option("entity", "sp-route-default").mode("append").save()
    assert [str(m) for m in receive_all(sp_broker, "sp-route-a", 1)] == ["a"]
    assert [str(m) for m in receive_all(sp_broker, "sp-route-b", 1)] == ["b"]
    assert [str(m) for m in receive_all(sp_broker, "sp-route-default", 1)] == ["d"]


def test_dead_letter_sub_queue(spark: SparkSession, sp_broker: BrokerProcess) -> None:
    plain(sp_broker, "sp-dlq", 3, "d")
    with ServiceBusClient.from_connection_string(sp_broker.connection_string) as sb:
        with sb.get_queue_receiver("sp-dlq", max_wait_time=10) as receiver:
            for m in receiver.receive_messages(max_message_count=2, max_wait_time=10):
                receiver.dead_letter_message(m, reason="MaxDeliveryCountExceeded", error_description="too many")
    got = reader(spark, sp_broker, "sp-dlq", subQueue="deadletter").collect()
    assert len(got) == 2
    assert {r["deadLetterReason"] for r in got} == {"MaxDeliveryCountExceeded"}
    assert {r["deadLetterErrorDescription"] for r in got} == {"too many"}
    assert len(reader(spark, sp_broker, "sp-dlq").collect()) == 1


# ---- streaming ------------------------------------------------------------------------------------


def test_streaming_available_now_with_a_limit_then_resume(spark: SparkSession, sp_broker: BrokerProcess,
                                                          tmp_path: Path) -> None:
    send(sp_broker, "sp-an", [ServiceBusMessage(f"m{i}", message_id=f"m{i}", partition_key=f"k{i % 5}")
                              for i in range(60)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        df = reader(spark, sp_broker, "sp-an", stream=True, maxMessagesPerTrigger=25)
        query = (df.select("messageId", "body", "partition", "sequenceNumber").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        return query

    query = run()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3 and all(p["numInputRows"] <= 25 for p in batches)  # the limit held
    ids = [r["messageId"] for r in spark.read.parquet(str(out)).collect()]
    assert sorted(ids) == sorted(f"m{i}" for i in range(60))  # every message, once
    latest = batches[-1]["sources"][0]["latestOffset"]
    assert '"entity"' in latest  # reportLatestOffset: per-partition lag is visible in the progress
    assert len(peek_all(sp_broker, "sp-an")) == 60  # browse: nothing removed

    send(sp_broker, "sp-an", [ServiceBusMessage("late", message_id="late")])
    run()
    ids = [r["messageId"] for r in spark.read.parquet(str(out)).collect()]
    assert len(ids) == 61 and ids.count("late") == 1  # the restart read only what was new


def test_streaming_processing_time_sees_new_messages(spark: SparkSession, sp_broker: BrokerProcess,
                                                     tmp_path: Path) -> None:
    plain(sp_broker, "sp-pt", 5, "before")
    df = reader(spark, sp_broker, "sp-pt", stream=True, startingPosition="latest")
    query = (df.writeStream.format("memory").queryName("sp_pt").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(processingTime="1 second").start())
    try:
        wait_for(lambda: query.lastProgress is not None, "the first trigger")
        plain(sp_broker, "sp-pt", 7, "after")
        wait_for(lambda: spark.sql("select count(*) from sp_pt").collect()[0][0] >= 7, "the new messages")
        ids = {r["messageId"] for r in spark.sql("select messageId from sp_pt").collect()}
        assert ids == {f"after{i}" for i in range(7)}  # startingPosition=latest skipped the earlier five
    finally:
        query.stop()


def test_consume_complete_drains_the_source(spark: SparkSession, sp_broker: BrokerProcess, tmp_path: Path) -> None:
    send(sp_broker, "sp-consume", [ServiceBusMessage(f"m{i}", message_id=f"m{i}", partition_key=f"k{i % 7}")
                                   for i in range(80)])
    df = reader(spark, sp_broker, "sp-consume", stream=True, consume="complete", maxMessagesPerTrigger=30)
    query = (df.select("messageId").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    ids = [r["messageId"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(ids) == sorted(f"m{i}" for i in range(80))
    left = peek_all(sp_broker, "sp-consume")
    # Spark commits a batch while planning the next; the run's last batch is completed by the next run.
    assert len(left) <= 30
    query = (df.select("messageId").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert peek_all(sp_broker, "sp-consume") == []  # drained
    assert len(spark.read.parquet(str(tmp_path / "out")).collect()) == 80  # and nothing read twice


def test_streaming_sink_with_derived_message_ids_is_exactly_once_into_dedup(
        spark: SparkSession, sp_broker: BrokerProcess, tmp_path: Path) -> None:
    plain(sp_broker, "sp-replay", 10, "r")
    df = reader(spark, sp_broker, "sp-replay", stream=True).drop("messageId", "amqpMessage")
    for attempt in range(2):  # two checkpoints: the second run replays everything, as a lost checkpoint would
        query = (df.writeStream.format("sodalite").option("connectionString", sp_broker.connection_string)
                 .option("entity", "sp-dedup").option("sourceEntity", "sp-replay")
                 .option("checkpointLocation", str(tmp_path / f"c{attempt}")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
    got = receive_all(sp_broker, "sp-dedup", 20)
    assert len(got) == 10  # the replayed copies carried the same derived MessageIds and were dropped
    assert all(str(m.message_id).startswith("sp-replay:0:") for m in got)


# ---- bad input ------------------------------------------------------------------------------------


def error_text(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def test_bad_input_gets_clear_errors(spark: SparkSession, sp_broker: BrokerProcess, tmp_path: Path) -> None:
    plain(sp_broker, "sp-bad", 3, "x")
    assert "'nope' does not exist" in error_text(lambda: reader(spark, sp_broker, "nope").collect())
    wrong = sp_broker.connection_string.replace("SAS_KEY_VALUE", "wrong")
    text = error_text(lambda: spark.read.format("sodalite").option("connectionString", wrong)
                      .option("entity", "sp-bad").load().collect())
    assert "not authorised" in text
    text = error_text(lambda: reader(spark, sp_broker, "sp-bad", stream=True, startingPosition="{oops")
                      .writeStream.format("memory").queryName("bad1").start().awaitTermination(30))
    assert "startingPosition" in text
    text = error_text(lambda: reader(spark, sp_broker, "sp-bad", consume="sometimes").collect())
    assert "option 'consume'" in text
    text = error_text(lambda: spark.read.format("sodalite").option("entity", "sp-bad").load().collect())
    assert "option 'connectionString' is required" in text

    schema = StructType([StructField("body", BinaryType()), StructField("messageId", StringType())])
    text = error_text(lambda: spark.createDataFrame([(b"ok", "fine"), (None, "no-body")], schema).coalesce(1)
                      .write.format("sodalite").option("connectionString", sp_broker.connection_string)
                      .option("entity", "sp-bad-other").mode("append").save())
    assert "row 1" in text and "no-body" in text and "'body'" in text
    text = error_text(lambda: spark.createDataFrame([(b"x" * 300_000, "huge")], schema)
                      .write.format("sodalite").option("connectionString", sp_broker.connection_string)
                      .option("entity", "sp-bad-other").mode("append").save())
    assert "row 0" in text and "huge" in text and "message-size-exceeded" in text
    assert [str(m) for m in receive_all(sp_broker, "sp-bad-other", 5)] == ["ok"]  # accepted before the bad row

    checkpoint = str(tmp_path / "c")
    out = str(tmp_path / "out")
    first = (reader(spark, sp_broker, "sp-bad", stream=True).select("messageId").writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    first.awaitTermination(120)
    text = error_text(lambda: reader(spark, sp_broker, "sp-bad-other", stream=True).select("messageId")
                      .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                      .trigger(availableNow=True).start().awaitTermination(120))
    assert "checkpoint holds offsets of entity 'sp-bad'" in text
    assert len(peek_all(sp_broker, "sp-bad")) == 3  # nothing lost

