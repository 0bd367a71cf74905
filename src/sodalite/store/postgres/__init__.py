"""The PostgreSQL messaging store: one database, one transaction per ``apply``, on psycopg 3.

Rules (each module's docstring says how it keeps its own):

- Tables are named ``sodalite_*`` and live in the first schema of the connection's ``search_path``,
  so the store can share a database the operator already runs and backs up.
- One ``apply`` is one transaction: ``BEGIN`` and one set-based statement per operation (over
  ``unnest`` arrays, never one per message) go out as one pipeline, then the ``COMMIT``; ``apply``
  returns only after PostgreSQL acknowledged it (``synchronous_commit = on``). Reads are one
  pipelined read-only snapshot each.
- In a partition a higher sequence number never becomes visible before a lower one, whichever node
  appends: the partition's base row is taken in the append's transaction (``plans``).
- Claims never take a row twice and never wait on another transaction's rows (``FOR UPDATE SKIP
  LOCKED``); settlements and renewals are fenced by token and ``locked_until`` (``plans``).
- Messages, counters and duplicate-detection history live in a ring of tables that are truncated
  when drained, so a long transaction cannot bloat them without bound (``ring``).
- A batch that makes messages ready or changes entities notifies the other nodes at its commit,
  never after a rollback (``feed``).
- The schema is versioned; numbered migrations run under an advisory lock by one node; a schema
  newer than this code is refused (``schema``).
- No psycopg type crosses the port: every failure is StoreUnavailable (StoreFull for a full disk),
  and an unanswered COMMIT is looked up before it is reported (``store``, ``failover``).
- Not thread-safe: the server calls one store from one worker thread.

Modules: ``store`` (the port), ``plans`` (one plan per operation, in a table), ``statements`` and
``queries.sql`` (the SQL), ``schema`` with ``schema.sql`` and ``migrations/`` (numbered SQL files),
``ring`` (the ring's maintenance), ``feed`` (NOTIFY payloads and the LISTEN feed), ``values``
(settings, URLs, values to columns), ``failover`` (which server of a multi-host URL is written to,
and the outcome of an unanswered COMMIT), ``geo`` (two sites' databases: probe, lag, promotion).
The operator's view is docs/postgresql.md.
"""

from sodalite.store.postgres.feed import (
    DUE,
    PostgresChangeFeed,
    channel_name,
)
from sodalite.store.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
)
from sodalite.store.postgres.store import (
    PostgresStore,
)
from sodalite.store.postgres.values import (
    ANALYZE_AFTER,
    CALL_WAIT,
    COUNTER_ROTATE_BYTES,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_ROTATE_BYTES,
    GENERATIONS,
    HISTORY_ROTATE_BYTES,
    LISTEN_POLL,
    LISTEN_RETRY_MAX,
    LOCK_TIMEOUT_MS,
    MIGRATION_LOCK_KEY,
    MOVE_LIMIT,
    URL_SCHEMES,
    check_url,
    redact,
)

__all__ = [
    "ANALYZE_AFTER",
    "CALL_WAIT",
    "COUNTER_ROTATE_BYTES",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_ROTATE_BYTES",
    "DUE",
    "GENERATIONS",
    "HISTORY_ROTATE_BYTES",
    "LISTEN_POLL",
    "LISTEN_RETRY_MAX",
    "LOCK_TIMEOUT_MS",
    "MIGRATIONS",
    "MIGRATION_LOCK_KEY",
    "MOVE_LIMIT",
    "SCHEMA_VERSION",
    "URL_SCHEMES",
    "PostgresChangeFeed",
    "PostgresStore",
    "channel_name",
    "check_url",
    "redact",
]
