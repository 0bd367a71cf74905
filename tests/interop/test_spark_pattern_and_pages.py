"""The `sodalite` data source with real PySpark (local[2], the module unit's session): `entityPattern` (a
regular expression over queue and subscription names, followed by a streaming query as entities come),
and a broker without pyarrow, whose rows the reader peeks and decodes itself: the same rows Spark reads
from a broker that serves columnar pages.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402

from sodalite.model import sas  # noqa: E402

pytestmark = pytest.mark.interop

QUEUES = [{"Name": name, "Properties": {"EnablePartitioning": name == "ep-orders-2"}}
          for name in ("ep-orders-1", "ep-orders-2", "ep-other", "ep-fallback")]
TOPICS = [{"Name": "ep-events", "Properties": {}, "Subscriptions": [
    {"Name": "audit", "Properties": {}, "Rules": []}, {"Name": "billing", "Properties": {}, "Rules": []}]}]
RULES = [{"KeyName": KEY_NAME, "PrimaryKey": KEY},
         {"KeyName": "listener", "PrimaryKey": "listen-key", "Rights": ["Listen"]}]


@pytest.fixture(scope="module")
def ep_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("ep-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS,
                                                         AuthorizationRules=RULES)).start()
    yield process
    process.stop()


def send(broker: BrokerProcess, entity: str, count: int, topic: bool = False, first: int = 0) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        sender = sb.get_topic_sender(entity) if topic else sb.get_queue_sender(entity)
        with sender:
            sender.send_messages([ServiceBusMessage(f"{entity}-{i}", message_id=f"{entity}-{i}",
                                                    partition_key=f"k{i}") for i in range(first, first + count)])


def source(spark: SparkSession, conn: str, stream: bool = False, **options: Any) -> Any:
    reader = spark.readStream if stream else spark.read
    reader = reader.format("sodalite").option("connectionString", conn)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def error_text(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def create_queue(broker: BrokerProcess, name: str) -> None:
    base = f"http://localhost:{broker.port}"
    token = sas.generate_token(base, KEY_NAME, KEY, int(time.time()) + 600)
    request = urllib.request.Request(f"{base}/api/v1/entities", data=json.dumps({"kind": "queue", "path": name})
                                     .encode(), method="POST", headers={"Authorization": "Bearer " + token,
                                                                         "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201


def test_entity_pattern_reads_the_queues_and_subscriptions_it_matches(spark: SparkSession, ep_broker: BrokerProcess,
                                                                      tmp_path: Path) -> None:
    conn = ep_broker.connection_string
    send(ep_broker, "ep-orders-1", 3)
    send(ep_broker, "ep-orders-2", 5)
    send(ep_broker, "ep-other", 2)
    send(ep_broker, "ep-events", 4, topic=True)  # a copy in each subscription
    # Matched as a whole and ignoring case, as entity names are: "ep-orders-1x" would not match "ep-orders-1".
    rows = source(spark, conn, entityPattern="EP-ORDERS-\\d|ep-events/subscriptions/aud.*") \
        .select("sourceEntity", "messageId").collect()
    by_entity: dict[str, int] = {}
    for row in rows:
        by_entity[row.sourceEntity] = by_entity.get(row.sourceEntity, 0) + 1
    assert by_entity == {"ep-orders-1": 3, "ep-orders-2": 5, "ep-events/subscriptions/audit": 4}

    # Streaming: the pattern is followed from trigger to trigger; a queue created later is read from its
    # first message, and a restart from the checkpoint reads nothing twice.
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (source(spark, conn, stream=True, entityPattern="ep-orders-.*").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "the available-now run should end"
        assert query.exception() is None, str(query.exception())

    run()
    assert spark.read.parquet(str(out)).count() == 8
    create_queue(ep_broker, "ep-orders-3")
    send(ep_broker, "ep-orders-3", 6)
    send(ep_broker, "ep-orders-1", 1, first=3)
    run()
    written = spark.read.parquet(str(out)).select("sourceEntity", "messageId").collect()
    assert len(written) == 15 and len({r.messageId for r in written}) == 15
    assert sum(1 for r in written if r.sourceEntity == "ep-orders-3") == 6


def test_entity_pattern_bad_input_gets_clear_errors(spark: SparkSession, ep_broker: BrokerProcess) -> None:
    conn = ep_broker.connection_string
    assert "is not a regular expression" in error_text(lambda: source(spark, conn, entityPattern="ep-(").collect())
    assert "matches no queue or subscription" in error_text(
        lambda: source(spark, conn, entityPattern="nothing-.*").collect())
    assert "exclude each other" in error_text(
        lambda: source(spark, conn, entity="ep-other", entityPattern="ep-.*").collect())
    listener = ep_broker.connection_string_with("listen-key", "listener")
    assert "needs a key with the Manage right" in error_text(
        lambda: source(spark, listener, entityPattern="ep-.*").collect())


def test_a_broker_without_pyarrow_gives_spark_the_same_rows(spark: SparkSession, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES, Topics=TOPICS))
    process.start()
    try:
        with ServiceBusClient.from_connection_string(process.connection_string) as sb:
            with sb.get_queue_sender("ep-fallback") as sender:
                sender.send_messages([ServiceBusMessage(f"body {i}", message_id=f"f{i}", correlation_id=f"c{i}",
                                                        application_properties={"n": i, "odd": i % 2 == 1})
                                      for i in range(30)])

        def read() -> list[Any]:
            return source(spark, process.connection_string, entity="ep-fallback").orderBy("sequenceNumber").collect()

        served = read()
        process.stop()
        blocker = tmp_path / "no-pyarrow" / "pyarrow"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text('raise ImportError("pyarrow is hidden from this broker")\n')
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(blocker.parent), os.environ.get("PYTHONPATH", "")) if p))
        process.start()
        decoded = read()
        assert len(served) == 30
        assert [r.asDict() for r in decoded] == [r.asDict() for r in served]
    finally:
        process.stop()
