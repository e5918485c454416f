"""The URL a gateway announces: given as ``advertise_url`` or derived from its listener (the
machine's hostname when bound to every address); a URL clients could not use is a bad setting."""

from __future__ import annotations

import socket

import pytest

from gateway import cli
from gateway.settings import GatewaySettings, settings_from_env


def test_a_given_advertise_url_is_announced_as_is() -> None:
    settings = settings_from_env({"STREAMGATE_ADVERTISE_URL": "https://gw-1.example.com:8443"})
    assert settings.advertised_url == "https://gw-1.example.com:8443"


def test_the_default_is_the_listeners_own_address_and_scheme() -> None:
    assert GatewaySettings().advertised_url == "http://127.0.0.1:8080"
    assert GatewaySettings(host="10.0.0.5", port=9000).advertised_url == "http://10.0.0.5:9000"
    tls = GatewaySettings(host="::1", tls_cert_path="/tls/crt", tls_key_path="/tls/key")
    assert tls.advertised_url == "https://[::1]:8080"


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_listener_announces_the_machines_hostname(wildcard: str) -> None:
    settings = GatewaySettings(host=wildcard, port=8081)
    assert settings.advertised_url == f"http://{socket.gethostname()}:8081"


def test_a_port_chosen_at_bind_time_announces_nothing() -> None:
    assert GatewaySettings(port=0).advertised_url is None
    assert settings_from_env({"STREAMGATE_ADVERTISE_URL": ""}).advertise_url is None


@pytest.mark.parametrize("url", ["10.0.0.5:8080", "ftp://gw:21", "http://", "http://gw:99999",
                                 "http://[::1", "https://gw:8443/?x=1", "http://gw:0"])
def test_an_unusable_advertise_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"STREAMGATE_ADVERTISE_URL="):
        settings_from_env({"STREAMGATE_ADVERTISE_URL": url})


def test_serve_with_an_unusable_advertise_url_exits_as_a_bad_setting(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STREAMGATE_ADVERTISE_URL", "gw-1:8080")
    assert cli.main(["serve", "--port", "0"]) == 2
    error = capsys.readouterr().err
    assert "bad setting: STREAMGATE_ADVERTISE_URL='gw-1:8080'" in error
    assert "absolute http:// or https:// URL" in error
