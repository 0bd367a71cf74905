"""The edge where Sodalite errors become AMQP errors (and the only place that happens)."""

from __future__ import annotations

import uuid

from sodalite.amqp.performatives import Error
from sodalite.errors import SodaliteError


def to_amqp_error(exc: SodaliteError, tracking_id: str | None = None) -> Error:
    """An AMQP error with all three fields written (sdk-wire-contract.md pitfall 21).

    The description carries a tracking id, as Service Bus does, so a client's report can be
    matched to the broker's log line.
    """
    tracking = tracking_id or uuid.uuid4().hex
    return Error(exc.condition, f"{exc.description} TrackingId:{tracking}", None)
