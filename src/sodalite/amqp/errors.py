"""Protocol errors raised by the AMQP layer.

The AMQP layer imports nothing else of ours, so it has its own small hierarchy; each error names
the AMQP condition that the connection is closed with when the error is fatal.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer broke the AMQP protocol; the connection must close with ``condition``."""

    condition = "amqp:internal-error"

    def __init__(self, description: str = "", condition: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        if condition is not None:
            self.condition = condition


class DecodeError(ProtocolError):
    """Bytes that do not decode as AMQP."""

    condition = "amqp:decode-error"


class EncodeError(ValueError):
    """A value that has no AMQP encoding; a programming error, never the peer's."""


class FramingError(ProtocolError):
    """A frame that breaks the framing rules (size, doff, protocol header)."""

    condition = "amqp:connection:framing-error"


class FrameSizeError(FramingError):
    """A frame larger than the negotiated max-frame-size."""

    condition = "amqp:connection:framing-error"


class IllegalState(ProtocolError):
    """A performative that is not allowed in the current state."""

    condition = "amqp:illegal-state"


class InvalidField(ProtocolError):
    """A performative whose field is missing or out of range."""

    condition = "amqp:invalid-field"
