"""`sodalite geo` and `serve --geo-*`: argument errors are clear and change nothing (no database is
reached: every case is refused before one would be)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sodalite.cli.entry import main, parser
from sodalite.cli.main import BadOption, geo_node

A = "a=postgresql://127.0.0.1:1/db"
B = "b=postgresql://127.0.0.1:1/db"


@pytest.mark.parametrize(("argv", "expected"), [
    (["geo", "status", "--site", A], "give both sites"),
    (["geo", "status", "--site", A, "--site", "a=postgresql://127.0.0.1:2/db"], "the same site 'a'"),
    (["geo", "status", "--site", A, "--site", "b"], "NAME=postgresql://"),
    (["geo", "status", "--site", A, "--site", "b=mysql://x/y"], "not a PostgreSQL URL"),
    (["geo", "promote", "c", "--planned", "--site", A, "--site", B], "there is no site 'c'"),
])
def test_bad_arguments_are_refused_with_exit_code_2(argv: list[str], expected: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_promote_needs_exactly_one_of_planned_and_forced(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["geo", "promote", "b", "--site", A, "--site", B],
                 ["geo", "promote", "b", "--planned", "--forced", "--site", A, "--site", B]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
    assert "--planned" in capsys.readouterr().err


def test_a_planned_promotion_with_neither_site_answering_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["geo", "promote", "b", "--planned", "--site", A, "--site", B]) == 2
    assert "does not answer: nothing was changed" in capsys.readouterr().err


def serve_args(*extra: str) -> argparse.Namespace:
    return parser().parse_args(["serve", "--data-dir", str(Path("/nonexistent")), *extra])


def test_serve_geo_options_are_checked() -> None:
    assert geo_node(serve_args(), broker=None) is None  # type: ignore[arg-type]
    with pytest.raises(BadOption, match="--geo-site too"):
        geo_node(serve_args("--geo-peer", B), broker=None)  # type: ignore[arg-type]
    with pytest.raises(BadOption, match="--store postgresql"):
        geo_node(serve_args("--geo-site", "a"), broker=None)  # type: ignore[arg-type]


def test_a_waiting_node_answers_on_its_amqps_port_too(tmp_path: Path) -> None:
    """Before its first promotion a node's stand-in serves amqps as well as amqp (a client dialling
    either port gets the AMQP handshake, then server-busy at its open), and says which port it bound."""
    import asyncio
    import ssl

    from sodalite.admin.tls import ensure_certificate, server_context
    from sodalite.cli.geo_node import GeoNode, refusing_listener

    async def dial() -> None:
        cert, key = ensure_certificate(tmp_path)
        node = GeoNode("a", "postgresql://127.0.0.1:1/db", None, "ns")
        stand_in = await refusing_listener("ns", "127.0.0.1", 0, node, tls=server_context(cert, key), tls_port=0)
        try:
            assert stand_in.amqps_port
            client = ssl.create_default_context(cafile=str(cert))
            client.check_hostname = False
            reader, writer = await asyncio.open_connection("127.0.0.1", stand_in.amqps_port, ssl=client)
            writer.write(b"AMQP\x03\x01\x00\x00")  # the SASL layer's header, as the SDKs send it
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(8), 10) == b"AMQP\x03\x01\x00\x00"
            writer.close()
        finally:
            await stand_in.stop()

    asyncio.run(dial())
