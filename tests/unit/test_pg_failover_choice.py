"""Which server a node writes to, from what a probe found (store/postgres/failover.py), without servers:
the fence by timeline and by cluster, and what the node says when it cannot write."""

from __future__ import annotations

from typing import Any

import pytest

from sodalite.store.postgres.failover import Failover, HostReport, NoPrimary, check_hosts, split_hosts


class _Conn:
    def __init__(self, host: str) -> None:
        self.host = host
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _failover() -> Failover:
    return Failover("postgresql://u@a:1,b:2,c:3/db?target_session_attrs=read-write", shown="db",
                    connect_timeout=1, application_name="t")


def _choose(failover: Failover, *reports: HostReport) -> Any:
    connections = {r.host: _Conn(r.host) if r.reachable else None for r in reports}
    return failover._choose(list(reports), connections)


def _primary(host: str, timeline: int, system: int = 7) -> HostReport:
    return HostReport(host, reachable=True, in_recovery=False, timeline=timeline, system_identifier=system)


def _standby(host: str, timeline: int, system: int = 7) -> HostReport:
    return HostReport(host, reachable=True, in_recovery=True, timeline=timeline, system_identifier=system)


def _down(host: str) -> HostReport:
    return HostReport(host, reachable=False, error="refused")


def test_the_primary_is_chosen_wherever_it_is_in_the_list() -> None:
    failover = _failover()
    conn = _choose(failover, _standby("a:1", 1), _primary("b:2", 1), _standby("c:3", 1))
    assert conn.host == "b:2"
    assert failover.status().writable and failover.status().host == "b:2"


def test_a_primary_on_a_lower_timeline_than_any_server_shows_is_fenced() -> None:
    failover = _failover()
    # The old primary restarted un-rewound (timeline 1) answers first; the new one is on timeline 2.
    assert _choose(failover, _primary("a:1", 1), _primary("b:2", 2), _standby("c:3", 2)).host == "b:2"
    # Later only the old one answers: never written to, even though it accepts writes.
    with pytest.raises(NoPrimary, match="older timeline"):
        _choose(failover, _primary("a:1", 1), _down("b:2"), _down("c:3"))
    assert failover.status().role == "fenced" and not failover.status().writable


def test_a_standby_on_a_higher_timeline_fences_a_stale_primary_the_node_never_saw_fail() -> None:
    failover = _failover()  # a node started after the failover: its first probe sees both
    with pytest.raises(NoPrimary, match="older timeline"):
        _choose(failover, _primary("a:1", 1), _down("b:2"), _standby("c:3", 2))
    assert failover.highest_timeline == 2


def test_a_server_of_another_cluster_is_never_written_to() -> None:
    failover = _failover()
    _choose(failover, _primary("a:1", 1, system=7))
    with pytest.raises(NoPrimary):
        _choose(failover, _down("a:1"), _primary("b:2", 5, system=99))
    assert failover.status().role == "fenced"


def test_standbys_only_and_nothing_reachable_say_so() -> None:
    failover = _failover()
    with pytest.raises(NoPrimary, match="every reachable server is a standby") as caught:
        _choose(failover, _standby("a:1", 1), _down("b:2"), _down("c:3"))
    assert "a:1 standby" in str(caught.value) and "b:2 unreachable" in str(caught.value)
    assert failover.status().role == "standby"
    with pytest.raises(NoPrimary, match="no server answers"):
        _choose(failover, _down("a:1"), _down("b:2"), _down("c:3"))
    assert failover.status().role == "unreachable"


def test_two_primaries_on_the_highest_timeline_are_both_refused() -> None:
    failover = _failover()
    with pytest.raises(NoPrimary, match="2 servers accept writes"):
        _choose(failover, _primary("a:1", 3), _primary("b:2", 3))


def test_the_url_s_hosts_and_ports_are_split_and_checked() -> None:
    params, hosts = split_hosts("postgresql://u:pw@a:1,b:2/db?target_session_attrs=read-write&sslmode=disable")
    assert hosts == [("a", "1"), ("b", "2")]
    assert params["dbname"] == "db" and "target_session_attrs" not in params and params["sslmode"] == "disable"
    assert split_hosts("postgresql://u@a,b:7/db")[1] == [("a", ""), ("b", "7")]
    check_hosts("u:pw@a:1,b:2")
    with pytest.raises(ValueError, match="not a number"):
        check_hosts("u@a:1,b:x")


def test_a_node_lets_go_of_its_server_when_another_shows_a_higher_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby promoted while the server written to still answers (the old primary was not
    stopped): the periodic recheck raises the fence, so the next connection goes to the new one."""
    import sodalite.store.postgres.failover as pg_failover

    failover = _failover()
    assert _choose(failover, _primary("a:1", 1), _standby("b:2", 1)).host == "a:1"
    probes: list[list[HostReport]] = [[_primary("a:1", 1), _primary("b:2", 2)]]
    monkeypatch.setattr(failover, "_probe_all", lambda cls, kwargs: (probes[0], {}))
    assert not failover.superseded()  # not yet due
    monkeypatch.setattr(pg_failover.time, "monotonic", lambda: 10**9)
    assert failover.superseded()
    assert failover.status().role == "fenced" and failover.highest_timeline == 2
    assert _choose(failover, _primary("a:1", 1), _primary("b:2", 2)).host == "b:2"
