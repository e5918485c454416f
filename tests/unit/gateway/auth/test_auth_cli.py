"""``streamgate auth hash-key``."""

from __future__ import annotations

import io
import tomllib

import pytest

from gateway.auth.cli import run_auth_command
from gateway.auth.keys import hash_api_key
from gateway.cli import _parser, main


def test_hash_key_prints_a_key_and_its_toml_entry(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["auth", "hash-key", "--principal", "billing"])
    assert run_auth_command(args, io.StringIO()) == 0
    first_line, _, toml_text = capsys.readouterr().out.partition("\n\n")
    key = first_line.rsplit(" ", 1)[1]
    entry = tomllib.loads(toml_text)["api_keys"][0]
    assert entry == {"principal": "billing", "sha256": hash_api_key(key)}
    assert key not in toml_text


def test_hash_key_hashes_a_key_from_stdin_without_printing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _parser().parse_args(["auth", "hash-key", "--stdin"])
    assert run_auth_command(args, io.StringIO("sgk_existing\n")) == 0
    out = capsys.readouterr().out
    assert hash_api_key("sgk_existing") in out
    assert "sgk_existing" not in out


def test_serve_refuses_to_start_without_an_auth_config(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STREAMGATE_AUTH_MODE", raising=False)
    monkeypatch.delenv("STREAMGATE_AUTH_CONFIG_PATH", raising=False)
    assert main(["serve", "--port", "0"]) == 2
    assert "STREAMGATE_AUTH_CONFIG_PATH" in capsys.readouterr().err
