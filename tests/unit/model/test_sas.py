"""SAS tokens: the captured test vector, generation and validation, audiences and what a grant covers."""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sodalite.errors import Unauthorized
from sodalite.model import sas

# sdk-wire-contract.md section 2, captured from azure-servicebus 7.15.0.
AUDIENCE = "sb://localhost:55672/queue1"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
EXPIRY = 1795271989
SIGNATURE = "BbL0xUEe9b8Q71u0VLNL7sdUpVhrlXOq8ObOSiySaj0="
CAPTURED = ("SharedAccessSignature sr=sb%3A%2F%2Flocalhost%3A55672%2Fqueue1"
            "&sig=BbL0xUEe9b8Q71u0VLNL7sdUpVhrlXOq8ObOSiySaj0%3D&se=1795271989&skn=RootManageSharedAccessKey")
KEYS = {KEY_NAME: (KEY,)}
NOW = EXPIRY - 3600


def build(sr: str, sig: str, se: str, skn: str) -> str:
    """A token with the given fields exactly as written (already encoded)."""
    return f"SharedAccessSignature sr={sr}&sig={sig}&se={se}&skn={skn}"


# ---- the verified vector -------------------------------------------------------------------------


def test_captured_signature() -> None:
    assert sas.sign(quote_plus(AUDIENCE), EXPIRY, KEY) == SIGNATURE


def test_captured_token_validates() -> None:
    token = sas.validate_token(CAPTURED, KEYS, NOW)
    assert token == sas.SasToken(AUDIENCE, "sb%3A%2F%2Flocalhost%3A55672%2Fqueue1", SIGNATURE, EXPIRY, KEY_NAME)


def test_generate_token_reproduces_the_captured_token() -> None:
    assert sas.generate_token(AUDIENCE, KEY_NAME, KEY, EXPIRY) == CAPTURED


def test_parse_token_decodes_every_field() -> None:
    parsed = sas.parse_token(CAPTURED)
    assert (parsed.audience, parsed.signature, parsed.expiry, parsed.key_name) == (
        AUDIENCE, SIGNATURE, EXPIRY, KEY_NAME)


# ---- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize(("audience", "key_name", "key"), [
    ("sb://ns.servicebus.windows.net/orders", "send-only", "c2VjcmV0+/=="),
    ("sb://localhost/", "Root Key&Name=1", "k"),
    ("amqps://host:5671/queue with space/$management", "n", "ключ"),
    ("queue1", "n", ""),
])
def test_generate_then_validate(audience: str, key_name: str, key: str) -> None:
    token = sas.generate_token(audience, key_name, key, EXPIRY)
    parsed = sas.validate_token(token, {key_name: (key,)}, NOW)
    assert (parsed.audience, parsed.key_name, parsed.expiry) == (audience, key_name, EXPIRY)


@settings(max_examples=50, deadline=None)
@given(audience=st.text(min_size=1, max_size=40), key_name=st.text(min_size=1, max_size=20),
       key=st.text(max_size=20), expiry=st.integers(0, 2**40))
def test_generate_then_validate_any_text(audience: str, key_name: str, key: str, expiry: int) -> None:
    token = sas.generate_token(audience, key_name, key, expiry)
    parsed = sas.validate_token(token, {key_name: (key,)}, expiry)
    assert (parsed.audience, parsed.key_name, parsed.expiry) == (audience, key_name, expiry)


def test_secondary_key_validates() -> None:
    assert sas.validate_token(CAPTURED, {KEY_NAME: ("primary-key", KEY)}, NOW).key_name == KEY_NAME


# ---- rejection -------------------------------------------------------------------------------------


def test_wrong_key() -> None:
    with pytest.raises(Unauthorized):
        sas.validate_token(CAPTURED, {KEY_NAME: ("not-the-key",)}, NOW)


@pytest.mark.parametrize("keys", [{"OtherKeyName": (KEY,)}, {KEY_NAME: ()}, {}])
def test_wrong_or_unknown_key_name(keys: dict[str, tuple[str, ...]]) -> None:
    with pytest.raises(Unauthorized):
        sas.validate_token(CAPTURED, keys, NOW)


def test_token_signed_with_one_key_name_but_claiming_another() -> None:
    token = sas.generate_token(AUDIENCE, "listen-only", "listen-key", EXPIRY)
    forged = token.replace("skn=listen-only", f"skn={KEY_NAME}")
    with pytest.raises(Unauthorized):
        sas.validate_token(forged, {KEY_NAME: (KEY,), "listen-only": ("listen-key",)}, NOW)


def test_expiry_is_inclusive() -> None:
    assert sas.validate_token(CAPTURED, KEYS, EXPIRY).expiry == EXPIRY
    assert sas.validate_token(CAPTURED, KEYS, EXPIRY - 0.5).expiry == EXPIRY
    for now in (EXPIRY + 0.001, EXPIRY + 1, EXPIRY + 10**6):
        with pytest.raises(Unauthorized, match="expired"):
            sas.validate_token(CAPTURED, KEYS, now)


