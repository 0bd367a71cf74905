"""AMQP outcomes ⇄ settlements: the one place that reads and writes settlement outcomes on the wire.

Theory of operation. A receiver-link disposition (plain or inside a ``TransactionalState``) carries
an AMQP outcome; :func:`settlement_of` turns it into a :class:`~sodalite.model.settlement.Settlement`
(the quirks are documented in that module), :func:`carry_out` runs it on the partition actor that
holds the lock, and :func:`echo_of` is the outcome the broker sends back once the settlement is
durable: the same outcome, except that a dead-letter is echoed as ``rejected`` with no error, since
the SDK takes a rejected echo carrying an error for a failure (sdk-wire-contract.md 5.1).
``$management`` ``update-disposition`` reaches :func:`carry_out` through
:func:`~sodalite.model.settlement.from_disposition_status`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from sodalite.amqp.performatives import Accepted, Modified, Rejected, Released
from sodalite.errors import NotImplementedOperation
from sodalite.model.settlement import RELEASE, OutcomeKind, Settlement, Verb, from_outcome_fields

if TYPE_CHECKING:
    from sodalite.server.partitioned_actor import EntityActor

Outcome = Accepted | Rejected | Released | Modified


def settlement_of(outcome: object) -> Settlement:
    """The settlement a disposition's outcome asks for; no state at all is a release (AMQP 3.4)."""
    if outcome is None:
        return RELEASE
    if isinstance(outcome, Accepted):
        return from_outcome_fields(OutcomeKind.ACCEPTED)
    if isinstance(outcome, Released):
        return from_outcome_fields(OutcomeKind.RELEASED)
    if isinstance(outcome, Modified):
        return from_outcome_fields(OutcomeKind.MODIFIED, undeliverable_here=bool(outcome.undeliverable_here),
                                   message_annotations=outcome.message_annotations)
    if isinstance(outcome, Rejected):
        error = outcome.error
        return from_outcome_fields(OutcomeKind.REJECTED,
                                   error_description=error.description if error is not None else None,
                                   error_info=error.info if error is not None else None)
    raise NotImplementedOperation(f"unsupported outcome {type(outcome).__name__}")


def echo_of(outcome: Outcome) -> Outcome:
    """The outcome that confirms ``outcome`` once it is durable (the SDK waits for this exact one)."""
    return Rejected(None) if isinstance(outcome, Rejected) else outcome


def carry_out(actor: EntityActor, token: uuid.UUID,
              settlement: Settlement) -> asyncio.Future[None] | None:
    """Run ``settlement`` on the actor holding lock ``token``: a future that resolves once it is
    durable, or None for a release, which is done at once and never confirmed."""
    verb = settlement.verb
    if verb is Verb.COMPLETE:
        return actor.complete(token)
    if verb is Verb.RELEASE:
        actor.release(token)
        return None
    props = dict(settlement.properties_to_modify) if settlement.properties_to_modify is not None else None
    if verb is Verb.ABANDON:
        return actor.abandon(token, props)
    if verb is Verb.DEFER:
        return actor.defer(token, props)
    return actor.dead_letter(token, settlement.dead_letter_reason, settlement.dead_letter_description, props)
