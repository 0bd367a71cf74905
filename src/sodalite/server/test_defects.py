"""Test-only switches that re-enable known defects, so the fault checker (tests/checker/) can prove it
catches them. Read once from the environment variable ``SODALITE_TEST_DEFECT``; never an option, never
in ``--help``, documented in docs/reliability.md as test-only. Unset (always, outside the checker's own
tests) every switch is off and the broker behaves as it should.

- ``ack-before-commit``: a send is acknowledged before its commit, and one send in four is then never
  committed (as a crash right after such an acknowledgement would lose it);
- ``complete-not-committed``: one complete in three is acknowledged but never carried out, so the
  message comes back when its lock lapses.
"""

from __future__ import annotations

import itertools
import os
from typing import Final

ACTIVE: Final = frozenset(filter(None, os.environ.get("SODALITE_TEST_DEFECT", "").split(",")))
_counter = itertools.count()


def on(name: str) -> bool:
    return name in ACTIVE


def every(n: int) -> bool:
    """True once in ``n`` calls (deterministic), for defects that hit only some operations."""
    return next(_counter) % n == 0
