"""Partitioned queues on the version-2 core over three PostgreSQL databases, and a database lost at runtime.

The scenarios of ``test_pg_interop_partitions`` (which imports the partitioning scenarios of
``test_partitioning``), imported unchanged, against a broker served with ``--core v2``: each
partition of a partitioned queue is a ``CoreActor`` on the PostgreSQL database of its store. The
module's ``broker`` fixture serves the scenarios that take one; the outage test, which starts its
own broker, gets ``--core v2`` through the autouse fixture below.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import test_pg_interop_partitions
from broker_process import BrokerProcess
from test_pg_interop_partitions import (  # noqa: F401 - the scenarios, collected here with this module's fixtures
    _config,
    _server,
    test_a_database_lost_at_runtime_keeps_keyless_sends_going_and_loses_nothing,
    test_keyless_sends_spread_over_partitions_and_come_back_exactly_once,
    test_one_partition_key_pins_messages_to_one_partition,
    test_peek_continues_partition_by_partition_and_deferral_works,
    test_scheduled_messages_on_a_partitioned_queue,
    test_sessions_on_a_partitioned_queue_keep_their_order,
)

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


class CoreV2BrokerProcess(BrokerProcess):
    """A broker process served with ``--core v2``."""

    def __init__(self, data_dir: Path, config: Path | None, port: int = 0, extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, config, port, [*(extra_args or []), *V2])


@pytest.fixture(autouse=True)
def _brokers_on_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_pg_interop_partitions, "BrokerProcess", CoreV2BrokerProcess)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    server = _server()
    base = tmp_path_factory.mktemp("core-v2-pg-partitioning")
    config = _config(base, server.create_database("disk1"), server.create_database("disk2"))
    process = CoreV2BrokerProcess(base / "data", config,
                                  extra_args=["--store", server.create_database("default"),
                                              "--log-level", "INFO"]).start()
    yield process
    process.stop()


def test_the_partitioned_queues_run_on_the_core(broker: BrokerProcess) -> None:
    on_core = {line.split(" runs on the version-2 core")[0].split()[-1]
               for line in broker.output if " runs on the version-2 core (16 partitions)" in line}
    assert {"pq", "pq-keys", "pq-sessions", "pq-defer", "pq-outage"} <= on_core
