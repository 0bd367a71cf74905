"""A Spark stream (the ``sodalite`` data source) across a forced geo promotion.

Site ``a`` acknowledges messages that never reach site ``b`` (its replication is cut first), and a
Spark stream reads them: its checkpointed offsets are past sequence numbers that die with ``a``.
``a`` is killed (``kill -9``, database and node) and ``b`` promoted forced. Messages sent to ``b``
afterwards must all reach the same stream, from the same checkpoint, exactly once: a promotion
that reused the lost numbers would give the new messages numbers at or below the stream's offsets,
and the stream would skip them. The stream reads through the one address (HAProxy).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import ROOT, write_config

from drills.geo_sites import HAPROXY, GeoNode, HaProxy

pg_cluster = pytest.importorskip("pg_cluster")
pytest.importorskip("pyspark")

QUEUE = "geo-spark"


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from spark_local import local_session

    yield from local_session(tmp_path_factory.mktemp("spark-warehouse"), "sodalite-geo")


def send(connection_string: str, bodies: list[str]) -> None:
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(QUEUE) as sender:
        sender.send_messages([ServiceBusMessage(body, message_id=body) for body in bodies])


@pytest.mark.timeout(480)
def test_a_spark_stream_keeps_its_offsets_across_a_forced_promotion(spark: Any, tmp_path: Path) -> None:
    from spark_local import run_to_end

    if not Path(HAPROXY).exists():
        pytest.skip("haproxy is not installed (scripts/test installs the Debian package)")
    cluster = pg_cluster.PgCluster(standbys=1, extra_settings={"synchronous_standby_names": "''"}).start()
    config = write_config(tmp_path / "Config.json", [{"Name": QUEUE, "Properties": {}}])
    nodes: list[GeoNode] = []
    proxy: HaProxy | None = None
    try:
        name = cluster.create_database("geospark")
        db_a, db_b = cluster.nodes
        a = GeoNode(tmp_path, config, "a", db_a.dsn(name), "b", db_b.dsn(name))
        nodes.append(a)
        a.start()
        a.wait_role("primary")
        b = GeoNode(tmp_path, config, "b", db_b.dsn(name), "a", db_a.dsn(name))
        nodes.append(b)
        b.start()
        b.wait_role("secondary")
        proxy = HaProxy([a, b]).start()
        time.sleep(1.5)  # HAProxy's first checks
        address = proxy.connection_string()

        send(address, [f"kept{i}" for i in range(20)])
        time.sleep(1)  # replicated (asynchronous, well under a second here)
        db_b.query("ALTER SYSTEM SET primary_conninfo = ''")
        db_b.query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while db_a.query("SELECT count(*) FROM pg_stat_replication")[0][0]:
            assert time.monotonic() < deadline, "b did not stop streaming"
            time.sleep(0.2)
        send(address, [f"lost{i}" for i in range(10)])  # acknowledged by a, never on b

        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

        def run() -> list[tuple[str, int]]:
            df = (spark.readStream.format("sodalite").option("connectionString", address)
                  .option("entity", QUEUE).load())
            run_to_end(df.select("messageId", "sequenceNumber").writeStream.format("parquet")
                       .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                       .trigger(availableNow=True).start())
            return [(r["messageId"], r["sequenceNumber"]) for r in spark.read.parquet(str(out)).collect()]

        first = run()
        assert sorted(m for m, _ in first) == sorted([f"kept{i}" for i in range(20)] + [f"lost{i}" for i in range(10)])

        cluster.kill(db_a)
        a.kill()
        done = subprocess.run([sys.executable, "-m", "sodalite.cli.entry", "geo", "promote", "b", "--forced",
                               "--site", f"a={db_a.dsn(name)}", "--site", f"b={db_b.dsn(name)}"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "loss bound" in done.stdout
        b.wait_role("primary")
        time.sleep(1.5)  # HAProxy sees b healthy
        send(address, [f"new{i}" for i in range(15)])

        second = run()
        read = [m for m, _ in second]
        new = [m for m in read if m.startswith("new")]
        assert sorted(new) == sorted(f"new{i}" for i in range(15))  # every new message, none skipped
        assert len(read) == len(set(read)) == 45  # and nothing read twice
        numbers = dict(second)
        highest_before = max(n for _, n in first)
        assert all(numbers[f"new{i}"] > highest_before for i in range(15))
    finally:
        for node in nodes:
            node.stop()
        if proxy is not None:
            proxy.stop()
        cluster.stop()
