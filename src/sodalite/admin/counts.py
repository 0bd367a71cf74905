"""An entity's runtime counts, as the control plane reads them and the management API answers them
(CountDetails and SizeInBytes). A module of its own so that the CLI's client commands, which read
them from the ATOM feed, need not import the control plane."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EntityCounts:
    active: int = 0
    dead_letter: int = 0
    scheduled: int = 0
    deferred: int = 0
    transfer: int = 0
    transfer_dead_letter: int = 0
    size_in_bytes: int = 0
