"""Test-only switches that re-enable known defects, so the fault checker (tests/checker/) can prove it
catches them. Read once from the environment variable ``SODALITE_TEST_DEFECT``; never an option, never
in ``--help``, documented in docs/reliability.md as test-only. Unset (always, outside the checker's own
tests) every switch is off and the broker behaves as it should.

- ``ack-before-commit``: a send is acknowledged before its commit, and one send in four is then never
  committed (as a crash right after such an acknowledgement would lose it);
- ``complete-not-committed``: one complete in three is acknowledged but never carried out, so the
  message comes back when its lock lapses;
- ``rad-drop``: ReceiveAndDelete messages taken for a receiver that left before their transfers were
  written (deleted already) are dropped instead of put back under their own numbers
  (``CoreActor.unsent``);
- ``size-after-move``: the byte count (``SizeInBytes``) is not read again after rows are moved into a
  sub-queue (a move or resubmit through the management API, a dead-lettering:
  ``CoreActor.arrived``) nor after a partition's own move or purge commits (``PartitionRunner``), so
  it stays stale while the broker runs;
- ``no-data-lock``: ``serve`` does not take its OS lock on the data directory (``cli/main.py``), so a
  second broker on the same directory is not refused, and removes the ``endpoints.json`` it
  overwrote when it exits.
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
