"""The source's gateway credentials (``apiKey``, ``token``): parsed, sent as the client library
sends them, and never shown."""

from __future__ import annotations

from streamgate_spark.options import parse_options

GIVEN = {"topic": "orders", "redisNodes": "127.0.0.1:7000", "gateway": "http://127.0.0.1:8080"}
KEY, TOKEN = "sgk_secret-key-never-shown", "eyJ.secret-token-never-shown"


def test_without_credentials_the_gateway_reads_send_no_authorization() -> None:
    options = parse_options(GIVEN)
    assert (options.api_key, options.token) == (None, None)
    assert options.gateway_headers() == {}


def test_an_api_key_is_sent_as_the_client_sends_it() -> None:
    options = parse_options({**GIVEN, "apiKey": KEY})
    assert options.api_key == KEY
    assert options.gateway_headers() == {"Authorization": f"ApiKey {KEY}"}


def test_a_token_is_sent_as_a_bearer_and_wins_over_an_api_key() -> None:
    options = parse_options({**GIVEN, "apiKey": KEY, "token": TOKEN})
    assert options.gateway_headers() == {"Authorization": f"Bearer {TOKEN}"}


def test_empty_credentials_count_as_none() -> None:
    options = parse_options({**GIVEN, "apiKey": "", "token": ""})
    assert options.gateway_headers() == {}


def test_the_credentials_stay_out_of_the_options_repr() -> None:
    shown = repr(parse_options({**GIVEN, "apiKey": KEY, "token": TOKEN}))
    assert "orders" in shown
    assert KEY not in shown
    assert TOKEN not in shown
