"""The `sodalite` data source and a pipeline on a Spark standalone cluster (tests/interop/spark_cluster.py):
a master and two workers on loopback, each worker with a Python of its own, the package shipped to
the executors with ``--py-files``, as docs/spark.md tells users to run it.

* ``spark-submit`` of a job that reads a partitioned queue through the data source into Parquet: every
  message once, read by executors on both workers, each running its own worker's Python and the
  shipped package;
* ``sodalite pipeline replicate --consume --master spark://...`` killed with SIGKILL (the driver's
  whole process group) mid-run, then run again from its checkpoint on the cluster: the target (with
  duplicate detection) holds every source message exactly once and the source is empty.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pytest.importorskip("pyspark")
import pyarrow.parquet as pq
from spark_cluster import SparkCluster, standalone_cluster

pytestmark = pytest.mark.interop

HERE = Path(__file__).resolve().parent
COUNT = 200
DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}
PARTITIONED = {"EnablePartitioning": True}
RUN_TIMEOUT_S = 400.0  # a stall guard for one driver run (a JVM start and the executors' on this machine)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    yield from standalone_cluster(tmp_path_factory.mktemp("spark-cluster"))


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("cluster-brokers")
    a = BrokerProcess(base / "a", write_config(base / "a.json", [{"Name": "read", "Properties": PARTITIONED},
                                                                 {"Name": "moved", "Properties": PARTITIONED}])).start()
    # (the target: one partition, so one peek sees it all)
    b = BrokerProcess(base / "b", write_config(base / "b.json", [{"Name": "moved", "Properties": DEDUP}])).start()
    yield a, b
    a.stop()
    b.stop()


def fill(broker: BrokerProcess, queue: str, prefix: str) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"{prefix}{i}", message_id=f"{prefix}{i}",
                                                    partition_key=f"k{i % 8}") for i in range(COUNT)])


def ids(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue) as receiver:
            return [str(m.message_id) for m in receiver.peek_messages(max_message_count=COUNT * 2)]


@pytest.mark.timeout(900)
def test_spark_submit_reads_through_the_data_source_on_executors_of_both_workers(
        cluster: SparkCluster, brokers: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    source, _ = brokers
    fill(source, "read", "c")
    out = tmp_path / "out"
    done = cluster.spark_submit(HERE / "spark_cluster_job.py", source.connection_string, "read", str(out),
                                timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, failure(done.stderr)
    table = pq.read_table(out)
    assert sorted(table.column("messageId").to_pylist()) == sorted(f"c{i}" for i in range(COUNT))
    assert sorted(bytes(b) for b in table.column("body").to_pylist()) == sorted(f"c{i}".encode() for i in range(COUNT))
    line = next(x for x in done.stdout.splitlines() if x.startswith("EXECUTORS "))
    executors = json.loads(line.removeprefix("EXECUTORS "))
    # Each worker's executor ran its own worker's python3 (two virtual environments, neither the driver's)...
    prefixes = {prefix for _, prefix, _ in executors}
    assert prefixes == {str(p.parent.parent) for p in cluster.worker_pythons}, executors
    # ... and sodalite from the zip the driver shipped, not from an installation.
    assert all(".zip" in module and "sodalite.zip" in module for _, _, module in executors), executors


def failure(output: str) -> str:
    """A failed run's Python error (what the driver or an executor raised) and the output's end."""
    python = [line for line in output.splitlines() if "Error" in line or "Exception" in line]
    return "\n".join(python[:20]) + "\n...\n" + output[-3000:]


def pipeline(cluster: SparkCluster, source: BrokerProcess, target: BrokerProcess, checkpoint: Path,
             *extra: str) -> list[str]:
    return [sys.executable, "-m", "sodalite.cli.main", "pipeline", "replicate", "moved",
            "--connection-string", source.connection_string, "--target-connection-string", target.connection_string,
            "--checkpoint", str(checkpoint), "--consume", "--max-messages-per-trigger", "10",
            "--master", cluster.master_url, "--progress", *extra]


@pytest.mark.timeout(1200)
def test_replicate_on_the_cluster_killed_mid_run_resumes_exactly_once(
        cluster: SparkCluster, brokers: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    source, target = brokers
    fill(source, "moved", "r")
    checkpoint = tmp_path / "checkpoint"
    proc = subprocess.Popen(pipeline(cluster, source, target, checkpoint, "--trigger", "1 second"),
                            cwd=tmp_path, env=cluster.driver_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by the test's timeout: the pipeline runs until killed
            seen += line
            if line.startswith("moved ") and line.split()[1] != "0":
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver: its JVM and its Python, mid-run
        proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, seen[-4000:]
    assert ids(source, "moved"), "the kill came after the end of the run"
    for _ in range(2):  # the second run removes the first one's last batch from the source
        again = subprocess.run(pipeline(cluster, source, target, checkpoint, "--available-now"), cwd=tmp_path,
                               env=cluster.driver_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                               check=False)
        assert again.returncode == 0, failure(again.stdout + again.stderr)
    assert sorted(ids(target, "moved")) == sorted(f"r{i}" for i in range(COUNT))  # each exactly once
    assert ids(source, "moved") == []
