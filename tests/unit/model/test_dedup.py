"""The pure duplicate detector: window edges, pruning, reconstruction, and a property test against a
naive reference. Every time is an explicit ms value."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sodalite.errors import ConfigurationError
from sodalite.model.dedup import DuplicateDetector

WINDOW = 600_000  # the Service Bus default, 10 min
T0 = 1_700_000_000_000


def test_an_unseen_id_is_not_a_duplicate_and_a_seen_one_is() -> None:
    d = DuplicateDetector(WINDOW)
    assert len(d) == 0
    assert not d.is_duplicate("a", T0)
    d.remember("a", T0)
    assert d.is_duplicate("a", T0)
    assert d.is_duplicate("a", T0 + 1)
    assert not d.is_duplicate("b", T0)
    assert not d.is_duplicate("A", T0)  # ids compare exactly
    assert len(d) == 1


def test_none_never_duplicates() -> None:
    d = DuplicateDetector(WINDOW, [("None", T0), ("", T0)])
    assert not d.is_duplicate(None, T0)
    assert d.admit(None, T0)
    assert d.admit(None, T0)
    assert len(d) == 2  # a missing id is never remembered
    assert d.is_duplicate("", T0)  # the empty string is an id like any other


def test_window_edges() -> None:
    d = DuplicateDetector(WINDOW)
    d.remember("a", T0)
    assert d.is_duplicate("a", T0 + WINDOW - 1)
    assert d.is_duplicate("a", T0 + WINDOW)  # seen exactly at now - window: still counts
    assert not d.is_duplicate("a", T0 + WINDOW + 1)  # older than now - window: does not
    assert d.next_expiry() == T0 + WINDOW + 1
    assert d.prune(T0 + WINDOW) == []
    assert d.is_duplicate("a", T0 + WINDOW)
    assert d.prune(T0 + WINDOW + 1) == ["a"]
    assert len(d) == 0
    assert d.next_expiry() is None


def test_an_entry_seen_later_than_now_still_counts() -> None:
    # The clock went back: what was seen "in the future" was seen within the window.
    d = DuplicateDetector(WINDOW)
    d.remember("a", T0)
    assert d.is_duplicate("a", T0 - 5_000)
    assert d.prune(T0 - 5_000) == []


def test_duplicates_within_one_send_are_caught() -> None:
    d = DuplicateDetector(WINDOW)
    ids = ["a", "b", "a", None, "c", "b", None, "a"]
    kept = [i for i, message_id in enumerate(ids) if d.admit(message_id, T0)]
    assert kept == [0, 1, 3, 4, 6]
    assert d.history() == [("a", T0), ("b", T0), ("c", T0)]


def test_caller_pattern_is_duplicate_then_remember() -> None:
    d = DuplicateDetector(WINDOW)
    kept = []
    for message_id in ["x", "x", "y"]:
        if d.is_duplicate(message_id, T0):
            continue
        d.remember(message_id, T0)
        kept.append(message_id)
    assert kept == ["x", "y"]


def test_an_id_is_new_again_once_its_window_passed() -> None:
    d = DuplicateDetector(WINDOW)
    assert d.admit("a", T0)
    later = T0 + WINDOW + 1
    assert d.admit("a", later)  # not pruned yet: remember replaces the old entry
    assert d.history() == [("a", later)]
    assert d.prune(later + WINDOW) == []  # the stale heap entry is skipped, the new one counts
    assert d.is_duplicate("a", later + WINDOW)
    assert d.next_expiry() == later + WINDOW + 1
    assert d.prune(later + WINDOW + 1) == ["a"]
    assert len(d) == 0


def test_prune_returns_expired_ids_oldest_first_and_keeps_the_rest() -> None:
    d = DuplicateDetector(WINDOW)
    d.remember("c", T0 + 2)
    d.remember("a", T0)
    d.remember("b", T0 + 1)
    d.remember("z", T0 + 1)
    d.remember("keep", T0 + 100)
    assert d.next_expiry() == T0 + WINDOW + 1
    assert d.prune(T0 + WINDOW + 3) == ["a", "b", "z", "c"]
    assert d.history() == [("keep", T0 + 100)]
    assert d.next_expiry() == T0 + 100 + WINDOW + 1
    assert d.prune(T0 + WINDOW + 3) == []


def test_reconstruction_from_history() -> None:
    history = [("old", T0 - WINDOW - 1), ("edge", T0 - WINDOW), ("new", T0), ("dup", T0 - 10), ("dup", T0 - 20)]
    d = DuplicateDetector(WINDOW, history)
    assert len(d) == 4  # "dup" once: the latest time wins
    assert not d.is_duplicate("old", T0)  # kept until pruned, but past its window
    assert d.is_duplicate("edge", T0)
    assert d.is_duplicate("new", T0)
    assert d.is_duplicate("dup", T0 + WINDOW - 10)
    assert not d.is_duplicate("dup", T0 + WINDOW - 9)
    assert d.prune(T0) == ["old"]
    assert d.history() == [("edge", T0 - WINDOW), ("dup", T0 - 10), ("new", T0)]
    rebuilt = DuplicateDetector(WINDOW, d.history())
    assert rebuilt.history() == d.history()
    assert rebuilt.next_expiry() == d.next_expiry() == T0 + 1


def test_window_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        DuplicateDetector(0)
    with pytest.raises(ConfigurationError):
        DuplicateDetector(-1)
    assert DuplicateDetector(20_000).window_ms == 20_000


def test_remembering_one_id_again_and_again_keeps_the_heap_small() -> None:
    d = DuplicateDetector(10)
    for t in range(0, 100_000, 11):  # each time just past the window of the previous one
        assert d.admit("same", t)
    assert len(d) == 1
    assert len(d._heap) <= 2 * len(d) + 64
    d.remember("same", 5)  # remembering at the same time twice adds nothing
    d.remember("same", 5)
    assert d.history() == [("same", 5)]
    assert d.prune(16) == ["same"]
    assert d.next_expiry() is None


# -- against a naive reference ---------------------------------------------------------------------


@dataclass
class Naive:
    window: int
    seen: dict[str, int] = field(default_factory=dict)

    def is_duplicate(self, message_id: str | None, now: int) -> bool:
        return message_id is not None and message_id in self.seen and self.seen[message_id] >= now - self.window

    def prune(self, now: int) -> list[str]:
        gone = sorted((t, i) for i, t in self.seen.items() if t < now - self.window)
        for _, i in gone:
            del self.seen[i]
        return [i for _, i in gone]

    def next_expiry(self) -> int | None:
        return min(self.seen.values()) + self.window + 1 if self.seen else None


_IDS = st.none() | st.sampled_from(["a", "b", "c", "d", "é"])
_STEP = st.one_of(
    st.tuples(st.just("send"), st.lists(_IDS, max_size=5), st.integers(-3, 40)),
    st.tuples(st.just("check"), _IDS, st.integers(-10, 40)),
    st.tuples(st.just("prune"), st.none(), st.integers(-10, 40)),
    st.tuples(st.just("restart"), st.none(), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(window=st.integers(1, 15), steps=st.lists(_STEP, max_size=40))
def test_matches_a_naive_reference(window: int, steps: list[tuple[str, object, int]]) -> None:
    d = DuplicateDetector(window)
    ref = Naive(window)
    now = 0
    for kind, arg, dt in steps:
        if kind == "send":  # a clock that mostly moves forward, sometimes back a little
            now += dt
            assert isinstance(arg, list)
            for message_id in arg:
                expected = not ref.is_duplicate(message_id, now)
                if expected and message_id is not None:
                    ref.seen[message_id] = now
                assert d.admit(message_id, now) == expected
        elif kind == "check":
            assert arg is None or isinstance(arg, str)
            assert d.is_duplicate(arg, now + dt) == ref.is_duplicate(arg, now + dt)
        elif kind == "prune":
            assert d.prune(now + dt) == ref.prune(now + dt)
        else:  # a restart rebuilds the detector from what the store would hold
            d = DuplicateDetector(window, d.history())
        assert len(d) == len(ref.seen)
        assert d.next_expiry() == ref.next_expiry()
        assert d.history() == sorted(ref.seen.items(), key=lambda item: (item[1], item[0]))


def test_a_send_keeps_the_ids_not_seen_within_the_window_nor_earlier_in_the_same_send() -> None:
    detector = DuplicateDetector(1_000, [("old", 0), ("recent", 5_000)])
    assert detector.unseen(["old", "recent", "new", "new", None, None], 5_500) == [True, False, True, False, True, True]
    assert not detector.is_duplicate("new", 5_500)  # nothing remembered: the commit does that
