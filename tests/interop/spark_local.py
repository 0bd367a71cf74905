"""Spark for the tests: a local[2] session inside the test process, and the environment for a
`sodalite pipeline` run in a process of its own.

Each CLI run starts a JVM of its own and pays Spark's first-batch warm-up (together about a minute on
a busy 2-core machine); the session-scoped one (tests/interop/conftest.py) pays them once, and a warm
available-now run then takes seconds. So each pipeline kind is run through the CLI, as a user runs it,
where the test needs a process (Ctrl-C, kill -9) or is about the CLI; the other runs call
`sodalite.spark.pipelines` with that session: the same pipeline code.

Test JVMs are short-lived: they start with the C1 compiler only and the serial collector, which
roughly halves a session's start here (JVM_OPTIONS; the CLI's users get Spark's defaults).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from sodalite.spark import register

QUERY_TIMEOUT_S = 300.0  # a stall guard only: a warm run here takes seconds
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a `sodalite pipeline` subprocess: this venv's python for the workers, and
    the test JVM options (PySpark reads PYSPARK_SUBMIT_ARGS when it starts the driver's JVM)."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_SUBMIT_ARGS": f'--driver-java-options "{JVM_OPTIONS}" pyspark-shell', **extra}


def local_session(warehouse: Path, name: str) -> Iterator[SparkSession]:
    """Yield a local[2] session on loopback (the CLI's `--master local[2]`) with the `sodalite` data
    source registered; stopped afterwards."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run this venv's python
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName(name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    register(session)
    try:
        yield session
    finally:
        session.stop()


def run_to_end(query: StreamingQuery) -> StreamingQuery:
    """Wait for an available-now query to finish by itself; fail on a stall or on the query's own error."""
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        raise AssertionError(f"the query {query.name} did not finish within {QUERY_TIMEOUT_S:.0f} s")
    failure = query.exception()
    assert failure is None, str(failure)
    return query
