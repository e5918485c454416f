"""Saved contexts, the precedence of flags, variables and contexts, the TLS flags, ``status``'s
reading of /metrics and the completion scripts (no gateway: a temporary config dir)."""

from __future__ import annotations

import argparse
import ssl
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamgate_client.cli import main
from streamgate_client.cli_contexts import config_path, load, resolve, ssl_of
from streamgate_client.cli_status import parse_metrics, status_document, status_lines
from streamgate_devstack.certs import TlsFiles, make_pki

CONNECTION = ("url", "token", "api_key", "ca_file", "cert", "cert_key")


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable in ("STREAMGATE_URL", "STREAMGATE_TOKEN", "STREAMGATE_API_KEY",
                     "STREAMGATE_CA_FILE", "STREAMGATE_CERT", "STREAMGATE_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def command_args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**({name: None for name in CONNECTION} | {"context": None} | given))


def test_contexts_file_is_readable_by_its_owner_alone(config_home: Path) -> None:
    assert main(["context", "add", "prod", "--url", "https://prod:8443", "--token", "t"]) == 0
    path = config_home / "streamgate" / "contexts.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load(path) == ("prod", {"prod": {"url": "https://prod:8443", "token": "t"}})


def test_contexts_live_under_home_config_without_xdg(tmp_path: Path) -> None:
    assert config_path({"HOME": str(tmp_path)}) == (
        tmp_path / ".config" / "streamgate" / "contexts.toml")


def test_flag_beats_variable_beats_named_context_beats_current_one(config_home: Path) -> None:
    main(["context", "add", "current", "--url", "http://current", "--token", "t-current",
          "--api-key", "k-current", "--ca-file", "/ca-current"])
    main(["context", "add", "named", "--url", "http://named", "--token", "t-named"])
    args = command_args(context="named", url="http://flag")
    resolve(args, {"STREAMGATE_TOKEN": "t-env", "XDG_CONFIG_HOME": str(config_home)})
    assert (args.url, args.token, args.api_key, args.ca_file) == (
        "http://flag", "t-env", None, None)
    fallback = command_args()
    resolve(fallback, {"XDG_CONFIG_HOME": str(config_home)})
    assert (fallback.url, fallback.token, fallback.api_key, fallback.ca_file) == (
        "http://current", "t-current", "k-current", "/ca-current")


def test_without_any_context_the_default_url_applies(config_home: Path) -> None:
    args = command_args()
    resolve(args, {"XDG_CONFIG_HOME": str(config_home)})
    assert (args.url, args.token) == ("http://127.0.0.1:8080", None)


def test_an_unknown_named_context_is_an_error(config_home: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "list", "--context", "nowhere"]) == 1
    assert "no context named 'nowhere'" in capsys.readouterr().err


def test_list_and_show_never_print_secrets(config_home: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    main(["context", "add", "a", "--url", "http://a", "--token", "secret-token"])
    main(["context", "add", "b", "--url", "http://b", "--api-key", "secret-key", "--use"])
    capsys.readouterr()
    assert main(["context", "list"]) == 0
    assert main(["context", "list", "-o", "json"]) == 0
    assert main(["context", "show", "a"]) == 0
    assert main(["context", "show"]) == 0
    out = capsys.readouterr().out
    assert "secret" not in out
    assert "  NAME  URL\n  a     http://a\n* b     http://b\n" in out
    assert '"token": "(set)"' in out
    assert '"api_key": "(set)"' in out


def test_use_and_remove_move_the_current_context(config_home: Path) -> None:
    path = config_home / "streamgate" / "contexts.toml"
    main(["context", "add", "a", "--url", "http://a"])
    main(["context", "add", "b", "--url", "http://b"])
    assert load(path)[0] == "a"
    assert main(["context", "use", "b"]) == 0
    assert load(path)[0] == "b"
    assert main(["context", "remove", "b"]) == 0
    assert load(path) == (None, {"a": {"url": "http://a"}})
    assert main(["context", "use", "b"]) == 1


def test_names_with_quotes_round_trip_through_the_toml_file(config_home: Path) -> None:
    main(["context", "add", 'odd "name"', "--url", "http://x", "--token", 'a"b\\c'])
    _, contexts = load(config_home / "streamgate" / "contexts.toml")
    assert contexts == {'odd "name"': {"url": "http://x", "token": 'a"b\\c'}}


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return make_pki(tmp_path / "pki")


def test_tls_flags_build_a_context_trusting_the_ca(pki: TlsFiles) -> None:
    context = ssl_of(command_args(ca_file=str(pki.ca_cert), cert=str(pki.client_cert),
                                  cert_key=str(pki.client_key)))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ssl._ssl._test_decode_cert(str(pki.ca_cert))["subject"]]  # type: ignore[attr-defined]


