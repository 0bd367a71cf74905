"""Which groups of entities joined by forwarding run on the version-2 core (``model/placement.py``).

Issue 14 (every forwarding group on the core): groups spread over stores and groups mixing
partitioned and non-partitioned members run on the core now (a topic stores copies in other stores
by those stores' batches before its own commits), where they used to stay on version 1; the tests
that pinned that limitation became the first two below. Dead letters still bound a group: the core
forwards them in the dead-lettering's own store transaction."""

from __future__ import annotations

from sodalite.model.placement import Member, group_on_core


def plain(home: str = "main") -> Member:
    return Member(partitioned=False, home=home)


def partitioned() -> Member:
    return Member(partitioned=True, home="ignored")


def test_non_partitioned_members_run_on_the_core_in_one_store_or_across_stores() -> None:
    assert group_on_core([plain()])
    assert group_on_core([plain("a"), plain("a"), plain("a")])
    assert group_on_core([plain("a"), plain("b")])
    assert group_on_core([plain("a"), plain("b"), plain("c"), plain("a")])


def test_partitioned_members_run_on_the_core_together_whatever_their_homes() -> None:
    """Partition i of every partitioned entity lies in store i mod the stores: a partitioned topic,
    its subscriptions and the partitioned entities they forward into share each partition's store."""
    assert group_on_core([partitioned()])
    assert group_on_core([partitioned(), partitioned(), partitioned()])


def test_a_group_mixing_partitioned_and_non_partitioned_members_runs_on_the_core() -> None:
    assert group_on_core([partitioned(), plain()])
    assert group_on_core([partitioned(), partitioned(), plain("a"), plain("b")])


def test_forwarding_dead_letters_is_no_reason_to_stay_on_version_1() -> None:
    """Issue 14: partition i forwards into the target's partition i (one store), and a target in
    another store takes them through the relay; so a member's ForwardDeadLetteredMessagesTo is no
    longer a property placement looks at (it was ``Member.forwards_dead_letters``)."""
    assert "forwards_dead_letters" not in Member.__dataclass_fields__
    assert group_on_core([partitioned(), partitioned()])
    assert group_on_core([plain("a"), plain("b"), partitioned()])
