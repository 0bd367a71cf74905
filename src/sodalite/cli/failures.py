"""How a command ends on an error it expects: one line on stderr and an exit code.

A command lists the errors it expects in a table, most specific first; the first row whose type
matches decides the line and the code. An error no row names is not caught.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

Kinds = type[BaseException] | tuple[type[BaseException], ...]
Failure = tuple[Kinds, int, Callable[[Any], str]]  # the error type(s), the exit code, the line to print


def exit_code(work: Callable[[], int], failures: Sequence[Failure]) -> int:
    """Run ``work`` and return its exit code; an error that a row of ``failures`` names is printed
    on stderr as the first such row says, and that row's code is returned."""
    try:
        return work()
    except tuple(_flat(failures)) as exc:
        for kinds, code, line in failures:
            if isinstance(exc, kinds):
                print(line(exc), file=sys.stderr)
                return code
        raise


def _flat(failures: Sequence[Failure]) -> list[type[BaseException]]:
    return [kind for kinds, _, _ in failures for kind in (kinds if isinstance(kinds, tuple) else (kinds,))]
