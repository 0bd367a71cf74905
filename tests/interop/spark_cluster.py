"""A Spark standalone cluster for the tests: a master and two workers on 127.0.0.1, each worker with a
Python of its own, and the sodalite package shipped to the executors as users ship it.

* The daemons are the ones pyspark ships (``bin/spark-class org.apache.spark.deploy.master.Master`` and
  ``...worker.Worker``), started as processes of their own (each in its own process group, stopped
  with it), on free loopback ports, logging under the cluster's directory.
* Each worker runs with its own virtual environment first on its ``PATH``; the applications name
  their executors' Python ``python3`` (``spark.pyspark.python``), so each worker's executor runs its
  own worker's interpreter. A worker's environment holds the dependencies (pyspark, pyarrow, pandas:
  the test venv's site-packages, named by a ``.pth`` line) but not sodalite: the package reaches
  the executors only as the zip the driver ships with ``--py-files`` (``package``), built from the
  sources under test.
* A driver (``spark-submit`` of a script, or ``sodalite pipeline ... --master spark://...``) runs in
  a process of its own with :meth:`SparkCluster.driver_env`: the zip on its ``PYTHONPATH`` (the
  package "installed" on the driver's machine), this venv's ``bin`` first on its ``PATH``, so that
  ``python3`` is this interpreter (Spark also starts Python on the driver, for the data source's
  planning), and, for the CLI,
  ``PYSPARK_SUBMIT_ARGS`` carrying the same ``--py-files`` and settings ``spark-submit`` takes.

JVMs start with the C1 compiler only and the serial collector (spark_local.JVM_OPTIONS); each worker
offers one core and 1 GiB, each application asks for one 512 MiB executor per worker.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
from spark_local import JVM_OPTIONS

import sodalite

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 120.0
WORKERS = 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def build_package(into: Path) -> Path:
    """The sodalite package under test as a zip for ``--py-files`` (sources only)."""
    source = Path(sodalite.__file__).resolve().parent
    archive = into / "sodalite.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, Path("sodalite") / path.relative_to(source))
    return archive


def worker_python(into: Path) -> Path:
    """A virtual environment of its own (no pip) that sees this venv's dependencies but not sodalite."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(into)
    site_packages = next((into / "lib").glob("python*/site-packages"))
    shared = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_packages / "test-dependencies.pth").write_text("\n".join(shared) + "\n", encoding="utf-8")
    return into / "bin" / "python3"


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS",
                        "SPARK_CONF_DIR", "VIRTUAL_ENV")}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS)
    return env


@dataclass
class SparkCluster:
    base: Path
    master_url: str = ""
    package: Path = Path()
    worker_pythons: list[Path] = field(default_factory=list)
    driver_bin: Path = Path()
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def settings(self) -> list[str]:
        """The application settings every driver here passes (``--conf`` pairs)."""
        conf = {"spark.pyspark.python": "python3",  # each executor: its worker's own python3 (module docstring)
                "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": str(WORKERS),
                "spark.executor.extraJavaOptions": JVM_OPTIONS, "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", "spark.locality.wait": "0",
                "spark.sql.shuffle.partitions": "2"}
        return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]

    def submit_args(self) -> list[str]:
        """``spark-submit`` arguments before the application: the master, the package, the settings."""
        return ["--master", self.master_url, "--py-files", str(self.package),
                "--driver-java-options", JVM_OPTIONS, *self.settings()]

    def driver_env(self) -> dict[str, str]:
        env = _base_env()
        env.update(PATH=f"{self.driver_bin}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(self.package),
                   PYSPARK_PYTHON="python3", PYSPARK_DRIVER_PYTHON=sys.executable,
                   PYSPARK_SUBMIT_ARGS=shlex.join([*self.submit_args(), "pyspark-shell"]))
        return env

    def spark_submit(self, script: Path, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        env = self.driver_env()
        del env["PYSPARK_SUBMIT_ARGS"]  # (spark-submit takes them as arguments)
        return subprocess.run([str(SPARK_HOME / "bin" / "spark-submit"), *self.submit_args(), str(script), *args],
                              env=env, cwd=self.base, capture_output=True, text=True, timeout=timeout, check=False)

    def _daemon(self, name: str, args: list[str], env: dict[str, str], ready: str) -> None:
        log = self.base / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=env, cwd=self.base,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark {name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)

    def start(self) -> SparkCluster:
        self.package = build_package(self.base)
        self.driver_bin = Path(sys.executable).parent  # its python3 (a symlink elsewhere would lose the venv)
        assert (self.driver_bin / "python3").exists()
        port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        conf_dir = self.base / "conf"
        conf_dir.mkdir()
        env = {**_base_env(), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOG_DIR": str(self.base)}
        self._daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                                "--webui-port", str(free_port())], env, "I have been elected leader")
        for index in range(WORKERS):
            python = worker_python(self.base / f"worker-{index}-venv")
            self.worker_pythons.append(python)
            work = self.base / f"worker-{index}"
            work.mkdir()
            worker_env = {**env, "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}"}
            self._daemon(f"worker-{index}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                             "--port", str(free_port()), "--webui-port", str(free_port()),
                                             "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                                             self.master_url], worker_env, "Successfully registered with master")
        return self

    def stop(self) -> None:
        for proc in reversed(self.processes):  # workers (and their executors, in their groups) first
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        self.processes.clear()


def standalone_cluster(base: Path) -> Iterator[SparkCluster]:
    cluster = SparkCluster(base)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