@pytest.mark.parametrize("tampered", [
    CAPTURED.replace("queue1", "queue2"),
    CAPTURED.replace("localhost", "otherhost"),
    CAPTURED.replace("sr=sb%3A%2F%2Flocalhost%3A55672%2Fqueue1", "sr=sb%3A%2F%2Flocalhost%3A55672%2F"),
    CAPTURED.replace("se=1795271989", "se=1795271990"),
    CAPTURED.replace("sig=B", "sig=C"),
])
def test_tampered_token(tampered: str) -> None:
    assert tampered != CAPTURED
    with pytest.raises(Unauthorized):
        sas.validate_token(tampered, KEYS, NOW)


@pytest.mark.parametrize("missing", ["sr", "sig", "se", "skn"])
def test_missing_field(missing: str) -> None:
    fields = CAPTURED[len(sas.PREFIX):].split("&")
    token = sas.PREFIX + "&".join(f for f in fields if not f.startswith(missing + "="))
    with pytest.raises(Unauthorized):
        sas.parse_token(token)
    with pytest.raises(Unauthorized):
        sas.validate_token(token, KEYS, NOW)


@pytest.mark.parametrize("token", [
    "",
    "sr=a&sig=b&se=1&skn=c",  # no prefix
    "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x",  # a JWT, not a SAS token
    "SharedAccessSignature ",
    "SharedAccessSignature garbage",
    build("a", "b", "soon", KEY_NAME),  # se is not a number
    build("a", "b", "", KEY_NAME),
    build("a", "%C3%A9", str(EXPIRY), KEY_NAME),  # a non-ASCII signature
    build("a", "%FF%FE", str(EXPIRY), KEY_NAME),  # not even UTF-8
    build("%ED%A0%80", "abc", str(EXPIRY), KEY_NAME),  # an encoded lone surrogate
    build("sb%3A%2F%2Flocalhost%3A55672%2Fqueue1", "é", str(EXPIRY), KEY_NAME),  # raw non-ASCII
])
def test_malformed_tokens_are_unauthorized(token: str) -> None:
    with pytest.raises(Unauthorized):
        sas.validate_token(token, KEYS, NOW)


@settings(max_examples=200, deadline=None)
@given(body=st.text(max_size=120))
def test_any_text_is_either_valid_or_unauthorized(body: str) -> None:
    for token in (body, sas.PREFIX + body, CAPTURED + body, build(body, body, str(EXPIRY), KEY_NAME)):
        try:
            sas.validate_token(token, KEYS, NOW)
        except Unauthorized:
            pass


# ---- how clients spell sr ----------------------------------------------------------------------


def test_dotnet_lower_case_percent_encoding_is_accepted() -> None:
    # .NET's HttpUtility.UrlEncode writes lower-case hex and signs over that spelling.
    lower = "sb%3a%2f%2flocalhost%3a55672%2fqueue1"
    signature = sas.sign(lower, EXPIRY, KEY)
    assert signature != SIGNATURE  # the spelling matters to the HMAC
    token = build(lower, quote_plus(signature), str(EXPIRY), KEY_NAME)
    parsed = sas.validate_token(token, KEYS, NOW)
    assert parsed.audience == AUDIENCE and parsed.raw_audience == lower


def test_lower_case_signature_over_an_upper_case_token() -> None:
    signature = sas.sign("sb%3a%2f%2flocalhost%3a55672%2fqueue1", EXPIRY, KEY)
    token = build("sb%3A%2F%2Flocalhost%3A55672%2Fqueue1", quote_plus(signature), str(EXPIRY), KEY_NAME)
    assert sas.validate_token(token, KEYS, NOW).audience == AUDIENCE


def test_upper_case_signature_over_a_lower_case_token() -> None:
    token = build("sb%3a%2f%2flocalhost%3a55672%2fqueue1", quote_plus(SIGNATURE), str(EXPIRY), KEY_NAME)
    assert sas.validate_token(token, KEYS, NOW).audience == AUDIENCE


def test_unencoded_sr_signed_as_written() -> None:
    signature = sas.sign(AUDIENCE, EXPIRY, KEY)
    token = build(AUDIENCE, quote_plus(signature), str(EXPIRY), KEY_NAME)
    assert sas.validate_token(token, KEYS, NOW).audience == AUDIENCE


def test_unencoded_signature_is_accepted() -> None:
    # '+' in an unencoded signature would decode to a space; this one has only '=' and letters.
    assert sas.validate_token(build(quote_plus(AUDIENCE), SIGNATURE, str(EXPIRY), KEY_NAME), KEYS, NOW)


