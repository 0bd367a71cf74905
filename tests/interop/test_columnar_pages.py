"""Columnar pages (`com.sodalite:peek-partition-columns`, docs/spark.md): the broker answers a partition's
messages as an Arrow IPC stream of the columns asked for, and the Spark reader hands it on as it is.

Checked against the row path (messages peeked, decoded in the reader by `sodalite.spark.rows`) on the
same stored messages, column for column and row for row; messages of every kind are sent with the
official SDK. A broker started with pyarrow hidden (an import blocker on its PYTHONPATH) answers
not-implemented, and the reader's own code falls back to the row path with the same rows.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageHeader
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from sodalite.amqpclient import AmqpClient

pa = pytest.importorskip("pyarrow")
from sodalite.spark import rows  # noqa: E402
from sodalite.spark.broker import Broker  # noqa: E402

pytestmark = pytest.mark.interop

PAGES = "com.sodalite:peek-partition-columns"
QUEUES = [
    {"Name": "cp-kinds", "Properties": {"LockDuration": "PT5M", "MaxDeliveryCount": 10}},
    {"Name": "cp-sessions", "Properties": {"RequiresSession": True}},
    {"Name": "cp-part", "Properties": {"EnablePartitioning": True}},
    {"Name": "cp-bounds", "Properties": {}},
    {"Name": "cp-hidden", "Properties": {}},
]
RULES = [
    {"KeyName": KEY_NAME, "PrimaryKey": KEY},
    {"KeyName": "sender", "PrimaryKey": "send-key", "Rights": ["Send"]},
    {"KeyName": "listener", "PrimaryKey": "listen-key", "Rights": ["Listen"]},
]
FOUR = ("body", "messageId", "sequenceNumber", "enqueuedTime")
END = 1 << 62


@pytest.fixture(scope="module")
def cp_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("columnar-pages")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES,
                                                         AuthorizationRules=RULES)).start()
    yield process
    process.stop()


def every_kind(sb: ServiceBusClient, queue: str, keep_locked: bool = True) -> None:
    """Messages of every shape a column shows: properties, typed application properties, body kinds,
    header fields, client annotations and delivery annotations, TTL, scheduled, deferred, dead-lettered,
    and one out on a delivery (locked, delivery count 1)."""
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    with sb.get_queue_sender(queue) as sender:
        sender.send_messages([
            ServiceBusMessage(b"\x00\x01binary", message_id="plain", partition_key="pk"),
            ServiceBusMessage("text body", message_id="props", correlation_id="corr", subject="subj",
                              content_type="text/plain", to="dest", reply_to="back", reply_to_session_id="rs",
                              time_to_live=datetime.timedelta(hours=1),
                              application_properties={"int": 3, "float": 1.5, "bool": True, "str": "s", "none": None,
                                                      "when": moment, "bytes": b"\x01\x02", "neg": -7}),
            ServiceBusMessage("no id"),
        ])
        sender.send_messages(AmqpAnnotatedMessage(value_body={"a": [1, 2.5, "x"], "b": None},
                                                  properties={"message_id": "value-body"}))
        sender.send_messages(AmqpAnnotatedMessage(sequence_body=[[1, "two"], [3]]))
        sender.send_messages(AmqpAnnotatedMessage(value_body="a string value"))
        sender.send_messages(AmqpAnnotatedMessage(data_body=[b"first ", b"second"]))
        sender.send_messages(AmqpAnnotatedMessage(
            data_body=b"annotated", header=AmqpMessageHeader(durable=True, priority=7),
            annotations={"x-custom": 7, "x-opt-partition-key": "apk"},
            delivery_annotations={"x-delivery": "kept apart"}, footer={"x-footer": "f"},
            application_properties={"k": "v"}))
        sender.schedule_messages(ServiceBusMessage("later", message_id="scheduled"),
                                 datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1))
        sender.send_messages([ServiceBusMessage("defer me", message_id="deferred"),
                              ServiceBusMessage("dead-letter me", message_id="dead",
                                                application_properties={"reason-kept": 1}),
                              ServiceBusMessage("lock me", message_id="locked")])
    with sb.get_queue_receiver(queue, max_wait_time=10) as receiver:
        taken: dict[str, Any] = {}
        while len(taken) < 3:
            batch = receiver.receive_messages(max_message_count=20, max_wait_time=10)
            assert batch, "the messages to settle should arrive"
            for message in batch:
                if message.message_id in ("deferred", "dead", "locked"):
                    taken[str(message.message_id)] = message
                else:
                    receiver.abandon_message(message)
        receiver.defer_message(taken["deferred"])
        receiver.dead_letter_message(taken["dead"], reason="TooOld", error_description="older than a day")
        if not keep_locked:  # (a restarted broker does not keep the locks of its earlier run)
            receiver.complete_message(taken["locked"])
        # else "locked" stays out on its delivery while the test reads (lock duration 5 minutes)


def row_path(broker: Broker, entity: str, partition: int, names: tuple[str, ...] = rows.COLUMNS) -> Any:
    batches = [rows.peeked_batch(page, names) for page in broker.peek_pages(entity, partition, 0, END)]
    return pa.Table.from_batches(batches, schema=batches[0].schema if batches else None)


def page_path(broker: Broker, entity: str, partition: int, names: tuple[str, ...] = rows.COLUMNS) -> Any:
    pages = broker.column_pages(entity, partition, 0, END, names)
    assert pages is not None, "the broker should serve columnar pages"
    return pa.Table.from_batches(list(pages))


def assert_same(expected: Any, got: Any) -> None:
    assert got.schema.equals(expected.schema), f"{got.schema} != {expected.schema}"
    assert got.num_rows == expected.num_rows
    for index, (want, have) in enumerate(zip(expected.to_pylist(), got.to_pylist(), strict=True)):
        assert have == want, f"row {index} differs: {sorted(k for k in want if want[k] != have[k])}"
    assert got.equals(expected)


def test_pages_equal_the_row_path_row_for_row(cp_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(cp_broker.connection_string) as sb:
        every_kind(sb, "cp-kinds")
        with sb.get_queue_sender("cp-sessions") as sender:
            sender.send_messages([ServiceBusMessage(f"s{i}", session_id=f"session-{i % 2}", message_id=f"s{i}")
                                  for i in range(4)])
        broker = Broker(cp_broker.connection_string)
        try:
            for entity in ("cp-kinds", "cp-kinds/$deadletterqueue", "cp-sessions"):
                expected = row_path(broker, entity, 0)
                assert expected.num_rows > 0
                assert_same(expected, page_path(broker, entity, 0))
                for names in (FOUR, ("amqpMessage", "sequenceNumber", "partition"),
                              ("state", "deadLetterReason", "applicationProperties", "scheduledEnqueueTime",
                               "partitionKey", "deliveryCount", "timeToLive", "sessionId", "deadLetterSource")):
                    assert_same(row_path(broker, entity, 0, names), page_path(broker, entity, 0, names))
            kinds = page_path(broker, "cp-kinds", 0).to_pylist()
            by_id = {row["messageId"]: row for row in kinds}
            # What the columns show, beside being the row path's: the kinds really are there.
            assert by_id["props"]["applicationProperties"] == [
                ("int", "3"), ("float", "1.5"), ("bool", "true"), ("str", "s"), ("none", None),
                ("when", '"2026-01-02T03:04:05+00:00"'), ("bytes", "\x01\x02"), ("neg", "-7")]
            assert by_id["plain"]["partitionKey"] == "pk" and by_id["plain"]["body"] == b"\x00\x01binary"
            assert by_id["plain"]["deliveryCount"] == 1  # abandoned once
            assert by_id["locked"]["deliveryCount"] == 0  # out on its first delivery: earlier deliveries, as peek
            assert by_id["scheduled"]["state"] == "scheduled" and by_id["scheduled"]["scheduledEnqueueTime"]
            assert by_id["deferred"]["state"] == "deferred"
            assert {row["messageId"] for row in kinds} >= {"value-body", "plain", "props"}
            dead = page_path(broker, "cp-kinds/$deadletterqueue", 0).to_pylist()
            assert [(d["deadLetterReason"], d["deadLetterErrorDescription"]) for d in dead] == [
                ("TooOld", "older than a day")]
        finally:
            broker.close()


def test_pages_of_a_partitioned_entity_match_and_only_hold_their_partition(cp_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(cp_broker.connection_string) as sb:
        with sb.get_queue_sender("cp-part") as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}", message_id=f"p{i}", partition_key=f"k{i}")
                                  for i in range(40)])
    broker = Broker(cp_broker.connection_string)
    try:
        seen = 0
        for bounds in broker.bounds("cp-part"):
            got = page_path(broker, "cp-part", bounds.partition)
            assert_same(row_path(broker, "cp-part", bounds.partition), got)
            assert set(got.column("partition").to_pylist()) <= {bounds.partition}
            seen += got.num_rows
        assert seen == 40
    finally:
        broker.close()


def request(broker: BrokerProcess, body: dict[str, Any], key_name: str = KEY_NAME, key: str = KEY,
            entity: str = "cp-bounds") -> Any:
    with AmqpClient("localhost", broker.port, key_name, key, timeout=30) as client:
        return client.management(entity, PAGES, body)


def test_a_page_is_bounded_by_rows_bytes_and_the_end_asked_for(cp_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(cp_broker.connection_string) as sb:
        with sb.get_queue_sender("cp-bounds") as sender:
            sender.send_messages([ServiceBusMessage(b"x" * 1000, message_id=f"b{i}") for i in range(10)])
    first = Broker(cp_broker.connection_string).bounds("cp-bounds")[0].first
    assert first is not None

    def page(**fields: Any) -> tuple[list[int], int]:
        reply = request(cp_broker, {"partition": 0, "from-sequence-number": first, "columns": ["sequenceNumber"],
                                    **fields})
        assert reply.status == 200, reply
        table = pa.ipc.open_stream(reply.body["page"]).read_all()
        numbers = table.column("sequenceNumber").to_pylist()
        assert reply.body["count"] == len(numbers)
        return numbers, reply.body["next-sequence-number"]

    assert page(**{"message-count": 3}) == ([first, first + 1, first + 2], first + 3)
    assert page(**{"max-bytes": 2500})[0] == [first, first + 1]  # each message is over 1,000 bytes stored
    assert page(**{"max-bytes": 1})[0] == [first]  # at least one, however large
    assert page(**{"to-sequence-number": first + 4}) == ([first, first + 1, first + 2, first + 3], first + 4)
    assert page(**{"message-count": 10**9})[0] == list(range(first, first + 10))  # capped, not refused
    numbers, after = page(**{"from-sequence-number": first + 10})
    assert (numbers, after) == ([], first + 10)


def test_bad_requests_and_rights(cp_broker: BrokerProcess) -> None:
    ok = {"partition": 0, "from-sequence-number": 0, "columns": ["body"]}
    unknown = request(cp_broker, {**ok, "columns": ["body", "nope"]})
    assert (unknown.status, unknown.condition) == (400, "com.microsoft:argument-error")
    assert "'nope' is not a column" in str(unknown.description)
    for columns in ([], None, ["body", "body"], "body"):
        bad = request(cp_broker, {**ok, "columns": columns})
        assert (bad.status, bad.condition) == (400, "com.microsoft:argument-error"), columns
    assert request(cp_broker, {**ok, "partition": 3}).status == 400
    assert request(cp_broker, ok, "listener", "listen-key").status == 200  # Listen, as peek
    refused = request(cp_broker, ok, "sender", "send-key")
    assert (refused.status, refused.condition) == (401, "amqp:unauthorized-access")


def hidden_pyarrow(tmp_path: Path) -> str:
    """A PYTHONPATH on which `import pyarrow` fails, as where it is not installed."""
    blocker = tmp_path / "no-pyarrow" / "pyarrow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("pyarrow is hidden from this broker")\n')
    return os.pathsep.join(p for p in (str(blocker.parent), os.environ.get("PYTHONPATH", "")) if p)


def test_without_pyarrow_the_broker_says_so_and_the_reader_reads_rows(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from sodalite.spark.options import source_options
    from sodalite.spark.source import SequenceRange, _read

    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES)).start()
    try:
        with ServiceBusClient.from_connection_string(process.connection_string) as sb:
            every_kind(sb, "cp-hidden", keep_locked=False)
        broker = Broker(process.connection_string)
        served = page_path(broker, "cp-hidden", 0)
        numbers = served.column("sequenceNumber").to_pylist()
        broker.close()
        process.stop()

        monkeypatch.setenv("PYTHONPATH", hidden_pyarrow(tmp_path))
        process.start()
        reply = request(process, {"partition": 0, "columns": ["body"]}, entity="cp-hidden")
        assert (reply.status, reply.condition) == (501, "amqp:not-implemented")
        assert "pyarrow" in str(reply.description)
        assert Broker(process.connection_string).column_pages("cp-hidden", 0, 0, END, ("body",)) is None
        # The reader's own code (what a Spark task runs) falls back to peeking rows: the same rows.
        options = source_options({"connectionstring": process.connection_string, "entity": "cp-hidden"})
        part = SequenceRange(0, numbers[0], numbers[-1] + 1, "cp-hidden")
        read = pa.Table.from_batches(list(_read(Broker(process.connection_string), options, rows.COLUMNS, part)))
        assert_same(served, read)
        chosen = SequenceRange(0, numbers[0], numbers[-1] + 1, "cp-hidden", ((numbers[1], numbers[2]),))
        picked = pa.Table.from_batches(list(_read(Broker(process.connection_string), options, FOUR, chosen)))
        assert picked.column("sequenceNumber").to_pylist() == numbers[1:3]
    finally:
        process.stop()


def test_the_reader_filters_chosen_numbers_and_adds_the_source_entity(cp_broker: BrokerProcess) -> None:
    from sodalite.spark.options import source_options
    from sodalite.spark.source import SequenceRange, _read

    with ServiceBusClient.from_connection_string(cp_broker.connection_string) as sb:
        with sb.get_queue_sender("cp-bounds") as sender:
            sender.send_messages([ServiceBusMessage(f"r{i}", message_id=f"r{i}") for i in range(5)])
    broker = Broker(cp_broker.connection_string)
    numbers = broker.sequence_numbers("cp-bounds", 0, 0, END)
    options = source_options({"connectionstring": cp_broker.connection_string, "entities": "cp-bounds,cp-part"})
    part = SequenceRange(0, numbers[0], numbers[-1] + 1, "cp-bounds", ((numbers[0], numbers[0]),
                                                                       (numbers[-2], numbers[-1])))
    names = ("sourceEntity", "messageId", "body")
    got = pa.Table.from_batches(list(_read(broker, options, names, part)))
    assert got.column_names == list(names)
    assert got.column("sourceEntity").to_pylist() == ["cp-bounds"] * 3
    ids = page_path(broker, "cp-bounds", 0, ("messageId",)).column("messageId").to_pylist()
    assert got.column("messageId").to_pylist() == [ids[0], ids[-2], ids[-1]]
    broker.close()
