"""The drills tier: long drills against real brokers (outages, database failover, geo promotion) and the
fault checker's deterministic scripts. The checker's scripts share one broker per defect switch
(tests/checker/script.py), stopped when the session ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from checker.script import close_nodes


@pytest.fixture(scope="session", autouse=True)
def _checker_brokers() -> Iterator[None]:
    yield
    close_nodes()
