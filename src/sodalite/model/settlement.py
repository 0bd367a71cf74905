"""Settlements: what a client asks to be done with a message it holds a lock on.

Theory of operation. Clients ask for a settlement in three ways, and all three end here:

* a disposition on the receiver link carrying an AMQP outcome (``accepted``, ``modified``,
  ``rejected``, ``released``; sdk-wire-contract.md 5.1), read by ``server/outcomes.py``, which alone
  knows the AMQP types and calls :func:`from_outcome_fields`;
* the same outcome wrapped in a ``TransactionalState`` (contract 7), read the same way;
* a ``$management`` ``update-disposition`` request naming a ``disposition-status``
  (``completed``, ``abandoned``, ``defered``, ``suspended``; contract 5.3 and 6.7), read by
  :func:`from_disposition_status`.

Each gives one :class:`Settlement`: a Service Bus verb and its arguments. The partition actor
carries it out; this module only decides which verb a client meant, and knows the SDK's quirks:

* ``modified`` means abandon, or defer when ``undeliverable-here`` is set (``delivery-failed`` is
  always true from the SDK and changes nothing);
* ``rejected`` means dead-letter; the reason and description come from the error's ``info`` map
  (``DeadLetterReason``, ``DeadLetterErrorDescription``, symbol keys), the description falling back
  to the error's own description;
* ``released`` (and a disposition with no state) unlocks without counting a delivery; it is never
  answered, since the SDK sends it pre-settled.

The module is pure: no I/O, no clock, no AMQP types.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sodalite.errors import ArgumentError


class Verb(enum.Enum):
    """The Service Bus settlement verbs, plus the AMQP-only release."""

    COMPLETE = "complete"
    ABANDON = "abandon"
    DEAD_LETTER = "dead-letter"
    DEFER = "defer"
    RELEASE = "release"  # unlock without counting a delivery (AMQP ``released``; no SDK API names it)


@dataclass(frozen=True, slots=True)
class Settlement:
    """One settlement a client asked for. ``properties_to_modify`` applies to abandon and defer
    (``modified.message-annotations``) and to dead-letter (the rejection's ``error.info`` beyond the
    reason and description, as .NET and Java send them); the dead-letter fields to dead-letter only."""

    verb: Verb
    properties_to_modify: Mapping[Any, Any] | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None

    @property
    def removes(self) -> bool:
        """Whether the message leaves its queue for good and counts as consumed (metrics)."""
        return self.verb is Verb.COMPLETE

    @property
    def answered(self) -> bool:
        """Whether the broker confirms it; a release is fire-and-forget (contract 5.1)."""
        return self.verb is not Verb.RELEASE


COMPLETE: Final = Settlement(Verb.COMPLETE)
RELEASE: Final = Settlement(Verb.RELEASE)

# update-disposition's statuses, as the SDK spells them (contract 5.3 and pitfall 13: "defered", one r).
COMPLETED, ABANDONED, DEFERRED, SUSPENDED = "completed", "abandoned", "defered", "suspended"

# The info keys of a dead-letter rejection (contract 5.1); the SDK sends them as symbols.
DEAD_LETTER_REASON: Final = "DeadLetterReason"
DEAD_LETTER_ERROR_DESCRIPTION: Final = "DeadLetterErrorDescription"


class OutcomeKind(enum.Enum):
    """The AMQP outcomes (AMQP 1.0 part 3, section 3.4), named without their types."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    RELEASED = "released"
    MODIFIED = "modified"


def from_outcome_fields(kind: OutcomeKind, *, undeliverable_here: bool = False,
                        message_annotations: Mapping[Any, Any] | None = None,
                        error_description: str | None = None,
                        error_info: Mapping[Any, Any] | None = None) -> Settlement:
    """The settlement an AMQP outcome asks for, from the outcome's fields."""
    if kind is OutcomeKind.ACCEPTED:
        return COMPLETE
    if kind is OutcomeKind.RELEASED:
        return RELEASE
    if kind is OutcomeKind.MODIFIED:
        return Settlement(Verb.DEFER if undeliverable_here else Verb.ABANDON, message_annotations)
    reason, description = dead_letter_details(error_description, error_info)
    others = {key: value for key, value in (error_info or {}).items()
              if str(key) not in (DEAD_LETTER_REASON, DEAD_LETTER_ERROR_DESCRIPTION)}
    return Settlement(Verb.DEAD_LETTER, others or None, dead_letter_reason=reason, dead_letter_description=description)


def dead_letter_details(error_description: str | None,
                        error_info: Mapping[Any, Any] | None) -> tuple[str | None, str | None]:
    """DeadLetterReason and DeadLetterErrorDescription from a dead-letter rejection's error (contract 5.1).

    Without an info map the description is the error's own; with one, the info's description wins
    and the error's is the fallback. Values that are not strings count as absent.
    """
    if not error_info:
        return None, error_description
    info = {str(k): v for k, v in error_info.items()}
    reason = info.get(DEAD_LETTER_REASON)
    description = info.get(DEAD_LETTER_ERROR_DESCRIPTION, error_description)
    return (reason if isinstance(reason, str) else None,
            description if isinstance(description, str) else None)


def from_disposition_status(status: object, *, deadletter_reason: object = None,
                            deadletter_description: object = None,
                            properties_to_modify: object = None) -> Settlement:
    """The settlement a ``$management`` ``update-disposition`` request asks for (contract 6.7).

    ``properties-to-modify`` is never sent by the Python SDK but is part of the documented request;
    a map there applies to abandon, defer and dead-letter (.NET and Java send it).
    """
    props = properties_to_modify if isinstance(properties_to_modify, Mapping) else None
    if status == COMPLETED:
        return COMPLETE
    if status == ABANDONED:
        return Settlement(Verb.ABANDON, props)
    if status == DEFERRED:
        return Settlement(Verb.DEFER, props)
    if status == SUSPENDED:
        return Settlement(Verb.DEAD_LETTER, props,
                          dead_letter_reason=deadletter_reason if isinstance(deadletter_reason, str) else None,
                          dead_letter_description=(deadletter_description
                                                   if isinstance(deadletter_description, str) else None))
    raise ArgumentError(f"unknown disposition-status {status!r}")
