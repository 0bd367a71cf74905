"""Namespace geo-replication: a node's role, and the sequence-number epochs. Pure and clock-free.

Theory of operation. A namespace runs in two sites; a site is a PostgreSQL cluster and the broker
nodes on it, and the secondary site's database is a streaming replica of the primary's. Sodalite
never decides which database is the primary: the operator promotes (``sodalite geo promote``), and
every node derives its role from what its own database, and the other site's, say:

- its database unreachable: not serving (``unreachable``);
- its database in recovery (a standby): ``secondary``;
- its database writable, but the namespace's geo record (a row the promotion writes, replicated
  with everything else) names the other site, or the database is read-only (a planned promotion
  has stopped it): ``fenced``;
- its database writable and the record names this site, but the other site's database is a
  writable primary at a higher epoch (this site is an old primary restarted before it was
  rewound): ``fenced``;
- otherwise ``primary``. A writable database with no record yet is the first primary: its nodes
  write the record naming their site (``claim``), unless the other site is already a primary.

Only ``primary`` serves clients; the others answer ``com.microsoft:server-busy`` (HTTP 503).

Epochs. A forced promotion may lose what the old primary committed after the secondary's last
replayed transaction, including sequence numbers it gave to acknowledged sends. So that a number
is never given twice (and a Spark stream's offsets stay valid), the promotion moves every
partition's counter to the start of the epoch after next: a partition's own 48-bit number space
is split into 2**16 epochs of 2**32 numbers, and the next number after a forced promotion is the
first of epoch ``e + 2``, where ``e`` is the epoch of the highest number replicated. The old
primary would have had to give 2**32 numbers in one partition beyond what was replicated to
reach it (days of a partition's full rate), so nothing it may have given is given again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from sodalite.errors import ArgumentError

PARTITION_SHIFT: Final = 48  # a partitioned entity's sequence numbers carry the partition in the top 16 bits
EPOCH_BITS: Final = 32  # numbers per epoch: 2**32
LOCAL_LIMIT: Final = 1 << PARTITION_SHIFT  # a partition's own numbers stay below this
EPOCHS_PER_FORCED_PROMOTION: Final = 2  # the counter moves to the start of the epoch after next


class Role(enum.StrEnum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    FENCED = "fenced"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class DatabaseView:
    """What one site's database said when asked (``reachable`` False: it did not answer)."""

    reachable: bool
    in_recovery: bool = False
    read_only: bool = False
    primary_site: str | None = None  # the geo record's site; None: no record yet
    epoch: int = 0  # the geo record's epoch (promotions so far)


@dataclass(frozen=True, slots=True)
class RoleDecision:
    role: Role
    reason: str
    claim: bool = False  # write the geo record naming this site (the first primary)

    @property
    def serving(self) -> bool:
        return self.role is Role.PRIMARY


def decide_role(site: str, local: DatabaseView, peer: DatabaseView | None) -> RoleDecision:
    """This node's role in ``site`` (see the module docstring); ``peer`` is None when no other
    site is configured."""
    if not local.reachable:
        return RoleDecision(Role.UNREACHABLE, "this site's database does not answer")
    if local.in_recovery:
        return RoleDecision(Role.SECONDARY, "this site's database is a standby (in recovery)")
    peer_primary = peer is not None and peer.reachable and not peer.in_recovery
    if local.primary_site is None:
        if peer_primary and peer is not None and peer.primary_site not in (None, site):
            return RoleDecision(Role.FENCED, f"site '{peer.primary_site}' is the primary")
        return RoleDecision(Role.PRIMARY, "this site's database is the primary (first start)", claim=True)
    if local.primary_site != site:
        return RoleDecision(Role.FENCED, f"the namespace's primary is site '{local.primary_site}'")
    if local.read_only:
        return RoleDecision(Role.FENCED, "this site's database is read-only (a planned promotion stopped it)")
    if peer_primary and peer is not None and peer.epoch > local.epoch:
        return RoleDecision(Role.FENCED, f"site '{peer.primary_site}' was promoted (epoch {peer.epoch} > "
                                         f"{local.epoch}): rejoin this site as its secondary (pg_rewind)")
    return RoleDecision(Role.PRIMARY, "this site's database is the primary")


def epoch_of(sequence_number: int) -> int:
    """The epoch of a sequence number (within its partition's own numbers)."""
    return (sequence_number % LOCAL_LIMIT) >> EPOCH_BITS


def counter_after_forced_promotion(high_water: int, partition: int) -> int:
    """A partition's new high-water mark after a forced promotion: the last number of epoch
    ``e + 1`` (so the next number given is the first of epoch ``e + 2``), where ``e`` is the epoch
    of the highest number replicated. Never below ``high_water``."""
    if partition < 0 or partition >= 1 << (63 - PARTITION_SHIFT):
        raise ArgumentError(f"partition {partition}: out of range")
    base = partition << PARTITION_SHIFT
    local = max(high_water - base, 0)
    moved = ((local >> EPOCH_BITS) + EPOCHS_PER_FORCED_PROMOTION) << EPOCH_BITS
    if moved >= LOCAL_LIMIT:
        raise ArgumentError(f"partition {partition}: its sequence numbers have no epoch left "
                            f"(high-water mark {high_water})")
    return base + moved


# -- LSNs --------------------------------------------------------------------------------------------

def parse_lsn(text: str) -> int:
    """A PostgreSQL LSN (``16/B374D848``) as a byte position."""
    high, sep, low = text.partition("/")
    if not sep:
        raise ArgumentError(f"{text!r} is not an LSN (HIGH/LOW in hexadecimal)")
    try:
        return (int(high, 16) << 32) + int(low, 16)
    except ValueError:
        raise ArgumentError(f"{text!r} is not an LSN (HIGH/LOW in hexadecimal)") from None


def format_lsn(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


# -- the promotion, as an operator asks for it -----------------------------------------------------

class PromotionMode(enum.StrEnum):
    PLANNED = "planned"
    FORCED = "forced"


def check_promotion(mode: PromotionMode, target: DatabaseView, other: DatabaseView) -> None:
    """Refuse a promotion that cannot be done as asked, before anything changes (ArgumentError,
    its text saying why and what to do). ``target`` is the site to promote, ``other`` the one that
    is primary now."""
    if not target.reachable:
        raise ArgumentError("the site to promote does not answer: nothing was changed")
    if not target.in_recovery:
        raise ArgumentError("the site to promote is already a primary (its database is not in recovery): "
                            "nothing was changed")
    if mode is PromotionMode.PLANNED:
        if not other.reachable:
            raise ArgumentError("the primary site does not answer, so a planned promotion cannot wait for "
                                "the secondary to catch up: nothing was changed. Use --forced to promote now "
                                "(messages not yet replicated may be lost)")
        if other.in_recovery:
            raise ArgumentError("neither site is a primary (both databases are in recovery): nothing was "
                                "changed. Use --forced to promote the secondary")
