"""A Celery application on kombu's ``azureservicebus`` transport, configured from the environment.

kombu dials ``<namespace>.servicebus.windows.net`` on the standard ports (AMQP over TLS on 5671, the
management API over HTTPS on 443), and its transport passes no CA bundle to the SDK, whose AMQP TLS
trusts only certifi's bundle. truststore makes every TLS context (the SDK's and requests') trust what
OpenSSL trusts, so ``SSL_CERT_FILE`` pointing at the broker's certificate is enough.
"""

from __future__ import annotations

import truststore

truststore.inject_into_ssl()

import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from celery import Celery  # noqa: E402

app = Celery("shop", broker=os.environ["SHOP_BROKER_URL"], backend="rpc://")
app.conf.broker_transport_options = {
    "queue_name_prefix": os.environ.get("SHOP_QUEUE_PREFIX", ""),
    "peek_lock_seconds": int(os.environ.get("SHOP_LOCK_SECONDS", "60")),
    "use_lock_renewal": os.environ.get("SHOP_LOCK_RENEWAL") == "1",
}
app.conf.task_acks_late = os.environ.get("SHOP_ACKS_LATE") == "1"


@app.task
def add(x: int, y: int) -> dict[str, int]:
    return {"sum": x + y, "pid": os.getpid()}


@app.task
def slow_double(x: int, seconds: float) -> dict[str, int]:
    """Takes longer than the message lock; each start is recorded, so a redelivery shows."""
    with Path(os.environ["SHOP_RUNS"]).open("a", encoding="utf-8") as runs:
        runs.write(f"{x}\n")
    time.sleep(seconds)
    return {"double": 2 * x, "pid": os.getpid()}
