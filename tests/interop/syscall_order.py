"""The broker's fsyncs and socket writes, in the order it made them, seen with strace.

A :class:`SyscallTrace` attaches ``strace -f`` to a running broker (``sodalite serve`` as users start
it) and records its ``fsync``/``fdatasync`` calls and its writes to sockets, with the bytes written
(hex-escaped, ``-xx``). A test runs one operation at a time through the official SDK and asks, for the
part of the trace that operation produced, whether a commit reached the disk before the broker wrote
its answer: the first completed fsync comes before the first socket write carrying the answer's bytes.

An answer written before its commit shows as the write first and the fsync after it (or in the next
operation's part of the trace), so the check fails whichever way the order is bent.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

SYNC_DONE = re.compile(r"(?:^|\s)(?:fdatasync|fsync)\(\d+[^)]*\)\s+=\s+0\b"
                       r"|<\.\.\. (?:fdatasync|fsync) resumed>.*=\s+0\b")
SETTLE = 0.3  # strace prints a write at its exit: give it time to reach the file after the client saw the answer


def hex_escaped(data: bytes) -> str:
    """``data`` as strace ``-xx`` prints it inside a string."""
    return "".join(f"\\x{b:02x}" for b in data)


# -xx escapes the descriptors' paths too: a socket shows as 21<socket:[19525299]>, every byte escaped.
SOCKET_WRITE = re.compile(r"(?:^|\s)(?:write|writev|sendto|sendmsg)\(\d+<" + re.escape(hex_escaped(b"socket:[")))
DISPOSITION = hex_escaped(b"\x00\x53\x15")  # the disposition performative's descriptor
TRANSFER = hex_escaped(b"\x00\x53\x14")


class SyscallTrace:
    def __init__(self, pid: int, path: Path) -> None:
        self.path = path
        self._tracer = subprocess.Popen(
            ["strace", "-f", "-qq", "-y", "-xx", "-s", "65536",
             "-e", "trace=fdatasync,fsync,write,writev,sendto,sendmsg", "-o", str(path), "-p", str(pid)],
            stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached to every thread

    def mark(self) -> int:
        time.sleep(SETTLE)
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, mark: int) -> list[str]:
        time.sleep(SETTLE)
        with self.path.open("rb") as trace:
            trace.seek(mark)
            return trace.read().decode("ascii", errors="replace").splitlines()

    def close(self) -> None:
        self._tracer.send_signal(signal.SIGINT)
        self._tracer.wait(30)


def committed_before_answer(lines: list[str], *answer: str) -> tuple[bool, str]:
    """Whether a completed fsync precedes the first socket write holding every string of ``answer``
    (hex-escaped bytes); with a description of what was found, for the assertion message."""
    first_sync = next((i for i, line in enumerate(lines) if SYNC_DONE.search(line)), None)
    first_answer = next((i for i, line in enumerate(lines)
                         if SOCKET_WRITE.search(line) and all(part in line for part in answer)), None)
    described = f"first completed fsync at line {first_sync}, the answer's socket write at line {first_answer}"
    if first_answer is None:
        return False, "no socket write carried the answer: " + described
    return first_sync is not None and first_sync < first_answer, described
