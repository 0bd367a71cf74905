"""How the suite is spread over pytest-xdist workers (`scripts/test` runs `--dist loadgroup`).

Each test module is a group of its own, so a module's tests share one worker and its module-scoped
broker or database server (what `--dist loadfile` does). The modules that drive Spark form one group
instead, scheduled first: they share one worker and one Spark session (tests/interop/conftest.py),
so one JVM runs at a time rather than one per worker, and the Python workers Spark starts (which
must connect back to the JVM within Spark's fixed 10 s) do not compete with several other JVMs.
"""

from __future__ import annotations

import pytest

SPARK_GROUP = "spark"


def uses_spark(item: pytest.Item) -> bool:
    return item.path.name.startswith("test_spark_") and item.path.name != "test_spark_broker_extension.py"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP if uses_spark(item) else str(item.path)))
    items.sort(key=lambda item: not uses_spark(item))  # stable: the Spark group first, the rest in order
