"""The client installs and imports without the server: its own distribution names only its own
dependencies."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[3] / "client"
SERVER_ONLY = (
    "gateway", "partitioner", "storage", "streamgate_spark", "streamgate_devstack", "redis",
    "aetcd", "grpc", "prometheus_client", "jwt", "uvloop", "pyspark"
)
BLOCKER = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {SERVER_ONLY!r}:
            raise ImportError(f"the client imported {{name}}")
        return None
sys.meta_path.insert(0, Refuse())
import streamgate_client, streamgate_client.cli
try:
    streamgate_client.cli.main(["produce", "--help"])
except SystemExit as exit:
    assert exit.code == 0
"""


def test_client_depends_on_aiohttp_and_orjson_only() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    names = {
        requirement.split(">")[0].split(";")[0].strip() for requirement in project["dependencies"]
    }
    assert names == {"aiohttp", "orjson", "backports.zstd"}


def test_client_imports_nothing_of_the_server() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER], cwd=CLIENT.parent, capture_output=True, text=True,
        timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "usage: streamgate-client produce" in done.stdout