# ---- audiences ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("audience", "expected"), [
    ("sb://host:5672/q", ("host", "q")),
    ("sb://host/", ("host", "")),
    ("sb://host", ("host", "")),
    ("amqps://host:1/a/b", ("host", "a/b")),
    ("amqp://host/a/b/", ("host", "a/b")),
    ("sb://NS.ServiceBus.Windows.Net/Queue1/$management", ("ns.servicebus.windows.net", "queue1/$management")),
    ("sb://user:pass@host:5672/q", ("host", "q")),
    ("sb://[::1]:5672/q", ("[::1]", "q")),
    ("q", ("", "q")),
    ("/q/", ("", "q")),
    ("Queue1/$management", ("", "queue1/$management")),
    ("a/b", ("", "a/b")),
    ("", ("", "")),
    ("/", ("", "")),
    # The JavaScript administration client signs the whole request URL, query included.
    ("https://localhost:5443/orders?api-version=2021-05", ("localhost", "orders")),
    ("https://localhost:5443/$resources/queues?$skip=0&$top=100&api-version=2021-05",
     ("localhost", "$resources/queues")),
    ("https://host/q#frag", ("host", "q")),
    # Without a scheme, host:port opens the audience (the Go SDK's CreateConnectionStringWithSASUsingExpiry).
    ("localhost:5672", ("localhost", "")),
    ("LocalHost:5672/", ("localhost", "")),
    ("localhost:5672/Queue1", ("localhost", "queue1")),
    ("ns.servicebus.windows.net:5671/t/subscriptions/s", ("ns.servicebus.windows.net", "t/subscriptions/s")),
    ("[::1]:5672/q", ("[::1]", "q")),
    ("localhost:x/q", ("", "localhost:x/q")),  # not a port: a path, as before
])
def test_audience_path(audience: str, expected: tuple[str, str]) -> None:
    assert sas.audience_path(audience) == expected


# ---- covers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("entity", ["q", "q2", "orders/subscriptions/s1", "q/$management", "$cbs", ""])
def test_namespace_wide_grant_covers_everything(entity: str) -> None:
    assert sas.covers("", entity)
    assert sas.covers(sas.audience_path("sb://host/")[1], entity)


@pytest.mark.parametrize(("entity", "covered"), [
    ("q", True),
    ("q/$management", True),
    ("q/subscriptions/s1", True),
    ("/q/", True),
    ("Q", True),
    ("Q/$Management", True),
    ("q2", False),
    ("qq", False),
    ("q-2/x", False),
    ("", False),
    ("other/q", False),
])
def test_entity_grant_covers_the_entity_and_below(entity: str, covered: bool) -> None:
    assert sas.covers("q", entity) is covered


def test_grant_below_an_entity_does_not_cover_the_entity() -> None:
    assert not sas.covers("topic/subscriptions/s1", "topic")
    assert sas.covers("topic/subscriptions/s1", "topic/subscriptions/s1/$management")
    assert not sas.covers("topic/subscriptions/s1", "topic/subscriptions/s10")


def test_grant_from_a_token_audience() -> None:
    _, granted = sas.audience_path(sas.validate_token(CAPTURED, KEYS, NOW).audience)
    assert sas.covers(granted, "queue1") and sas.covers(granted, "Queue1/$management")
    assert not sas.covers(granted, "queue10")


@pytest.mark.parametrize(("authority", "host"), [
    ("localhost", "localhost"),
    ("localhost:5672", "localhost"),  # the Go SDK's open hostname carries the port
    ("NS.servicebus.windows.net:5671", "ns.servicebus.windows.net"),
    ("user@host:1", "host"),
    ("[::1]:5672", "[::1]"),
])
def test_host_of_drops_the_port_and_user(authority: str, host: str) -> None:
    assert sas.host_of(authority) == host


def test_go_sdk_bare_namespace_token_validates_and_grants_the_namespace() -> None:
    """What ``sas.CreateConnectionStringWithSASUsingExpiry`` makes: ``sr`` is the lower-cased, query-escaped
    ``host:port`` (or ``host:port/entity``), signed as written."""
    for audience, granted in (("localhost:5672", ""), ("localhost:5672/orders", "orders")):
        escaped = quote_plus(audience).lower()
        token = f"SharedAccessSignature sr={escaped}&sig={quote_plus(sas.sign(escaped, NOW + 60, 'k'))}" \
                f"&se={NOW + 60}&skn=name"
        parsed = sas.validate_token(token, {"name": ("k",)}, NOW)
        assert sas.audience_path(parsed.audience) == ("localhost", granted)


@pytest.mark.parametrize(("audience", "host", "expected"), [
    ("localhost", "localhost", ("localhost", "")),  # the Go SDK's bare namespace without a port
    ("LocalHost/Orders", "localhost", ("localhost", "orders")),
    ("ns.servicebus.windows.net/q", "ns.servicebus.windows.net", ("ns.servicebus.windows.net", "q")),
    ("localhost", "", ("", "localhost")),  # the host unknown: a path, as before
    ("orders/q", "localhost", ("", "orders/q")),  # another first segment: a path
    ("sb://elsewhere/q", "localhost", ("elsewhere", "q")),  # a scheme says the host itself
])
def test_a_bare_audience_opening_with_the_namespace_host(audience: str, host: str,
                                                         expected: tuple[str, str]) -> None:
    assert sas.audience_path(audience, host) == expected
