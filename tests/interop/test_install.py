"""Installing Sodalite as a user does: the base install (no extras) serves SQLite, a wheel built with
`python -m build` and installed into a clean virtual environment serves (with the console's files), and
a missing extra is refused with a command that installs it from where this copy came from."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

ROOT = Path(__file__).resolve().parents[2]
SODALITE = Path(sys.executable).parent / "sodalite"
FREE = ["--host", "127.0.0.1", "--port", "0", "--amqps-port", "0", "--admin-port", "0", "--http-port", "0"]


@pytest.fixture
def without_psycopg(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import psycopg` fails, as in an install without the postgresql extra."""
    shim = tmp_path / "no-psycopg"
    for name in ("psycopg", "psycopg_pool"):
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


class Served:
    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.connection_string = ""
        self.http_port = 0
        deadline = time.monotonic() + 120
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("the broker exited during startup:\n" + "".join(self.lines))
            self.lines.append(line)
            http = re.search(r"Management \(HTTP\): http://[^:]+:(\d+)", line)
            if http:
                self.http_port = int(http.group(1))
            found = re.search(r"Connection string: (\S+)", line)
            if found:
                self.connection_string = found.group(1)
                return
        raise AssertionError("the broker printed no connection string:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _round_trip(connection: str, body: str) -> None:
    with ServiceBusClient.from_connection_string(connection) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver("queue.1", max_wait_time=10) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [str(m) for m in received] == [body]
            receiver.complete_message(received[0])


def test_serve_without_the_postgresql_extra_serves_sqlite(without_psycopg: dict[str, str], tmp_path: Path) -> None:
    broker = Served([str(SODALITE), "serve", *FREE, "--data-dir", str(tmp_path / "data")], without_psycopg)
    try:
        _round_trip(broker.connection_string, "no psycopg needed")
    finally:
        broker.stop()


def test_a_postgresql_store_without_the_extra_names_the_extra_and_a_command_that_installs_it(
        without_psycopg: dict[str, str], tmp_path: Path) -> None:
    result = subprocess.run([str(SODALITE), "serve", *FREE, "--data-dir", str(tmp_path / "data"),
                             "--store", "postgresql://u:p@127.0.0.1:1/db"],
                            capture_output=True, text=True, env=without_psycopg, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "'postgresql' extra" in result.stderr
    # From a clone: an editable install of this very checkout, not a PyPI name that does not exist.
    assert f"pip install -e '{ROOT}[postgresql]'" in result.stderr, result.stderr


def test_the_pipelines_without_the_spark_extra_name_the_extra_and_a_command_that_installs_it(tmp_path: Path) -> None:
    shim = tmp_path / "no-spark" / "pyspark"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(shim.parent), os.environ.get("PYTHONPATH", ""))
                                                       if p)}
    result = subprocess.run([str(SODALITE), "pipeline", "export", "q", "--path", str(tmp_path / "out"),
                             "--checkpoint", str(tmp_path / "cp")], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "'spark' extra" in result.stderr and f"pip install -e '{ROOT}[spark]'" in result.stderr, result.stderr


@pytest.fixture
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A wheel built with `python -m build` from a copy of the tree, installed without extras into a new
    virtual environment (its dependencies from the package index, through pip's cache)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(source)],
                   check=True, capture_output=True, env=clean, timeout=400)
    wheel = next((work / "dist").glob("sodalite-*.whl"))
    (work / "wheel-name").write_text(str(wheel))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                    str(wheel)], check=True, capture_output=True, env=clean, timeout=400)
    yield venv


def test_a_wheel_installed_into_a_clean_venv_serves_with_its_console(wheel_venv: Path, tmp_path: Path) -> None:
    # The wheel's metadata: no driver in the base install; AMQP over WebSockets comes with the client extra.
    wheel = Path((wheel_venv.parent / "wheel-name").read_text())
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.removeprefix("Requires-Dist: ") for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ")]
    base = [r for r in requires if "extra ==" not in r]
    assert not [r for r in base if r.startswith(("psycopg", "pyspark", "azure-servicebus", "websocket-client"))], base
    assert any(r.startswith("websocket-client") and 'extra == "client"' in r for r in requires), requires
    assert any(r.startswith("build") and 'extra == "dev"' in r for r in requires), requires
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = wheel_venv / "bin" / "python"
    # The installed package is the wheel's, not this checkout's; none of the extras came with it.
    probe = ("import sodalite, importlib.util as u; print(sodalite.__file__); "
             "print([m for m in ('psycopg', 'pyspark', 'azure') if u.find_spec(m)])")
    where = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True,
                           env=clean).stdout.splitlines()
    assert where[0].startswith(str(wheel_venv)) and where[1] == "[]", where
    # A missing extra names a command that installs it into this installation: the wheel it came from.
    refused = subprocess.run([str(wheel_venv / "bin" / "sodalite"), "pipeline", "export", "q", "--path",
                              str(tmp_path / "out"), "--checkpoint", str(tmp_path / "cp")],
                             capture_output=True, text=True, env=clean, timeout=60)
    assert refused.returncode == 2 and "'spark' extra" in refused.stderr, refused.stderr
    assert re.search(r"pip install '\S+sodalite-[^' ]+\.whl\[spark\]'", refused.stderr), refused.stderr
    broker = Served([str(wheel_venv / "bin" / "sodalite"), "serve", *FREE, "--data-dir", str(tmp_path / "data")],
                    {**clean, "PYTHONUNBUFFERED": "1"})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/console/", timeout=10) as page:
            html = page.read().decode()
        assert page.status == 200 and "<html" in html.lower()
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/console/console.js", timeout=10) as script:
            assert script.status == 200 and len(script.read()) > 1000
        _round_trip(broker.connection_string, "from the wheel")
    finally:
        broker.stop()
