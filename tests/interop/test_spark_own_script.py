"""The Spark data source from one's own script, run as `.venv/bin/python job.py` with no PYSPARK_PYTHON:
`sodalite.spark.session()` makes the workers run this Python, so they can import sodalite (without it they
run `python3` from the PATH and fail with `No module named 'sodalite'`). A worker Python the user chose
is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess
from spark_local import JVM_OPTIONS

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, sys
sys.path.insert(0, {src!r})  # the driver imports this checkout, as it would an installed sodalite
from sodalite.spark import session

spark = session("local[1]", "own-script", {{
    "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": {jvm!r}}})
rows = (spark.read.format("sodalite").option("connectionString", {conn!r}).option("entity", "queue.1")
        .load().select("body").collect())
import os
print("WORKER_PYTHON", os.environ.get("PYSPARK_PYTHON"))
print("BODIES", json.dumps(sorted(bytes(r.body).decode() for r in rows)))
spark.stop()
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-own-script"), None).start()
    with ServiceBusClient.from_connection_string(process.connection_string) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
    try:
        yield process
    finally:
        process.stop()


def _user_environment(**extra: str) -> dict[str, str]:
    """A user's shell: no PYSPARK_PYTHON, no PYTHONPATH, and the virtual environment not on the PATH
    (they run `.venv/bin/python job.py`), so Spark's default worker `python3` is another Python."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_SUBMIT_ARGS")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return {**env, **extra}


def _run_job(tmp_path: Path, broker: BrokerProcess, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "job.py"
    job.write_text(JOB.format(src=str(ROOT / "src"), jvm=JVM_OPTIONS, conn=broker.connection_string))
    return subprocess.run([sys.executable, str(job)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=400)


def test_a_job_run_with_the_venv_python_reads_through_workers_on_that_python(
        broker: BrokerProcess, tmp_path: Path) -> None:
    result = _run_job(tmp_path, broker, _user_environment())
    assert result.returncode == 0, result.stderr[-4000:]
    assert "No module named 'sodalite'" not in result.stderr
    assert 'BODIES ["m0", "m1", "m2"]' in result.stdout
    assert f"WORKER_PYTHON {sys.executable}" in result.stdout


def test_a_worker_python_the_user_chose_is_kept(broker: BrokerProcess, tmp_path: Path) -> None:
    chosen = str(Path(sys.executable).parent / "python3")  # another name of a Python that has sodalite
    result = _run_job(tmp_path, broker, _user_environment(PYSPARK_PYTHON=chosen))
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"WORKER_PYTHON {chosen}" in result.stdout
