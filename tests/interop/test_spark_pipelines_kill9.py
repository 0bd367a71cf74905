"""kill -9 of the Spark driver mid-run of `sodalite pipeline replicate --consume` and of `syphon`, then a
restart from the checkpoint: the target (with duplicate detection) holds every source message exactly
once, and the consumed source is empty. The killed pipeline runs as a user runs it, in its own process
group, and the whole group (driver JVM and Python workers) is killed with SIGKILL; the restarts call
`sodalite.spark.pipelines` from the killed run's checkpoint with the suite's Spark session (the same
pipeline code, without a JVM start per run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

from sodalite.client import backlog
from sodalite.client.paired import ensure_backlog_queues

pytest.importorskip("pyspark")
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from spark_local import cli_env, run_to_end

from sodalite.spark import pipelines

pytestmark = pytest.mark.interop

COUNT = 200
DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("kill9")
    a = BrokerProcess(base / "a", write_config(base / "a.json", [{"Name": "k9-src", "Properties": {}}])).start()
    b = BrokerProcess(base / "b", write_config(base / "b.json", [{"Name": "k9-src", "Properties": DEDUP},
                                                                 {"Name": "k9-restored", "Properties": DEDUP}])).start()
    yield a, b
    a.stop()
    b.stop()


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "sodalite.cli.main", "pipeline", *args, "--master", "local[2]",
            "--progress"]  # (its output is a pipe: progress lines only when asked)


def kill_mid_run(args: list[str], cwd: Path) -> str:
    """Start the pipeline in its own process group; SIGKILL the group once it reports moving messages."""
    env = cli_env()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    seen = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: the pipeline never ends by itself, the kill ends this loop
            seen += line
            if line.startswith("moved ") and not line.startswith("moved 0 "):
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, seen
    return seen


def finish(start: Callable[[], StreamingQuery]) -> None:
    """Restart from the killed run's checkpoint until done (available-now, in-process)."""
    for _ in range(2):  # the second run removes the first one's last batch from the source
        run_to_end(start())


def ids(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue) as receiver:
            return [str(m.message_id) for m in receiver.peek_messages(max_message_count=COUNT * 2)]


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_replicate_killed_mid_run_resumes_exactly_once(brokers: tuple[BrokerProcess, BrokerProcess],
                                                        spark: SparkSession, tmp_path: Path) -> None:
    source, target = brokers
    with ServiceBusClient.from_connection_string(source.connection_string) as sb:
        with sb.get_queue_sender("k9-src") as sender:
            sender.send_messages([ServiceBusMessage(f"r{i}", message_id=f"r{i}") for i in range(COUNT)])
    args = command("replicate", "k9-src", "--connection-string", source.connection_string,
                   "--target-connection-string", target.connection_string, "--checkpoint", str(tmp_path / "c"),
                   "--consume", "--max-messages-per-trigger", "10")
    kill_mid_run([*args, "--trigger", "1 second"], tmp_path)
    finish(lambda: pipelines.replicate(spark, source.connection_string, target.connection_string, ["k9-src"],
                                       str(tmp_path / "c"), consume=True, max_messages_per_trigger=10,
                                       available_now=True))
    got = ids(target, "k9-src")
    assert sorted(got) == sorted(f"r{i}" for i in range(COUNT))  # each exactly once
    assert ids(source, "k9-src") == []


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_syphon_killed_mid_run_resumes_exactly_once(brokers: tuple[BrokerProcess, BrokerProcess],
                                                     spark: SparkSession, tmp_path: Path) -> None:
    secondary, primary = brokers
    names = backlog.backlog_queue_names(backlog.namespace_of(primary.connection_string), 1)
    ensure_backlog_queues(secondary.admin_connection_string, names, connection_verify=secondary.admin_certificate)
    with ServiceBusClient.from_connection_string(secondary.connection_string) as sb:
        with sb.get_queue_sender(names[0]) as sender:
            routed = backlog.to_backlog({}, backlog.Routing("k9-restored"))
            sender.send_messages([ServiceBusMessage(f"b{i}", message_id=f"b{i}", application_properties=routed)  # type: ignore[arg-type]
                                  for i in range(COUNT)])
    args = command("syphon", "--primary", primary.connection_string, "--secondary", secondary.connection_string,
                   "--backlog-queue-count", "1", "--checkpoint", str(tmp_path / "c"),
                   "--max-messages-per-trigger", "10")
    kill_mid_run([*args, "--trigger", "1 second"], tmp_path)
    finish(lambda: pipelines.syphon(spark, primary.connection_string, secondary.connection_string, names,
                                    str(tmp_path / "c"), max_messages_per_trigger=10, available_now=True))
    assert sorted(ids(primary, "k9-restored")) == sorted(f"b{i}" for i in range(COUNT))
    assert ids(secondary, names[0]) == []
