"""The start of the CLI's finite Spark runs (sodalite.cli.spark_start): which driver JVM options and which
class archive a run gets, and how a first run's archive is put in place. The JVM really writing and mapping
an archive is in tests/interop/test_spark_cli_start.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sodalite.cli import pipeline, spark_start


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(spark_start.CACHE_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    return tmp_path / "cache"


def started(monkeypatch: pytest.MonkeyPatch, finite: bool) -> dict[str, str]:
    """The settings the CLI starts Spark with (the session itself is not started here)."""
    seen: dict[str, str] = {}

    def session(master: str, name: str, config: dict[str, str]) -> object:
        seen.update(config)
        return object()

    monkeypatch.setattr("sodalite.spark.session", session)
    pipeline._session("local[2]", "t", finite)
    return seen


def test_a_first_finite_run_writes_the_archive_and_a_later_one_maps_it(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    first = started(monkeypatch, finite=True)
    options = first["spark.driver.extraJavaOptions"]
    assert options.startswith(spark_start.QUICK_START_JVM_OPTIONS)
    assert f"-XX:ArchiveClassesAtExit={cache}/" in options and ".part" in options
    assert "-Xlog:cds=off" in options  # the JVM's notes about skipped classes stay off the user's output
    assert first["spark.ui.enabled"] == "false"
    archive = spark_start.class_archive(spark_start.QUICK_START_JVM_OPTIONS)
    assert archive is not None and archive.part is not None
    archive.path.write_bytes(b"archive")  # as a first run leaves it
    later = started(monkeypatch, finite=True)["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={archive.path}" in later and "ArchiveClassesAtExit" not in later


def test_the_users_driver_options_and_a_pipeline_that_runs_on_get_spark_as_it_is(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    assert started(monkeypatch, finite=False) == {"spark.ui.showConsoleProgress": "false"}
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", '--driver-java-options "-Xmx2g" pyspark-shell')
    chosen = started(monkeypatch, finite=True)
    assert "spark.driver.extraJavaOptions" not in chosen
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=true pyspark-shell")
    assert "spark.ui.enabled" not in started(monkeypatch, finite=True)
    assert not cache.exists() or not list(cache.glob("*.jsa"))


def test_no_cache_directory_means_no_archive(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    monkeypatch.setenv(spark_start.CACHE_VARIABLE, "off")
    assert spark_start.class_archive(spark_start.QUICK_START_JVM_OPTIONS) is None
    options = started(monkeypatch, finite=True)["spark.driver.extraJavaOptions"]
    assert options == spark_start.QUICK_START_JVM_OPTIONS


def test_another_java_or_spark_or_options_names_another_archive(tmp_path: Path) -> None:
    java, jars = tmp_path / "java", tmp_path / "jars"
    java.write_bytes(b"java")
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"1")
    key = spark_start.archive_key(java, jars, "-XX:+UseSerialGC")
    assert key == spark_start.archive_key(java, jars, "-XX:+UseSerialGC")
    assert key != spark_start.archive_key(java, jars, "-XX:+UseG1GC")
    (jars / "spark-core.jar").write_bytes(b"22")  # another Spark
    assert spark_start.archive_key(java, jars, "-XX:+UseSerialGC") != key
    newer = spark_start.archive_key(java, jars, "-XX:+UseSerialGC")
    (jars / "extra.jar").write_bytes(b"3")
    assert spark_start.archive_key(java, jars, "-XX:+UseSerialGC") != newer


def jvm(part: Path, code: int) -> Any:
    """A stand-in for the gateway's JVM: it waits for its input to close, writes the archive, exits."""
    script = f"import sys; sys.stdin.read(); open({str(part)!r}, 'wb').write(b'classes'); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_a_whole_archive_is_put_in_place_and_replaces_one_for_another_spark(tmp_path: Path) -> None:
    old = tmp_path / "0123.jsa"
    old.write_bytes(b"old")
    archive = spark_start.ClassArchive(tmp_path / "abcd.jsa", tmp_path / "abcd.x.part")
    assert spark_start.finish_archive(archive, jvm(archive.path.with_suffix(".x.part"), 0), wait_s=60)
    assert archive.path.read_bytes() == b"classes"
    assert not old.exists() and not list(tmp_path.glob("*.part"))


def test_a_jvm_that_failed_leaves_no_archive(tmp_path: Path) -> None:
    archive = spark_start.ClassArchive(tmp_path / "abcd.jsa", tmp_path / "abcd.x.part")
    assert not spark_start.finish_archive(archive, jvm(tmp_path / "abcd.x.part", 3), wait_s=60)
    assert not archive.path.exists() and not list(tmp_path.glob("*.part"))
    using = spark_start.ClassArchive(tmp_path / "abcd.jsa", None)  # a run that maps one writes nothing
    assert not spark_start.finish_archive(using, jvm(tmp_path / "y.part", 0))
