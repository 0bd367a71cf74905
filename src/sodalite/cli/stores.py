"""The composition root of the messaging stores: the only place that names concrete adapters.

``serve`` keeps its default store in the data directory (``messages.db``, SQLite) unless
``--store postgresql://...`` names a PostgreSQL database; each namespace ``MessagingStores`` entry
is a SQLite file (``Path``) or a PostgreSQL database (``Url``). The broker sees only the port.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from sodalite.errors import ConfigurationError
from sodalite.extras import MissingExtra
from sodalite.model.config import POSTGRESQL_URL_PREFIXES, MessagingStoreConfig, NamespaceConfig
from sodalite.server.broker import Broker
from sodalite.store.port import ChangeFeed, MessagingStore
from sodalite.store.sqlite import SqliteStore


def default_node_id(port: int) -> str:
    """This node's name when ``--node-id`` is not given: host name and AMQP port (the process id when
    the port is picked at random, 0)."""
    return f"{socket.gethostname()}:{port if port else f'pid{os.getpid()}'}"


def _postgres(url: str, node_id: str) -> MessagingStore:
    try:
        from sodalite.store.postgres import PostgresStore
    except ImportError as exc:  # psycopg is the `postgresql` extra
        raise ConfigurationError(str(MissingExtra("postgresql", "a PostgreSQL store", exc))) from None
    # The node id goes into application_name, so pg_stat_activity shows which node holds a connection.
    return PostgresStore(url, application_name=f"sodalite {node_id}"[:63])


def _one(configured: MessagingStoreConfig, data_dir: Path, synchronous: str, node_id: str) -> MessagingStore:
    if configured.url is not None:
        try:
            return _postgres(configured.url, node_id)
        except ConfigurationError as exc:
            raise ConfigurationError(f"MessagingStores '{configured.name}': {exc.description}") from None
    path = data_dir / configured.path
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteStore(path, synchronous=synchronous)


def build_broker(namespace: NamespaceConfig, data_dir: Path, *, synchronous: str = "FULL",
                 store_url: str | None = None, node_id: str = "",
                 shared_poll_seconds: float | None = None) -> Broker:
    """A broker on its messaging stores: the default one, then the namespace's in order.

    A PostgreSQL store may be shared with other nodes: its worker is marked ``shared`` and gets the
    store's change feed (one LISTEN connection per database and node), which wakes this node's
    partitions and entity follow when another node commits; ``shared_poll_seconds`` sets both
    fallback polls (waiting receivers, entity records) while the feed is live."""
    if shared_poll_seconds is not None and not shared_poll_seconds > 0:
        raise ConfigurationError(f"--shared-poll-seconds: must be > 0, got {shared_poll_seconds}")
    data_dir.mkdir(parents=True, exist_ok=True)
    if store_url is not None:
        if not store_url.startswith(POSTGRESQL_URL_PREFIXES):
            raise ConfigurationError(
                "--store: must be a PostgreSQL URL, postgresql://user:password@host:5432/database "
                "(leave it out for the SQLite store in the data directory)")
        try:
            default = _postgres(store_url, node_id)
        except ConfigurationError as exc:
            raise ConfigurationError(f"--store: {exc.description}") from None
    else:
        default = SqliteStore(data_dir / "messages.db", synchronous=synchronous)
    more = [(c.name, _one(c, data_dir, synchronous, node_id)) for c in namespace.messaging_stores]
    broker = Broker(namespace, default, more_stores=more, node_id=node_id or "node")
    for worker in broker.workers:
        worker.shared = _is_postgres(worker.store)
        if worker.shared:
            worker.feed = _change_feed(worker.store, node_id)
            if shared_poll_seconds is not None:
                worker.notified_poll_seconds = worker.notified_follow_seconds = shared_poll_seconds
    for worker, configured in zip(broker.workers[1:], namespace.messaging_stores, strict=True):
        worker.offline = configured.offline  # starts out of service: its partitions wait for it
    return broker


def _change_feed(store: MessagingStore, node_id: str) -> ChangeFeed:
    from sodalite.store.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    return store.change_feed(application_name=f"sodalite {node_id} listen"[:63])


def _is_postgres(store: MessagingStore) -> bool:
    # Only a store built by _postgres can be one, and building it imported the module: asking an
    # installation without the `postgresql` extra (no psycopg) must not import it.
    module = sys.modules.get("sodalite.store.postgres")
    return module is not None and isinstance(store, module.PostgresStore)


def redact_url(url: str) -> str:
    """A store URL fit to print: the password replaced."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, at, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{head}://{user}{':***' if ':' in credentials else ''}{at}{host}"
