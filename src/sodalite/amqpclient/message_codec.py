"""Messages as the command line writes (``sodalite send``) and shows (``sodalite peek``) them:
:mod:`sodalite.message.outgoing` and :mod:`sodalite.message.plain`, under their old names."""

from sodalite.message.outgoing import OutgoingMessage, encode_message
from sodalite.message.plain import describe_message, plain_value

__all__ = ["OutgoingMessage", "describe_message", "encode_message", "plain_value"]
