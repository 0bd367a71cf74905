"""The accept-failure report: once per interval, with the count of what it did not repeat (13.13)."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from sodalite.server.limits import AcceptFailureLog


def test_out_of_descriptors_is_reported_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    handler = AcceptFailureLog(interval=10.0, clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    failure = {"message": "socket.accept() out of system resource",
               "exception": OSError(errno.EMFILE, "Too many open files")}
    try:
        with caplog.at_level(logging.ERROR, logger="sodalite.server.limits"):
            for _ in range(5):
                handler(loop, failure)
                now[0] += 1.0
            now[0] += 10.0
            handler(loop, failure)
    finally:
        loop.close()
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 2
    assert "Too many open files" in reports[0]
    assert "4 more since the last report" in reports[1]
