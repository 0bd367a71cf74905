"""`sodalite pipeline export --available-now` as a user runs it, with no driver Java options of their own:
the first run writes an archive of Spark's classes into the cache directory as its JVM exits, the next
maps it, and an archive that no longer fits (here: garbage) is ignored by the JVM, silently. Every run
exports each message once, and the JVM's notes about the archive stay off the command's output.
(The option choices are in tests/unit/cli/test_spark_start.py.)"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("pyspark")

pytestmark = pytest.mark.interop

COUNT = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("cli-start")
    process = BrokerProcess(base / "data", write_config(base / "c.json", [{"Name": "start", "Properties": {}}])).start()
    yield process
    process.stop()


def export(broker: BrokerProcess, tmp_path: Path, run: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYSPARK_SUBMIT_ARGS"}
    env.update(PYSPARK_PYTHON=sys.executable, SODALITE_SPARK_CLASS_CACHE=str(cache),
               SODALITE_CONNECTION_STRING=broker.connection_string)
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", "pipeline", "export", "start", "--path",
                           str(tmp_path / f"out-{run}"), "--checkpoint", str(tmp_path / f"ck-{run}"),
                           "--available-now", "--master", "local[2]"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def exported(tmp_path: Path, run: str) -> list[str]:
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    return sorted(pq.read_table(tmp_path / f"out-{run}" / f"date={today}").column("messageId").to_pylist())


@pytest.mark.timeout(2400)  # three CLI runs, each a JVM of its own; the first also writes the archive
def test_the_first_run_writes_the_class_archive_the_next_maps_it_and_a_bad_one_is_ignored(
        broker: BrokerProcess, tmp_path: Path) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb, sb.get_queue_sender("start") as s:
        s.send_messages([ServiceBusMessage(f"m{i}", message_id=f"m{i}") for i in range(COUNT)])
    expected = sorted(f"m{i}" for i in range(COUNT))
    cache = tmp_path / "cache"

    first = export(broker, tmp_path, "1", cache)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert f"exported {COUNT} messages" in first.stdout, first.stdout
    archives = list(cache.glob("*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000, list(cache.iterdir())
    assert not list(cache.glob("*.part"))
    assert "[cds]" not in first.stdout + first.stderr  # e.g. "Skipping ...: Signed JAR"
    assert exported(tmp_path, "1") == expected
    written = archives[0].stat().st_mtime_ns

    second = export(broker, tmp_path, "2", cache)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert exported(tmp_path, "2") == expected
    assert [p.stat().st_mtime_ns for p in cache.glob("*.jsa")] == [written]  # mapped, not written again
    assert "[cds]" not in second.stdout + second.stderr

    archives[0].chmod(0o644)
    archives[0].write_bytes(b"not an archive" * 1000)  # e.g. cut short, or from another JDK build
    third = export(broker, tmp_path, "3", cache)
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-3000:]
    assert exported(tmp_path, "3") == expected
    assert "[cds]" not in third.stdout + third.stderr and "archive" not in third.stderr.lower()
