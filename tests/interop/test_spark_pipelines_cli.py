"""`sodalite pipeline export|replicate` end to end between two `sodalite serve` brokers; what each run did is
checked with the official SDK and pyarrow. The CLI is run as a user runs it (its own process, its own Spark
on local[2]) once per pipeline kind: export's first run, and replicate's Ctrl-C run. The other runs (a resume
from the checkpoint, the replicate of queues and subscriptions) call `sodalite.spark.pipelines` with the
suite's Spark session: the same pipeline code, without a JVM start per run.
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

from ctrl_c import ctrl_c_at_default

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from spark_local import cli_env, run_to_end  # noqa: E402

from sodalite.spark import pipelines  # noqa: E402

pytestmark = pytest.mark.interop

DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}
SOURCE_QUEUES = [{"Name": n, "Properties": p} for n, p in [
    ("pl-export", {}), ("pl-orders", {"RequiresSession": True}), ("pl-live", {})]]
SOURCE_TOPICS = [{"Name": "pl-news", "Properties": {}, "Subscriptions": [{"Name": "repl", "Properties": {}}]}]
TARGET_QUEUES = [{"Name": n, "Properties": p} for n, p in [
    ("pl-orders", {"RequiresSession": True, **DEDUP}), ("pl-live", DEDUP)]]
TARGET_TOPICS = [{"Name": "pl-news", "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]}]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("pipelines")
    a = BrokerProcess(base / "a", write_config(base / "a.json", SOURCE_QUEUES, Topics=SOURCE_TOPICS)).start()
    b = BrokerProcess(base / "b", write_config(base / "b.json", TARGET_QUEUES, Topics=TARGET_TOPICS)).start()
    yield a, b
    a.stop()
    b.stop()


def pipeline(source: BrokerProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(SODALITE_CONNECTION_STRING=source.connection_string)
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", "pipeline", *args, "--master", "local[2]"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=400)


def peek_count(broker: BrokerProcess, queue: str | None = None, topic: str | None = None,
               subscription: str | None = None, session_id: str | None = None) -> int:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        receiver = (sb.get_queue_receiver(queue, session_id=session_id) if queue else
                    sb.get_subscription_receiver(topic, subscription))  # type: ignore[arg-type]
        with receiver:
            return len(receiver.peek_messages(max_message_count=1000))


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_export_writes_parquet_partitioned_by_date(brokers: tuple[BrokerProcess, BrokerProcess],
                                                   spark: SparkSession, tmp_path: Path) -> None:
    source, _ = brokers
    with ServiceBusClient.from_connection_string(source.connection_string) as sb:
        with sb.get_queue_sender("pl-export") as sender:
            sender.send_messages([ServiceBusMessage(f"e{i}", message_id=f"e{i}") for i in range(40)])
    out = tmp_path / "export"
    result = pipeline(source, tmp_path, "export", "pl-export", "--path", str(out), "--checkpoint",
                      str(tmp_path / "c"), "--available-now", "--max-messages-per-trigger", "15", "--consume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "moved" in result.stdout
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert [p.name for p in out.iterdir() if p.name.startswith("date=")] == [f"date={today}"]
    table = pq.read_table(out / f"date={today}")
    assert sorted(table.column("messageId").to_pylist()) == sorted(f"e{i}" for i in range(40))
    assert peek_count(source, "pl-export") <= 15  # consumed, but for the last batch, which the next run completes
    # The resume from the CLI run's checkpoint, in-process (CLI defaults: no per-trigger limit given).
    run_to_end(pipelines.export(spark, source.connection_string, "pl-export", str(out), str(tmp_path / "c"),
                                consume=True, available_now=True))
    assert peek_count(source, "pl-export") == 0
    assert pq.read_table(out / f"date={today}").num_rows == 40  # nothing exported twice


def test_replicate_moves_queues_and_subscriptions_keeping_ids_and_order(
        brokers: tuple[BrokerProcess, BrokerProcess], spark: SparkSession, tmp_path: Path) -> None:
    source, target = brokers
    with ServiceBusClient.from_connection_string(source.connection_string) as sb:
        with sb.get_queue_sender("pl-orders") as sender:
            for session in ("s1", "s2"):
                sender.send_messages([ServiceBusMessage(f"{session}-{i}", message_id=f"{session}-{i}",
                                                        session_id=session, application_properties={"n": i})
                                      for i in range(10)])
        with sb.get_topic_sender("pl-news") as sender:
            sender.send_messages([ServiceBusMessage(f"n{i}", message_id=f"n{i}") for i in range(5)])
    for _ in range(2):  # the second run completes the first run's last batch
        run_to_end(pipelines.replicate(spark, source.connection_string, target.connection_string,
                                       ["pl-orders", "pl-news/subscriptions/repl"], str(tmp_path / "c"),
                                       consume=True, available_now=True))
    assert peek_count(source, "pl-orders", session_id="s1") == peek_count(source, "pl-orders", session_id="s2") == 0
    assert peek_count(source, topic="pl-news", subscription="repl") == 0
    with ServiceBusClient.from_connection_string(target.connection_string) as sb:
        for session in ("s1", "s2"):
            with sb.get_queue_receiver("pl-orders", session_id=session, max_wait_time=5) as receiver:
                got = receiver.receive_messages(max_message_count=20, max_wait_time=10)
                assert [m.message_id for m in got] == [f"{session}-{i}" for i in range(10)]  # order kept
                assert [m.application_properties[b"n"] for m in got] == list(range(10))  # still integers
        with sb.get_subscription_receiver("pl-news", "all", max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_message_count=20, max_wait_time=10)
            assert sorted(m.message_id for m in got) == [f"n{i}" for i in range(5)]


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_replicate_stops_cleanly_on_ctrl_c_and_resumes(brokers: tuple[BrokerProcess, BrokerProcess],
                                                       spark: SparkSession, tmp_path: Path) -> None:
    source, target = brokers
    with ServiceBusClient.from_connection_string(source.connection_string) as sb:
        with sb.get_queue_sender("pl-live") as sender:
            sender.send_messages([ServiceBusMessage(f"l{i}", message_id=f"l{i}") for i in range(20)])
    env = cli_env(SODALITE_CONNECTION_STRING=source.connection_string)
    args = [sys.executable, "-m", "sodalite.cli.main", "pipeline", "replicate", "pl-live",
            "--target-connection-string", target.connection_string, "--checkpoint", str(tmp_path / "c"),
            "--master", "local[2]", "--trigger", "1 second", "--progress"]  # a pipe: progress lines when asked
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_at_default)  # as from a terminal, whatever this run ignores
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("copied 20 messages"):  # no --consume: a copy, said so
                break
        assert any(line.startswith("copied 20 messages") for line in lines), "".join(lines)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 130, err[-3000:]
    assert "stopping (Ctrl-C)" in out
    assert peek_count(target, "pl-live") == 20
    assert peek_count(source, "pl-live") == 20  # copied, not moved: no --consume

    with ServiceBusClient.from_connection_string(source.connection_string) as sb:
        with sb.get_queue_sender("pl-live") as sender:
            sender.send_messages([ServiceBusMessage("l-late", message_id="l-late")])
    # The resume from the CLI run's checkpoint, in-process.
    run_to_end(pipelines.replicate(spark, source.connection_string, target.connection_string, ["pl-live"],
                                   str(tmp_path / "c"), available_now=True))
    ids: list[Any] = []
    with ServiceBusClient.from_connection_string(target.connection_string) as sb:
        with sb.get_queue_receiver("pl-live") as receiver:
            ids = [m.message_id for m in receiver.peek_messages(max_message_count=100)]
    assert sorted(ids) == sorted([f"l{i}" for i in range(20)] + ["l-late"])  # resumed from the checkpoint
