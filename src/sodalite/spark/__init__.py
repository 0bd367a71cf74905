"""Sodalite on Spark: the ``sodalite`` data source (docs/spark.md). Needs the ``sodalite[spark]`` extra.

>>> from sodalite.spark import register
>>> register(spark)  # then spark.read.format("sodalite")..., df.write.format("sodalite")...
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``sodalite`` format with a SparkSession."""
    from sodalite.spark.source import SodaliteDataSource

    spark.dataSource.register(SodaliteDataSource)


__all__ = ["register"]
