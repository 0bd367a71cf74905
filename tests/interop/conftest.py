from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, write_config

from pg_server import module_database

QUEUES = [
    {"Name": "queue.1", "Properties": {}},
    {"Name": "orders", "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 10}},
    {"Name": "rnd", "Properties": {}},
    {"Name": "durable", "Properties": {}},
    {"Name": "aio", "Properties": {}},
    {"Name": "props", "Properties": {}},
    {"Name": "misc", "Properties": {}},
    {"Name": "peek", "Properties": {}},
    {"Name": "renew", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "dlq", "Properties": {"MaxDeliveryCount": 2}},
    {"Name": "ttl", "Properties": {"DeadLetteringOnMessageExpiration": True}},
    {"Name": "ttl-drop", "Properties": {}},
    {"Name": "sched", "Properties": {}},
    {"Name": "defer", "Properties": {}},
    {"Name": "sessions", "Properties": {"RequiresSession": True}},
    {"Name": "sessions-short", "Properties": {"RequiresSession": True, "LockDuration": "PT5S"}},
    {"Name": "sessions-aio", "Properties": {"RequiresSession": True}},
    {"Name": "fwd-src", "Properties": {"ForwardTo": "fwd-dst"}},
    {"Name": "fwd-dst", "Properties": {}},
    {"Name": "loop-a", "Properties": {"ForwardTo": "loop-b"}},
    {"Name": "loop-b", "Properties": {"ForwardTo": "loop-a"}},
    {"Name": "dlfwd-src", "Properties": {"ForwardDeadLetteredMessagesTo": "dlfwd-dst"}},
    {"Name": "dlfwd-dst", "Properties": {}},
    {"Name": "dedup",
     "Properties": {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT1M"}},
    {"Name": "tiny", "Properties": {"MaxSizeInMegabytes": 1}},
    {"Name": "ttl-cap", "Properties": {"DefaultMessageTimeToLive": "PT1M"}},
]


@pytest.fixture(scope="module")
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database of the module's own (named after it) on this process's server
    (tests/pg_server.py), dropped after the module; skipped when PostgreSQL is missing. The two-node
    modules start their nodes on it (pg_nodes.node_pair)."""
    module = request.module.__name__.rpartition(".")[2]
    yield from module_database(module.removeprefix("test_pg_").removeprefix("test_"))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the interop tests that only need a running broker; each test uses its own queue."""
    base = tmp_path_factory.mktemp("broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local[2] Spark session for the Spark test modules of a worker (they form two xdist units, each
    on one worker: tests/conftest.py), with the `sodalite` data source registered."""
    pytest.importorskip("pyspark")
    from spark_local import local_session

    yield from local_session(tmp_path_factory.mktemp("spark-warehouse"), "sodalite-tests")


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that kill or restart it."""
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES))
    yield process
    process.stop()
