"""Start a command the way a terminal would for a test that stops it with Ctrl-C (SIGINT).

A process that inherits SIGINT ignored keeps it ignored across exec, and Python then installs no
KeyboardInterrupt handler: a test run from a background job of a non-interactive shell (POSIX ignores
SIGINT and SIGQUIT there; some CI runners do the same) would send a Ctrl-C that cannot arrive and wait
for its timeout. Pass ``preexec_fn=ctrl_c_at_default`` to ``subprocess.Popen``.
"""

from __future__ import annotations

import signal


def ctrl_c_at_default() -> None:
    """In the child between fork and exec: SIGINT back to its default action."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
