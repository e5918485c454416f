"""The CLI's TLS flags, variables and contexts against a real gateway listening with TLS (mutual
where it asks for client certificates); the CLI runs in a thread, since this process holds the
in-process gateway's etcd threads and must not fork."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_client_tls import serve_tls

from gateway.settings import GatewaySettings
from streamgate_client.cli import main
from streamgate_devstack.certs import TlsFiles, make_pki

pytestmark = pytest.mark.integration


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return make_pki(tmp_path / "pki")


@pytest.fixture(autouse=True)
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("STREAMGATE_URL", "STREAMGATE_TOKEN", "STREAMGATE_API_KEY",
                     "STREAMGATE_CA_FILE", "STREAMGATE_CERT", "STREAMGATE_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def tls_flags(pki: TlsFiles, *, client_cert: bool = True) -> list[str]:
    flags = ["--ca-file", str(pki.ca_cert)]
    return flags + (["--cert", str(pki.client_cert), "--cert-key", str(pki.client_key)]
                    if client_cert else [])


async def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``streamgate args...`` off the loop: exit code, stdout, stderr."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def test_tls_flags_reach_a_mutual_tls_gateway(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles, topic_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=True)
    flags = ["--url", url, *tls_flags(pki)]
    assert (await cli(capsys, "topics", "create", topic_name, "--partitions", "1", *flags))[0] == 0
    code, out, err = await cli(capsys, "produce", topic_name, "over-wss", *flags)
    assert code == 0, err
    code, out, err = await cli(capsys, "replay", topic_name, "-o", "raw", *flags)
    assert (code, out) == (0, "over-wss\n"), err
    code, out, err = await cli(capsys, "status", "-o", "json", *flags)
    assert code == 0, err
    assert orjson.loads(out)["ready"]


async def test_tls_files_come_from_variables_or_a_context(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles, topic_name: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=True)
    assert (await cli(capsys, "context", "add", "tls", "--url", url, *tls_flags(pki)))[0] == 0
    code, out, err = await cli(capsys, "topics", "create", topic_name, "--partitions", "1")
    assert code == 0, err
    assert (await cli(capsys, "context", "remove", "tls"))[0] == 0
    for variable, path in (("STREAMGATE_URL", url), ("STREAMGATE_CA_FILE", pki.ca_cert),
                           ("STREAMGATE_CERT", pki.client_cert),
                           ("STREAMGATE_KEY", pki.client_key)):
        monkeypatch.setenv(variable, str(path))
    code, out, err = await cli(capsys, "topics", "list", "-o", "names")
    assert code == 0, err
    assert topic_name in out.split()


async def test_without_a_client_certificate_the_cli_says_why_it_was_refused(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=True)
    code, _, err = await cli(capsys, "topics", "list", "--url", url,
                             *tls_flags(pki, client_cert=False))
    assert code == 1
    assert "client certificates" in err


async def test_insecure_skips_verification_loudly_and_without_it_verification_fails(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=False)
    code, _, err = await cli(capsys, "topics", "list", "--url", url)
    assert code == 1
    assert "CERTIFICATE_VERIFY_FAILED" in err
    code, _, err = await cli(capsys, "topics", "list", "--url", url, "--insecure")
    assert code == 0, err
    assert "NOT verified" in err
