"""Progress of a long command-line operation (export, redrive, resubmit or move of many, syphon, purge).

On a terminal one status line is rewritten in place (count, rate, and the time left when the total
or the backlog is known), at most a few times a second; elsewhere (a pipe, a log file) a plain line
is written every ``every`` seconds, so logs stay readable. ``finish`` clears the status line and
prints the one-line summary either way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_REFRESH_S = 0.2


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class Progress:
    """``update`` as the work goes; ``finish`` with the summary line."""

    def __init__(self, verb: str, *, noun: str = "messages", stream: TextIO | None = None, every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, terminal: bool | None = None) -> None:
        self.verb, self.noun = verb, noun
        self.stream = stream if stream is not None else sys.stdout
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.every = every
        self.clock = clock
        self.started = clock()
        self.done = 0
        self._shown_at: float | None = None
        self._width = 0

    def rate(self) -> float:
        elapsed = self.clock() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, *, total: int | None = None, remaining: int | None = None, rate: float | None = None,
             detail: str = "") -> str:
        speed = self.rate() if rate is None else rate
        text = f"{self.verb} {self.done}" + (f" of {total}" if total is not None else "") + f" {self.noun}"
        text += f", {speed:.0f} msg/s"
        left = remaining if remaining is not None else (total - self.done if total is not None else None)
        if left is not None and left > 0 and speed > 0:
            text += f", about {duration(left / speed)} left"
        elif left is not None and left > 0 and self.terminal:
            text += f", {left} to go"
        elapsed = self.clock() - self.started
        if self.terminal:
            text += f" ({duration(elapsed)})"
        return text + (f", {detail}" if detail else "")

    def update(self, done: int, *, total: int | None = None, remaining: int | None = None,
               rate: float | None = None, detail: str = "", force: bool = False) -> None:
        self.done = done
        now = self.clock()
        wait = TERMINAL_REFRESH_S if self.terminal else self.every
        if not force and self._shown_at is not None and now - self._shown_at < wait:
            return
        if not force and self._shown_at is None and not self.terminal and now - self.started < self.every:
            return  # a short operation prints its summary only
        self._shown_at = now
        text = self.line(total=total, remaining=remaining, rate=rate, detail=detail)
        if self.terminal:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, summary: str) -> None:
        """Clear the status line (on a terminal) and print ``summary`` (nothing when it is empty)."""
        if self.terminal and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        if summary:
            self.stream.write(summary + "\n")
        self.stream.flush()

    def elapsed(self) -> str:
        return duration(self.clock() - self.started)
