"""The ``[jwt]`` table's ``jwks_url`` and its options, and ``RemoteJwks`` against a JWKS served on a
loopback port: refresh, failures keeping the last good key set, unknown key ids."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.auth.config import load_auth_config
from gateway.auth.errors import AuthConfigError, UnknownKeyId
from gateway.auth.jwks import JwksUrl, RemoteJwks
from gateway.auth.tokens import JwtVerifier
from tests.jwks_idp import serving_jwks


def write_config(tmp_path: Path, jwt_table: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text("[jwt]\nalgorithms = ['ES256']\n" + jwt_table)
    return path


def verifier_of(tmp_path: Path, jwt_table: str) -> JwtVerifier:
    verifier = load_auth_config(write_config(tmp_path, jwt_table), {}).jwt
    assert verifier is not None
    return verifier


def test_jwks_url_takes_default_refresh_intervals(tmp_path: Path) -> None:
    verifier = verifier_of(tmp_path, "jwks_url = 'https://idp.example/.well-known/jwks.json'\n")
    assert verifier.remote_keys is not None
    assert verifier.remote_keys.source == JwksUrl("https://idp.example/.well-known/jwks.json",
                                                  refresh_s=300.0, min_refresh_s=30.0)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/jwks", "http://localhost/jwks",
                                 "http://[::1]:9000/jwks", "https://idp.example/jwks"])
def test_https_urls_and_plain_http_to_loopback_hosts_are_accepted(tmp_path: Path,
                                                                  url: str) -> None:
    remote = verifier_of(tmp_path, f"jwks_url = '{url}'\njwks_refresh_s = 60\n").remote_keys
    assert remote is not None
    assert remote.source.url == url


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("jwks_url = 'https://idp/j'\njwks_file = 'jwks.json'\n", "not both"),
        ("jwks_url = 'http://idp.example/jwks'\n", "loopback"),
        ("jwks_url = 'http://10.0.0.1/jwks'\n", "loopback"),
        ("jwks_url = 'ftp://127.0.0.1/jwks'\n", "https://"),
        ("jwks_url = 'https:///jwks'\n", "https://"),
        ("jwks_url = 42\n", "expected a string"),
        ("jwks_refresh_s = 60\n", "only with jwks_url"),
        ("jwks_url = 'https://idp/j'\njwks_refresh_s = 0\n", "more than 0"),
        ("jwks_url = 'https://idp/j'\njwks_min_refresh_s = -1\n", "at least 0"),
        ("jwks_url = 'https://idp/j'\njwks_min_refresh_s = true\n", "seconds"),
        ("jwks_url = 'https://idp/j'\njwks_refresh_s = 10\njwks_min_refresh_s = 20\n",
         "must not exceed"),
        ("jwks_url = 'http://127.0.0.1/j'\njwks_ca_file = 'ca.pem'\n", "https:// jwks_url"),
        ("jwks_url = 'https://idp/j'\njwks_ca_file = 'missing-ca.pem'\n", "jwks_ca_file"),
    ],
)
def test_bad_jwks_url_settings_are_refused(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        load_auth_config(write_config(tmp_path, table), {})


async def test_a_new_key_id_is_fetched_once_and_verifies(tmp_path: Path) -> None:
    async with serving_jwks("a") as idp:
        verifier = verifier_of(tmp_path, f"jwks_url = '{idp.url}'\njwks_min_refresh_s = 0\n")
        assert verifier.remote_keys is not None
        async with verifier.remote_keys:
            assert verifier.verify(idp.token("a")).name == "by-a"
            idp.publish("b")
            with pytest.raises(UnknownKeyId) as raised:
                verifier.verify(idp.token("b"))
            assert raised.value.kid == "b"
            await verifier.refresh_keys()
            assert verifier.verify(idp.token("b")).name == "by-b"
            with pytest.raises(UnknownKeyId, match="no key 'a'"):
                verifier.verify(idp.token("a"))
        assert idp.fetches == 2


async def test_a_failed_refresh_keeps_the_last_good_key_set() -> None:
    async with serving_jwks("a") as idp, RemoteJwks(JwksUrl(idp.url, min_refresh_s=0)) as remote:
        first = dict(remote.keys)
        idp.status = 500
        await remote.refresh()
        idp.status = 200
        idp.document = {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "hs"}]}
        await remote.refresh()
        await idp.stop()
        await remote.refresh()
        assert remote.keys == first
        assert remote.failures == 3
        await remote.check_ready()


async def test_a_symmetric_key_in_the_document_fails_the_refresh() -> None:
    async with serving_jwks("a") as idp:
        idp.document["keys"].append({"kty": "oct", "k": "c2VjcmV0", "kid": "hs"})
        async with RemoteJwks(JwksUrl(idp.url)) as remote:
            assert remote.keys == {}
            assert "symmetric" in str(remote.last_error)


async def test_without_a_first_key_set_readiness_names_the_url() -> None:
    async with serving_jwks("a") as idp:
        idp.status = 404
        async with RemoteJwks(JwksUrl(idp.url)) as remote:
            with pytest.raises(RuntimeError, match=f"no JWKS read from {idp.url} yet: HTTP 404"):
                await remote.check_ready()


async def test_concurrent_unknown_kids_share_the_one_fetch_in_flight() -> None:
    async with serving_jwks("a") as idp, RemoteJwks(JwksUrl(idp.url, min_refresh_s=0)) as remote:
        await asyncio.gather(*(remote.refresh_for_unknown_kid() for _ in range(20)))
        assert idp.fetches == 2


async def test_no_fetch_starts_within_min_refresh_s_of_the_last() -> None:
    async with serving_jwks("a") as idp, RemoteJwks(JwksUrl(idp.url, min_refresh_s=600)) as remote:
        for _ in range(20):
            await remote.refresh_for_unknown_kid()
        assert idp.fetches == 1


async def test_the_key_set_is_read_again_every_refresh_s() -> None:
    source = JwksUrl("", refresh_s=0.05, min_refresh_s=0)
    async with serving_jwks("a") as idp, RemoteJwks(replace(source, url=idp.url)) as remote:
        idp.publish("b")
        # the third request comes after the second answer, with b only, was read
        await idp.fetched(3)
        assert set(remote.keys) == {"b"}
