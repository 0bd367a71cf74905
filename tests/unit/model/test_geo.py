"""Geo-replication's pure parts: a node's role from what the two databases say, the epoch rule for
sequence numbers after a forced promotion, LSNs, and the checks that refuse a promotion."""

from __future__ import annotations

import pytest

from sodalite.errors import ArgumentError
from sodalite.model.geo import (
    EPOCH_BITS,
    PARTITION_SHIFT,
    DatabaseView,
    PromotionMode,
    Role,
    check_promotion,
    counter_after_forced_promotion,
    decide_role,
    epoch_of,
    format_lsn,
    parse_lsn,
)

PRIMARY_A = DatabaseView(reachable=True, primary_site="a", epoch=1)
STANDBY = DatabaseView(reachable=True, in_recovery=True, primary_site="a", epoch=1)
DOWN = DatabaseView(reachable=False)


def test_a_standby_makes_a_secondary() -> None:
    assert decide_role("b", STANDBY, PRIMARY_A).role is Role.SECONDARY
    assert decide_role("b", STANDBY, DOWN).role is Role.SECONDARY


def test_an_unreachable_database_serves_nothing() -> None:
    decision = decide_role("a", DOWN, STANDBY)
    assert decision.role is Role.UNREACHABLE and not decision.serving


def test_the_primary_serves_whether_or_not_the_other_site_answers() -> None:
    assert decide_role("a", PRIMARY_A, STANDBY).serving
    assert decide_role("a", PRIMARY_A, DOWN).serving
    assert decide_role("a", PRIMARY_A, None).serving


def test_a_promoted_database_whose_record_names_the_other_site_waits_for_the_promotion_to_finish() -> None:
    # Between pg_promote() and the transaction that moves the counters and names the new site.
    decision = decide_role("b", DatabaseView(reachable=True, primary_site="a", epoch=1), DOWN)
    assert decision.role is Role.FENCED and "'a'" in decision.reason


def test_a_read_only_primary_is_fenced() -> None:
    stopped = DatabaseView(reachable=True, read_only=True, primary_site="a", epoch=1)
    assert decide_role("a", stopped, STANDBY).role is Role.FENCED


def test_an_old_primary_restarted_before_its_rewind_is_fenced_by_the_higher_epoch() -> None:
    old = DatabaseView(reachable=True, primary_site="a", epoch=1)
    new = DatabaseView(reachable=True, primary_site="b", epoch=2)
    decision = decide_role("a", old, new)
    assert decision.role is Role.FENCED and "pg_rewind" in decision.reason
    assert decide_role("b", new, old).serving  # and the new primary is not fenced by the old one


def test_the_first_primary_claims_the_record() -> None:
    fresh = DatabaseView(reachable=True)
    decision = decide_role("a", fresh, DatabaseView(reachable=True, in_recovery=True))
    assert decision.serving and decision.claim
    # ... unless the other site is already the namespace's primary.
    assert decide_role("a", fresh, DatabaseView(reachable=True, primary_site="b", epoch=3)).role is Role.FENCED
    assert not decide_role("a", PRIMARY_A, STANDBY).claim


def test_the_counter_moves_to_the_start_of_the_epoch_after_next() -> None:
    assert counter_after_forced_promotion(0, 0) == 2 << EPOCH_BITS
    assert counter_after_forced_promotion(41, 0) == 2 << EPOCH_BITS
    assert counter_after_forced_promotion((1 << EPOCH_BITS) - 1, 0) == 2 << EPOCH_BITS
    assert counter_after_forced_promotion(1 << EPOCH_BITS, 0) == 3 << EPOCH_BITS
    assert epoch_of(counter_after_forced_promotion(5, 0) + 1) == 2


def test_the_move_keeps_the_partition_bits_and_clears_anything_the_old_primary_may_have_given() -> None:
    partition = 7
    base = partition << PARTITION_SHIFT
    for replicated in (base, base + 1, base + 12345, base + (5 << EPOCH_BITS) + 99):
        moved = counter_after_forced_promotion(replicated, partition)
        assert moved >> PARTITION_SHIFT == partition
        # Up to 2**32 numbers given after the last one replicated stay below the next number.
        assert replicated + (1 << EPOCH_BITS) <= moved
        assert counter_after_forced_promotion(moved, partition) > moved  # a second one moves on again


def test_a_partition_with_no_epoch_left_is_refused() -> None:
    with pytest.raises(ArgumentError, match="no epoch left"):
        counter_after_forced_promotion((1 << PARTITION_SHIFT) - 1, 0)


def test_lsns_round_trip() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert format_lsn(parse_lsn("0/3000060")) == "0/3000060"
    with pytest.raises(ArgumentError, match="not an LSN"):
        parse_lsn("3000060")
    with pytest.raises(ArgumentError, match="not an LSN"):
        parse_lsn("x/y")


def test_promoting_a_site_that_is_already_primary_is_refused() -> None:
    with pytest.raises(ArgumentError, match="already a primary"):
        check_promotion(PromotionMode.PLANNED, PRIMARY_A, STANDBY)
    with pytest.raises(ArgumentError, match="already a primary"):
        check_promotion(PromotionMode.FORCED, PRIMARY_A, DOWN)


def test_a_planned_promotion_needs_the_primary_and_a_forced_one_does_not() -> None:
    with pytest.raises(ArgumentError, match="--forced"):
        check_promotion(PromotionMode.PLANNED, STANDBY, DOWN)
    check_promotion(PromotionMode.FORCED, STANDBY, DOWN)
    check_promotion(PromotionMode.PLANNED, STANDBY, PRIMARY_A)


def test_an_unreachable_target_is_refused() -> None:
    with pytest.raises(ArgumentError, match="does not answer"):
        check_promotion(PromotionMode.FORCED, DOWN, PRIMARY_A)
