"""How the suite is spread over pytest-xdist workers.

Each test module is a unit of its own, so a module's tests share one worker and its module-scoped
broker or database server (what `--dist loadfile` does). The modules that drive Spark form one unit
instead, scheduled first: they share one worker and one Spark session (tests/interop/conftest.py),
so one JVM runs at a time rather than one per worker, and the Python workers Spark starts (which
must connect back to the JVM within Spark's fixed 10 s) do not compete with several other JVMs.

This is a scheduler of our own (xdist's loadfile with one more rule) rather than `xdist_group`
marks: with pytest 9.2, xdist 3.8's loadgroup no longer sees the groups (its node-id suffix is
ignored), and the suite silently ran as plain loadfile.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

SPARK_UNIT = "spark"


def uses_spark(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_spark_") and name != "test_spark_broker_extension.py"


class ModuleScheduling(LoadScopeScheduling):
    """loadfile, with every Spark module in one unit."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return SPARK_UNIT if uses_spark(path) else path


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None  # another mode asked for on the command line: xdist's own
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not uses_spark(item.nodeid.split("::", 1)[0]))  # stable: Spark first