def test_a_key_that_is_not_the_certificates_is_an_error(pki: TlsFiles) -> None:
    with pytest.raises(ValueError, match="--cert-key"):
        ssl_of(command_args(cert=str(pki.client_cert), cert_key=str(pki.server_key)))


def test_without_tls_files_the_system_cas_apply() -> None:
    assert ssl_of(command_args()) is None


def test_insecure_skips_verification_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert ssl_of(command_args(insecure=True, ca_file="/ignored")) is False
    assert "NOT verified" in capsys.readouterr().err


METRICS = """# HELP streamgate_build_info Build information
streamgate_build_info{python="3.11.7",version="1.2.3"} 1.0
streamgate_partitions_owned 3.0
streamgate_topic_partitions{topic="orders"} 4.0
streamgate_topic_owned_partitions{topic="orders"} 3.0
streamgate_redis_memory_used_bytes{node="10.0.0.1:7000",role="primary"} 2048.0
streamgate_redis_memory_headroom_ratio{node="10.0.0.1:7000",role="primary"} 0.75
"""


def test_status_reads_version_checks_nodes_and_owned_partitions() -> None:
    ready = (200, '{"status": "ready", "checks": {"redis": "ok", "etcd": "ok"}}')
    document = status_document("http://g", ready, (200, METRICS))
    assert document["ready"]
    assert document["version"] == "1.2.3"
    assert document["checks"] == {"redis": "ok", "etcd": "ok"}
    assert document["partitions_owned"] == 3
    assert document["topics"] == [{"topic": "orders", "partitions": 4, "owned_here": 3}]
    assert document["redis_nodes"] == [
        {"node": "10.0.0.1:7000", "role": "primary", "used_bytes": 2048, "headroom": 0.75}]
    assert "  orders  3/4" in status_lines(document)


def test_status_says_what_failed_when_not_ready_and_metrics_are_refused() -> None:
    not_ready = (503, '{"status": "not ready", "checks": {"etcd": "failed: timeout"}}')
    document = status_document("http://g", not_ready, (401, ""))
    assert not document["ready"]
    assert status_lines(document)[1:] == [
        "ready     NO", "  etcd     failed: timeout", "metrics   /metrics answered 401"]


def test_metric_labels_are_unescaped() -> None:
    assert list(parse_metrics('m{a="x\\"y",b="z"} 2\n')) == [("m", {"a": 'x"y', "b": "z"}, 2.0)]


def completion(shell: str) -> str:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "completion", shell],
                          capture_output=True, text=True, check=True).stdout


def test_completion_lists_no_hidden_option() -> None:
    for shell in ("bash", "fish"):
        assert "--worker-index" not in completion(shell)


def test_fish_completion_covers_commands_and_live_names() -> None:
    script = completion("fish")
    assert "complete -c streamgate -f -a '(__streamgate_candidates)'" in script
    assert "        case '_ topics create'\n" in script
    assert "set -l run streamgate $argv[1] list -o names" in script
