"""How the AMQP port tells AMQP, TLS and plain HTTP apart by the first bytes (issue 15, management endpoint)."""

from __future__ import annotations

import pytest

from sodalite.server.listener import classify


@pytest.mark.parametrize(("head", "kind"), [
    (b"AMQP\x00\x01\x00\x00", "amqp"),
    (b"AMQP\x03\x01\x00\x00", "amqp"),  # the SASL header
    (b"A", "amqp"),  # decided on the first byte
    (b"\x16\x03\x01\x02\x00", "tls"),
    (b"GET /health HTTP/1.1", "http"),
    (b"PUT /q", "http"),
    (b"DELETE /q", "http"),
    (b"HEAD /", "http"),
    (b"OPTIONS *", "http"),
    (b"HTTP/1.1 GET /", "amqp"),  # not a request line: AMQP answers with its own header
    (b"GETX", "amqp"),
    (b"\x00\x00\x00\x08", "amqp"),
])
def test_first_bytes_decide(head: bytes, kind: str) -> None:
    assert classify(head) == kind


@pytest.mark.parametrize("head", [b"G", b"GE", b"GET", b"P", b"PO", b"DELE", b"H", b"OPTIONS"])
def test_an_incomplete_method_waits_for_more(head: bytes) -> None:
    assert classify(head) is None
