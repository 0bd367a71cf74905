"""Spark's redrive against a broker whose queues run on the version-2 core (``--core v2``).

The redrive pipeline (``sodalite pipeline redrive``, ``sodalite.spark.pipelines.redrive``) picks
dead-lettered messages with Spark SQL and hands their sequence numbers to the broker's move
operation over the JSON API: on a queue on the core that is the source queue's ``MoveOut``, one
store transaction per chunk (``server/moves.py``). The scenario is the existing one from
``test_spark_syphon_redrive``, imported unchanged (its assertions are the ones the version-1 path
passes), with this module's ``brokers`` fixture serving ``--core v2``. The module's name starts with
``test_spark_`` so it joins the Spark modules' one worker and one Spark session (tests/conftest.py).
The syphon scenario of the same module is not brought over: it restores into a session queue and
a topic, and topics stay on the version-1 path.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, write_config

pytest.importorskip("pyspark")
import test_spark_syphon_redrive
from test_spark_syphon_redrive import (  # noqa: F401
    test_redrive_moves_filtered_dead_letters_once_with_delivery_count_reset,
)

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("redrive-core-v2")
    primary = BrokerProcess(base / "p", write_config(base / "p.json", test_spark_syphon_redrive.PRIMARY_QUEUES),
                            extra_args=V2).start()
    secondary = BrokerProcess(base / "s", write_config(base / "s.json", []), extra_args=V2).start()
    yield primary, secondary
    primary.stop()
    secondary.stop()
