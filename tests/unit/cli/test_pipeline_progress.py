"""`sodalite pipeline`'s progress: a status line on a terminal (messages moved, rate, lag), nothing but the
summary elsewhere unless --progress asks for lines. The query is a stand-in with the fields Spark's
StreamingQuery reports (recentProgress, lastProgress with each source's latest and end offsets); the
real runs are in tests/interop/test_spark_pipelines_*.py and test_spark_cluster.py."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest

pytest.importorskip("pyspark")

from sodalite.cli import pipeline
from sodalite.cli.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Query:
    """Three micro-batches of 100 rows over two partitions (250 left in two partitions, then 100 in one,
    then none), then the end."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.batches = 0
        self.recentProgress: list[dict[str, Any]] = []
        self.lastProgress: dict[str, Any] | None = None

    @property
    def isActive(self) -> bool:
        return self.batches < 3

    def awaitTermination(self, timeout: float) -> bool:
        self.clock.now += timeout
        self.batches += 1
        latest = {"entity": "orders", "partitions": {"0": 400, "1": 300}}
        end = {"entity": "orders", "partitions": {"0": 100 + 100 * self.batches, "1": 300 if self.batches > 1 else 250}}
        self.lastProgress = {"batchId": self.batches, "numInputRows": 100, "processedRowsPerSecond": 250.0,
                             "sources": [{"latestOffset": json.dumps(latest), "endOffset": json.dumps(end)}]}
        self.recentProgress.append(self.lastProgress)
        return not self.isActive

    def exception(self) -> None:
        return None


class Session:
    def stop(self) -> None:
        pass


def watch(*, terminal: bool, progress: bool) -> list[str]:
    clock, stream = Clock(), io.StringIO()
    shown = Progress("moved", stream=stream, clock=clock, terminal=terminal, every=5.0)
    args = argparse.Namespace(progress=progress, progress_interval=5.0)
    assert pipeline._watch(Session(), Query(clock), "moved", args, shown) == 0
    return stream.getvalue().split("\n")


def test_on_a_terminal_a_status_line_shows_rows_rate_and_lag() -> None:
    text = "\n".join(watch(terminal=True, progress=False))
    assert "\rmoved 100 messages, 250 msg/s, about 1 s left (1 s), lag 250 in 2 of 2 partitions" in text
    assert "\rmoved 200 messages, 250 msg/s" in text and "lag 100 in 1 of 2 partitions" in text
    assert "\rmoved 300 messages, 250 msg/s (3 s), lag 0" in text
    assert text.rstrip("\n").endswith("moved 300 messages in 3 s")


def test_not_a_terminal_is_quiet_but_for_the_summary() -> None:
    assert watch(terminal=False, progress=False) == ["moved 300 messages in 15 s", ""]


def test_not_a_terminal_with_progress_a_line_each_interval_with_each_lagging_partition() -> None:
    lines = watch(terminal=False, progress=True)
    assert lines == ["moved 100 messages, 250 msg/s, about 1 s left, lag orders#0=200, orders#1=50",
                     "moved 200 messages, 250 msg/s, about 0 s left, lag orders#0=100",
                     "moved 300 messages, 250 msg/s, lag 0",
                     "moved 300 messages in 15 s", ""]


def test_the_pipeline_commands_take_progress_options() -> None:
    parser = argparse.ArgumentParser()
    pipeline.register(parser.add_subparsers())
    for command in (["export", "q", "--path", "p"], ["replicate", "q", "--target-connection-string", "t"],
                    ["syphon", "--primary", "p", "--secondary", "s"]):
        args = parser.parse_args(["pipeline", *command, "--checkpoint", "c", "--progress", "--progress-interval", "2"])
        assert args.progress and args.progress_interval == 2.0
    args = parser.parse_args(["pipeline", "redrive", "q"])
    assert not args.progress and args.progress_interval == 5.0
