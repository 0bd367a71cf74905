"""Sodalite on Spark: the ``sodalite`` data source (docs/spark.md). Needs the ``spark`` extra.

>>> from sodalite.spark import session
>>> spark = session()  # a local session with the format registered and its workers on this Python

or, with a session of one's own:

>>> from sodalite.spark import register
>>> register(spark)  # then spark.read.format("sodalite")..., df.write.format("sodalite")...
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sodalite.extras import MissingExtra

#: Settings that choose the Python a Spark worker runs (spark-submit turns the first into the second).
WORKER_PYTHON_SETTINGS = ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON")


def register(spark: Any) -> None:
    """Register the ``sodalite`` format with a SparkSession."""
    try:
        from sodalite.spark.source import SodaliteDataSource
    except ImportError as exc:
        if isinstance(exc, MissingExtra) or (exc.name or "").split(".")[0] not in ("pyspark", "pyarrow", "pandas"):
            raise
        raise MissingExtra("spark", "the sodalite data source", exc) from None

    spark.dataSource.register(SodaliteDataSource)


def _cluster_defaults() -> dict[str, str]:
    """The settings of the cluster's ``spark-defaults.conf`` ($SPARK_CONF_DIR, else $SPARK_HOME/conf)."""
    folder = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if os.environ.get("SPARK_HOME") else None)
    if folder is None:
        return {}
    try:
        lines = (Path(folder) / "spark-defaults.conf").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    settings: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, *value = re.split(r"\s*[=:\s]\s*", line, maxsplit=1)  # java.util.Properties' separators
            settings[key] = value[0] if value else ""
    return settings


def worker_python_chosen(config: Mapping[str, str] | None = None) -> bool:
    """Whether the user or the cluster already said which Python Spark's workers run."""
    if os.environ.get("PYSPARK_PYTHON"):
        return True
    given = dict(config or {})
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if any(name in given or name in submit_args for name in WORKER_PYTHON_SETTINGS):
        return True
    return any(name in _cluster_defaults() for name in WORKER_PYTHON_SETTINGS)


def session(master: str | None = "local[*]", app_name: str = "sodalite",
            config: Mapping[str, str] | None = None) -> Any:
    """A SparkSession with the ``sodalite`` format registered, its workers running this Python.

    Spark starts its Python workers with ``$PYSPARK_PYTHON``, else ``python3`` from the PATH, which
    in a virtual environment is not the Python that has Sodalite installed: a job run as
    ``.venv/bin/python job.py`` then fails in the workers with ``No module named 'sodalite'``. So when
    neither the user (``PYSPARK_PYTHON``, ``spark.pyspark.python`` in ``config`` or
    ``PYSPARK_SUBMIT_ARGS``) nor the cluster (its ``spark-defaults.conf``) has chosen, the workers
    run this Python (``sys.executable``). ``master=None`` leaves the master to the cluster's settings.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise MissingExtra("spark", "sodalite.spark", exc) from None
    if not worker_python_chosen(config):
        os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


__all__ = ["WORKER_PYTHON_SETTINGS", "register", "session", "worker_python_chosen"]
