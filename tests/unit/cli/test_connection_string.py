"""How the command line reads a connection string: emulator strings mean plain AMQP, others TLS."""

from __future__ import annotations

import pytest

from sodalite.amqpclient.connection_string import DEFAULT, ConnectionSettings, parse
from sodalite.errors import ConfigurationError


def test_the_emulator_string_is_plain_amqp_on_its_port_or_5672() -> None:
    assert parse(DEFAULT) == ConnectionSettings("localhost", 5672, "RootManageSharedAccessKey", "SAS_KEY_VALUE",
                                                tls=False)
    assert parse("Endpoint=sb://h:6000;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true").port \
        == 6000


def test_any_other_string_is_tls_on_5671_unless_a_port_is_named() -> None:
    assert parse("Endpoint=sb://ns.example.com/;SharedAccessKeyName=k;SharedAccessKey=a=b=") == ConnectionSettings(
        "ns.example.com", 5671, "k", "a=b=", tls=True)
    assert parse("endpoint=sb://h:7000/;sharedaccesskeyname=k;sharedaccesskey=v").port == 7000


@pytest.mark.parametrize(("text", "problem"), [
    ("Endpoint=sb://h;SharedAccessKeyName=k", "SharedAccessKey missing"),
    ("Endpoint=https://h;SharedAccessKeyName=k;SharedAccessKey=v", "Endpoint must be sb://"),
    ("Endpoint=sb://h:x;SharedAccessKeyName=k;SharedAccessKey=v", "bad port"),
    ("garbage", "not Name=Value"),
])
def test_malformed_strings_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        parse(text)
