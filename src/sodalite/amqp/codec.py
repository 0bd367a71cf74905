"""The AMQP 1.0 type system on the wire: :mod:`decoding` reads values, :mod:`encoding` writes them.

This module is the door the rest of Sodalite imports them through.
"""

from __future__ import annotations

from sodalite.amqp.decoding import MAX_NESTING, decode, decode_value, skip_value
from sodalite.amqp.encoding import encode, encode_value

__all__ = ["MAX_NESTING", "decode", "decode_value", "encode", "encode_value", "skip_value"]
