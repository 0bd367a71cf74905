"""Small request/response messages for ``$cbs`` and ``$management``: :mod:`sodalite.message.requests`."""

from sodalite.message.requests import Request, decode_request, encode_response

__all__ = ["Request", "decode_request", "encode_response"]
