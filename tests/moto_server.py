"""A session fixture: moto's S3-compatible server (``python -m moto.server``) on a free loopback
port, for the archive tests that need an object store; stopped by PID at the end."""

from __future__ import annotations

import importlib.util
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

import pytest

from streamgate_devstack._process import ServerProcess, wait_until
from streamgate_devstack.ports import LOOPBACK, free_port

START_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class MotoServer:
    """Where the server answers (``endpoint`` is ``host:port``, plain HTTP) and the credentials it
    accepts (moto takes any)."""

    endpoint: str
    region: str = "us-east-1"
    access_key: str = "testing"
    secret_key: str = field(default="testing", repr=False)


def _answers(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except OSError as exc:
        return str(exc)


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory,
            report_missing: Callable[[str], NoReturn]) -> Iterator[MotoServer]:
    """moto's server on loopback; skipped locally (failed when CI=true) without moto[server]."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        report_missing("moto[server] is not installed (the dev extra)")
    port = free_port()
    server = ServerProcess(
        "moto_server", [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    try:
        url = f"http://{LOOPBACK}:{port}/"
        wait_until("moto_server", lambda: _answers(url), START_TIMEOUT_S, [server])
        yield MotoServer(f"{LOOPBACK}:{port}")
    finally:
        server.terminate()
