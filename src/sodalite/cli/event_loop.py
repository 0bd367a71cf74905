"""The event loop ``sodalite serve`` runs on: uvloop when it is installed, else asyncio's own.

uvloop (the ``fast`` extra: ``pip install 'sodalite[fast]'``) runs the same asyncio programs with
its loop, transports and timers in C (libuv): the broker's per-message work on the loop (waking
up, reading and writing sockets, the store thread's hand-offs) costs less CPU. Nothing else
changes: the broker uses only the public asyncio API. ``SODALITE_EVENT_LOOP=asyncio`` keeps the
standard loop although uvloop is installed (``uvloop`` asks for it and fails when it is missing).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "SODALITE_EVENT_LOOP"


def loop_factory() -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The loop's name and its factory (None: asyncio's default)."""
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted not in ("", "uvloop", "asyncio"):
        raise ValueError(f"{ENV}={wanted!r}: expected 'uvloop' or 'asyncio'")
    if wanted == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise ValueError(f"{ENV}=uvloop, but uvloop is not installed (pip install 'sodalite[fast]')") from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], factory: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """``asyncio.run(main)`` on the loop ``factory`` makes (None: asyncio's default)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
