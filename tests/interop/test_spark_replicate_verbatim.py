"""Replicate sends each message as stored: the target holds the sender's bytes (its properties and
application properties sections byte for byte, even in an encoding a re-encoder would change), and a
message without a MessageId gets the derived one, the same on a replay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, write_config

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, ULong
from sodalite.spark import sections
from sodalite.spark.broker import Broker

pytest.importorskip("pyspark")
from pyspark.sql import SparkSession
from spark_local import run_to_end

from sodalite.spark import pipelines

pytestmark = pytest.mark.interop

DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("verbatim")
    a = BrokerProcess(base / "a", write_config(base / "a.json", [{"Name": "vb", "Properties": {}}])).start()
    b = BrokerProcess(base / "b", write_config(base / "b.json", [{"Name": "vb", "Properties": DEDUP}])).start()
    yield a, b
    a.stop()
    b.stop()


def section(code: int, value: object) -> bytes:
    out = bytearray()
    encode_value(Described(ULong(code), value), out)
    return bytes(out)


# A properties list with a str32 MessageId and three trailing nulls, an application-properties map32:
# valid AMQP that the codec would encode otherwise (str8, no trailing nulls, map8).
ODD_PROPERTIES = (b"\x00\x53\x73\xd0" + (16).to_bytes(4, "big") + (4).to_bytes(4, "big")
                  + b"\xb1" + (4).to_bytes(4, "big") + b"vb-1" + b"\x40\x40\x40")
ODD_APPLICATION = (b"\x00\x53\x74\xd1" + (4 + 3 + 2).to_bytes(4, "big") + (2).to_bytes(4, "big")
                   + b"\xa1\x01n" + b"\x52\x03")
BODY = section(amqp_message.DATA, b"payload")


def stored(broker: BrokerProcess) -> list[bytes]:
    """The messages the broker holds in 'vb', as peeked (the stored sections after the broker's annotations)."""
    client = Broker(broker.connection_string)
    try:
        return [p for page in client.peek_pages("vb", 0, 1, 1 << 40) for p in page]
    finally:
        client.close()


def after_annotations(payload: bytes) -> bytes:
    parts = amqp_message.split_sections(payload)
    first = next(s for s in parts if s.code > amqp_message.MESSAGE_ANNOTATIONS)
    return payload[first.start:]


def test_replicate_sends_the_stored_bytes_and_derives_a_missing_message_id(
        brokers: tuple[BrokerProcess, BrokerProcess], spark: SparkSession, tmp_path: object) -> None:
    source, target = brokers
    with_id = ODD_PROPERTIES + ODD_APPLICATION + BODY
    without_id = section(amqp_message.PROPERTIES, [None, None, "to-x"]) + ODD_APPLICATION + BODY
    client = Broker(source.connection_string)
    try:
        client.send("vb", [with_id, without_id])
    finally:
        client.close()
    (first, second) = stored(source)
    assert after_annotations(first) == with_id  # the source keeps the sender's bytes
    assert sections.walk(second).properties[0] is not None  # (the source broker gave it an id on append)

    checkpoint = f"{tmp_path}/checkpoint"
    run_to_end(pipelines.replicate(spark, source.connection_string, target.connection_string, ["vb"], checkpoint,
                                   available_now=True))
    copied = stored(target)
    assert len(copied) == 2
    assert after_annotations(copied[0]) == with_id  # byte for byte: nothing decoded and encoded again
    assert after_annotations(copied[1]) == after_annotations(second)
