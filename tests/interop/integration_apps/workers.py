"""A library's worker command as a subprocess: started as its users start it, always stopped at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

APPS = Path(__file__).resolve().parent


class WorkerProcess:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._changed = threading.Condition()
        self._draining = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, ready: str, timeout: float = 90.0) -> WorkerProcess:
        """Start the worker (its own process group, in the apps' folder) and wait for ``ready`` in its output."""
        self.proc = subprocess.Popen(self.args, cwd=APPS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True,
                                     env={**self.env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(APPS)})
        self._draining = True
        threading.Thread(target=self._drain, daemon=True).start()
        self.wait_for(lambda line: ready in line, timeout, f"worker did not print {ready!r}")
        return self

    def wait_for(self, matches: Callable[[str], bool], timeout: float, failure: str) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.output[seen:]:
                    if matches(line):
                        return line
                seen = len(self.output)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc is not None and self.proc.poll() is not None and not self._draining):
                    raise AssertionError(f"{failure}; its last output:\n{self.tail()}")
                self._changed.wait(min(remaining, 1.0))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.output.append(line)
                self._changed.notify_all()
        with self._changed:
            self._draining = False
            self._changed.notify_all()

    def tail(self, lines: int = 40) -> str:
        return "".join(self.output[-lines:])

    def stop(self) -> None:
        """SIGTERM to the worker (its own graceful shutdown stops its pool), then SIGKILL to whatever of its
        process group is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
