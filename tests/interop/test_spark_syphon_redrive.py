"""The syphon and redrive pipelines end to end between two `sodalite serve` brokers; the backlog is filled, and
the primary read, with the official SDK. The backlog copies are written with sodalite.client.backlog, as the
paired client writes them. Redrive's first run is `sodalite pipeline redrive` as a user runs it (its own process,
its own Spark on local[2]); the other runs call `sodalite.spark.pipelines` with the suite's Spark session (the same
pipeline code, without a JVM start per run). The syphon CLI runs in test_spark_pipelines_kill9.py.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import BrokerProcess, write_config

from sodalite.client import backlog
from sodalite.client.paired import ensure_backlog_queues

pytest.importorskip("pyspark")
from pyspark.sql import SparkSession
from spark_local import cli_env, run_to_end

from sodalite.spark import pipelines

pytestmark = pytest.mark.interop

DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}
PRIMARY_QUEUES = [{"Name": "sy-orders", "Properties": {"RequiresSession": True, **DEDUP}},
                  {"Name": "sy-plain", "Properties": DEDUP},
                  {"Name": "rd-work", "Properties": DEDUP}, {"Name": "rd-parking", "Properties": {}}]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("syphon")
    primary = BrokerProcess(base / "p", write_config(base / "p.json", PRIMARY_QUEUES)).start()
    secondary = BrokerProcess(base / "s", write_config(base / "s.json", [])).start()
    yield primary, secondary
    primary.stop()
    secondary.stop()


def pipeline(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", "pipeline", *args, "--master", "local[2]"],
                          cwd=cwd, env=cli_env(**(env or {})),
                          capture_output=True, text=True, timeout=400)


def backlog_copy(message_id: str, routing: backlog.Routing, properties: dict[str, object]) -> ServiceBusMessage:
    return ServiceBusMessage(f"body-{message_id}", message_id=message_id,
                             application_properties=backlog.to_backlog(properties, routing))  # type: ignore[arg-type]


def test_syphon_restores_backlog_messages_into_their_entities(brokers: tuple[BrokerProcess, BrokerProcess],
                                                              spark: SparkSession, tmp_path: Path) -> None:
    primary, secondary = brokers
    namespace = backlog.namespace_of(primary.connection_string)
    names = backlog.backlog_queue_names(namespace, 2)
    ensure_backlog_queues(secondary.admin_connection_string, names, connection_verify=secondary.admin_certificate)
    later = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=1)
    ttl = datetime.timedelta(minutes=10)
    with ServiceBusClient.from_connection_string(secondary.connection_string) as sb:
        with sb.get_queue_sender(names[0]) as sender:
            sender.send_messages([backlog_copy(f"o{i}", backlog.Routing("sy-orders", session_id="s1",
                                                                        time_to_live=ttl), {"n": i})
                                  for i in range(8)])
            sender.send_messages(backlog_copy("gone", backlog.Routing("sy-plain", time_to_live=datetime.timedelta(
                milliseconds=1)), {}))
        with sb.get_queue_sender(names[1]) as sender:
            sender.send_messages([backlog_copy(f"p{i}", backlog.Routing("sy-plain"), {"k": "v"}) for i in range(5)])
            sender.send_messages(backlog_copy("sched", backlog.Routing("sy-plain", scheduled_enqueue_time_utc=later),
                                              {}))
            sender.send_messages(backlog_copy("o8", backlog.Routing("sy-orders", session_id="s1"), {"n": 8}))
    for _ in range(2):  # the second run removes the first run's last batch from the backlog
        run_to_end(pipelines.syphon(spark, primary.connection_string, secondary.connection_string, names,
                                    str(tmp_path / "c"), max_messages_per_trigger=4, available_now=True))

    with ServiceBusClient.from_connection_string(secondary.connection_string) as sb:
        for name in names:
            with sb.get_queue_receiver(name) as receiver:
                assert receiver.peek_messages(max_message_count=50) == []  # the backlog is drained
    with ServiceBusClient.from_connection_string(primary.connection_string) as sb:
        with sb.get_queue_receiver("sy-orders", session_id="s1", max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_message_count=20, max_wait_time=10)
            for message in got:
                receiver.complete_message(message)
        assert sorted(m.message_id for m in got) == [f"o{i}" for i in range(9)]
        by_id = {m.message_id: m for m in got}
        assert [by_id[f"o{i}"].application_properties for i in range(9)] == [{b"n": i} for i in range(9)]  # typed
        assert {m.session_id for m in got} == {"s1"}
        assert by_id["o0"].time_to_live is not None and datetime.timedelta(0) < by_id["o0"].time_to_live <= ttl
        assert by_id["o8"].time_to_live is None or by_id["o8"].time_to_live > ttl  # it had none: entity default
        assert str(by_id["o3"]) == "body-o3"
        with sb.get_queue_receiver("sy-plain", receive_mode=ServiceBusReceiveMode.PEEK_LOCK) as receiver:
            peeked = receiver.peek_messages(max_message_count=50)
        assert sorted(m.message_id for m in peeked) == sorted([f"p{i}" for i in range(5)] + ["sched"])  # not "gone"
        scheduled = next(m for m in peeked if m.message_id == "sched")
        assert scheduled.scheduled_enqueue_time_utc == later
        assert all(m.application_properties in (None, {}, {b"k": b"v"}) for m in peeked)  # no x-ms-* left


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_redrive_moves_filtered_dead_letters_once_with_delivery_count_reset(
        brokers: tuple[BrokerProcess, BrokerProcess], spark: SparkSession, tmp_path: Path) -> None:
    primary, _ = brokers
    with ServiceBusClient.from_connection_string(primary.connection_string) as sb:
        with sb.get_queue_sender("rd-work") as sender:
            sender.send_messages([ServiceBusMessage(f"d{i}", message_id=f"d{i}", application_properties={"n": i})
                                  for i in range(8)])
        with sb.get_queue_receiver("rd-work", max_wait_time=5) as receiver:
            first = receiver.receive_messages(max_message_count=8, max_wait_time=10)
            for message in first:
                receiver.abandon_message(message)  # a delivery count to reset
            got = receiver.receive_messages(max_message_count=8, max_wait_time=10)
            assert len(got) == len(first) == 8
            for message in got:
                n = int(str(message).removeprefix("d"))
                reason = "MaxDeliveryCountExceeded" if n % 2 == 0 else "Poison"
                receiver.dead_letter_message(message, reason=reason, error_description=f"why {n}")
    env = {"SODALITE_CONNECTION_STRING": primary.connection_string}
    api = f"http://127.0.0.1:{primary.http_port}"
    condition = "deadLetterReason = 'MaxDeliveryCountExceeded'"
    # No --api-url: the CLI finds the management API in the broker's data directory, as the other commands do.
    result = pipeline(tmp_path, "redrive", "rd-work", "--data-dir", str(primary.data_dir), "--spark-sql", condition,
                      env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "selected 4, moved 4, skipped 0" in result.stdout
    # The runs after the CLI's, in-process.
    conn = primary.connection_string
    again = pipelines.redrive(spark, conn, "rd-work", api, condition=condition)  # nothing left to match
    assert (again.selected, again.moved, again.skipped) == (0, 0, 0)  # nothing doubled
    parked = pipelines.redrive(spark, conn, "rd-work", api, target="rd-parking",
                               condition="applicationProperties['n'] = '3' OR deadLetterErrorDescription = 'why 5'")
    assert parked.moved == 2
    with pytest.raises(Exception) as refused:
        pipelines.redrive(spark, conn, "rd-work", api, target="rd-none")
    assert "rd-none" in str(refused.value)

    with ServiceBusClient.from_connection_string(primary.connection_string) as sb:
        with sb.get_queue_receiver("rd-work") as receiver:
            back = receiver.peek_messages(max_message_count=50)
        assert sorted(m.message_id for m in back) == ["d0", "d2", "d4", "d6"]
        assert all(m.delivery_count == 0 and m.dead_letter_reason is None for m in back)
        assert [m.application_properties[b"n"] for m in sorted(back, key=lambda m: str(m.message_id))] == [0, 2, 4, 6]
        with sb.get_queue_receiver("rd-parking") as receiver:
            assert sorted(m.message_id for m in receiver.peek_messages(max_message_count=50)) == ["d3", "d5"]
        with sb.get_queue_receiver("rd-work", sub_queue="deadletter") as receiver:
            left = receiver.peek_messages(max_message_count=50)
        assert sorted(m.message_id for m in left) == ["d1", "d7"]
        assert {m.dead_letter_reason for m in left} == {"Poison"}
