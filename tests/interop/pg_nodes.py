"""Broker nodes on one PostgreSQL database, started as users start them, for the two-node modules.

``node`` is one ``scripts/serve --store postgresql://... --node-id NAME`` process;
``node_pair`` starts ``node-a`` and ``node-b`` on the same configuration and database, yields them and
stops both (a module fixture: ``yield from node_pair(...)``, on the URL of the ``database`` fixture of
tests/interop/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from broker_process import BrokerProcess


def node(base: Path, config: Path, url: str, name: str, extra: Sequence[str] = ()) -> BrokerProcess:
    return BrokerProcess(base / name, config,
                         extra_args=["--store", url, "--node-id", name, *extra])


def node_pair(base: Path, config: Path, url: str,
              extra: Sequence[str] = ()) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    a = node(base, config, url, "node-a", extra).start()
    try:
        b = node(base, config, url, "node-b", extra).start()
    except BaseException:
        a.stop()
        raise
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()
