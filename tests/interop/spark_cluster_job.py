"""A job for `spark-submit` to the test cluster (tests/interop/test_spark_cluster.py): read an entity
with the `sodalite` data source, write it to Parquet, and report where the executors' Python and
sodalite came from.

    spark-submit --master spark://... --py-files sodalite.zip spark_cluster_job.py CONNECTION ENTITY OUT
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator

from sodalite.spark import session

EXECUTORS_WAIT_S = 120.0


def where(_: Iterator[int]) -> Iterator[tuple[str, str, str, int]]:
    import sodalite

    time.sleep(0.5)  # long enough for the tasks to spread over every executor
    yield sys.executable, sys.prefix, str(sodalite.__file__), os.getpid()


def main() -> None:
    connection, entity, out = sys.argv[1:4]
    spark = session(None, "sodalite-cluster-job")  # the master is spark-submit's
    context = spark.sparkContext
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    while context._jsc.sc().getExecutorMemoryStatus().size() < 3:  # the driver and both executors
        if time.monotonic() > deadline:
            raise SystemExit("the executors did not register")
        time.sleep(0.5)
    df = spark.read.format("sodalite").option("connectionString", connection).option("entity", entity).load()
    df.select("messageId", "body", "partition", "sequenceNumber").write.parquet(out)
    seen = context.parallelize(range(8), 8).mapPartitions(where).collect()
    print("EXECUTORS " + json.dumps(sorted({(e, p, f) for e, p, f, _ in seen})), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
