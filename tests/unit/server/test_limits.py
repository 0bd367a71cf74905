"""The accept-failure report: once per interval, with the count of what it did not repeat (13.13)."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from sodalite.server.limits import EVICT_AFTER_S, AcceptFailureLog, Admission, ConnectionLimits, admit


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


# ---- the allowance of connections not yet authenticated ----------------------------------------------

def test_the_allowance_stays_below_the_connection_limit() -> None:
    assert ConnectionLimits().unauthenticated_allowance() == 500
    assert ConnectionLimits(max_connections=10, max_unauthenticated=50).unauthenticated_allowance() == 9
    assert ConnectionLimits(max_connections=1).unauthenticated_allowance() == 1
    assert ConnectionLimits(handshake_timeout=7).authentication_deadline == 7
    assert ConnectionLimits(handshake_timeout=7, auth_timeout=2).authentication_deadline == 2


def test_a_newcomer_is_admitted_within_both_limits() -> None:
    limits = ConnectionLimits(max_connections=10, max_unauthenticated=3)
    assert admit(limits, connections=9, unauthenticated=2, oldest_wait=0.0) is Admission.ADMIT


def test_a_full_allowance_makes_the_longest_waiting_give_way_once_it_had_its_chance() -> None:
    limits = ConnectionLimits(max_connections=10, max_unauthenticated=3)
    assert admit(limits, connections=3, unauthenticated=3, oldest_wait=EVICT_AFTER_S) is Admission.EVICT_OLDEST
    # a burst of clients still authenticating is not thinned: the newcomer waits its turn
    assert admit(limits, connections=3, unauthenticated=3, oldest_wait=0.2) is Admission.REFUSE_UNAUTHENTICATED


def test_full_slots_are_freed_from_unauthenticated_connections_only() -> None:
    limits = ConnectionLimits(max_connections=10, max_unauthenticated=3)
    assert admit(limits, connections=10, unauthenticated=1, oldest_wait=5.0) is Admission.EVICT_OLDEST
    assert admit(limits, connections=10, unauthenticated=0, oldest_wait=None) is Admission.REFUSE_FULL
