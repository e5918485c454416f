"""The artifacts `make dist` hands to users, built once per session as it builds them and each
installed into a fresh venv outside the repository: the server's wheel serves its console without
Node, the client's wheel alone publishes and consumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from served import serve_gateway

from scripts.version import ROOT, project_version

COMPILED = ("partitioner/_speedups/_murmur2", "gateway/_speedups/_plain",
            "gateway/_speedups/_sketch", "gateway/_speedups/_frames", "storage/_speedups/_wire",
            "storage/_speedups/_entries", "storage/_speedups/_pages")
SERVER_PACKAGES = {"gateway", "partitioner", "storage", "streamgate_spark", "streamgate_devstack"}
CLIENT_SCRIPT = """\
import asyncio, json, sys

from streamgate_client import Admin, Consumer, Producer


async def main(url: str, topic: str) -> None:
    async with asyncio.timeout(60):
        async with Admin(url) as admin:
            await admin.create_topic(topic, partitions=1)
        async with Producer(url, topic, acks="all") as producer:
            sent = await producer.send_and_wait({"n": 1}, key="k")
        async with Consumer(url, topic, from_="earliest") as consumer:
            async for message in consumer:
                print(json.dumps({"sent": str(sent.offset), "offset": str(message.offset),
                                  "key": message.key, "value": message.value}))
                return


asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@dataclass(frozen=True)
class Artifacts:
    """The wheels and sdists of both distributions, in one folder."""

    folder: Path

    def one(self, pattern: str) -> Path:
        [path] = self.folder.glob(pattern)
        return path


@dataclass(frozen=True)
class Venv:
    """A fresh venv outside the repository, with only what an artifact brought into it."""

    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def env(self) -> dict[str, str]:
        """Its bin folder alone on PATH (no Node, nothing of the repository's venv)."""
        return {"PATH": str(self.bin), "HOME": os.environ.get("HOME", "/nonexistent")}

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.bin / args[0]), *args[1:]], cwd=cwd, env=self.env(),
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
        return done


def build(source: Path, out: Path) -> None:
    """What `make dist` runs: the sdist, then the wheel built from that sdist."""
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"build of {source} failed:\n{done.stdout[-4000:]}{done.stderr}"


def install(venv: Path, *wheels: Path) -> Venv:
    """``python -m venv``, then the wheels with their dependencies as constraints.txt pins them
    (pip's cache serves those the suite's venv already fetched)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "-c", str(ROOT / "constraints.txt"), *map(str, wheels)],
                          capture_output=True, text=True, timeout=600, check=False)
    names = ", ".join(wheel.name for wheel in wheels)
    assert done.returncode == 0, f"installing {names} failed:\n{done.stdout}{done.stderr}"
    return Venv(venv)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory,
              report_missing: Callable[[str], NoReturn]) -> Artifacts:
    if not (ROOT / "gateway" / "console" / "js" / "console" / "main.js").is_file():
        report_missing("the web console is not built: make console")
    out = tmp_path_factory.mktemp("dist")
    build(ROOT, out)
    build(ROOT / "client", out)
    return Artifacts(out)


@pytest.fixture(scope="session")
def server_venv(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The server's wheel and its one dependency built here, the client's."""
    return install(tmp_path_factory.mktemp("server") / "venv", artifacts.one("streamgate-*.whl"),
                   artifacts.one("streamgate_client-*.whl"))


@pytest.fixture(scope="session")
def client_venv(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(tmp_path_factory.mktemp("client") / "venv",
                   artifacts.one("streamgate_client-*.whl"))


@pytest.fixture
def wheel_gateway(server_venv: Venv, redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """``streamgate serve`` from the server's venv, run from outside the repository."""
    yield from serve_gateway(redis_cluster, etcd_server, settings=server_venv.env(),
                             program=[str(server_venv.bin / "streamgate")])


def tar_names(path: Path) -> list[str]:
    with tarfile.open(path) as archive:
        return archive.getnames()


def get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


def test_server_wheel_carries_compiled_parts_console_and_license(artifacts: Artifacts) -> None:
    with zipfile.ZipFile(artifacts.one("streamgate-*.whl")) as wheel:
        names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == SERVER_PACKAGES
    for stem in COMPILED:
        assert any(name.startswith(stem) and name.endswith(".so") for name in names), stem
    assert "gateway/console/js/console/main.js" in names
    assert f"streamgate-{project_version()}.dist-info/licenses/LICENSE" in names


def test_sdists_carry_the_sources_their_wheels_are_built_from(artifacts: Artifacts) -> None:
    version = project_version()
    server = tar_names(artifacts.one("streamgate-*.tar.gz"))
    for stem in COMPILED:
        assert f"streamgate-{version}/{stem}.c" in server
    assert f"streamgate-{version}/gateway/_speedups/_decimal.h" in server
    assert f"streamgate-{version}/gateway/console/js/console/main.js" in server
    assert not [name for name in server if name.endswith(".so")]
    client = tar_names(artifacts.one("streamgate_client-*.tar.gz"))
    prefix = f"streamgate_client-{version}"
    assert {f"{prefix}/LICENSE", f"{prefix}/streamgate_client/py.typed"} <= set(client)


def test_server_wheel_prints_the_project_version(server_venv: Venv, tmp_path: Path) -> None:
    printed = server_venv.run("streamgate", "--version", cwd=tmp_path).stdout
    assert printed.strip() == f"streamgate {project_version()}"


@pytest.mark.timeout(600)
def test_server_wheel_serves_the_console_without_node(server_venv: Venv, wheel_gateway: str,
                                                      tmp_path: Path) -> None:
    where = server_venv.run("python", "-c", "import gateway; print(gateway.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(server_venv.path)
    status, kind, page = get(f"{wheel_gateway}/console/")
    assert (status, kind.split(";")[0]) == (200, "text/html")
    assert b'src="js/console/main.js"' in page
    status, kind, script = get(f"{wheel_gateway}/console/js/console/main.js")
    assert status == 200
    assert "javascript" in kind
    assert b"import" in script


@pytest.mark.timeout(600)
def test_client_wheel_alone_publishes_and_consumes(client_venv: Venv, served_gateway: str,
                                                   tmp_path: Path) -> None:
    assert client_venv.run("streamgate-client", "--version", cwd=tmp_path).stdout.strip() == (
        f"streamgate-client {project_version()}")
    server = client_venv.run("python", "-c", "import importlib.util as u; "
                             "print([u.find_spec(p) for p in ('gateway', 'storage')])",
                             cwd=tmp_path)
    assert server.stdout.strip() == "[None, None]"
    script = tmp_path / "roundtrip.py"
    script.write_text(CLIENT_SCRIPT)
    topic = f"wheel-{uuid.uuid4().hex[:8]}"
    done = client_venv.run("python", str(script), served_gateway, topic, cwd=tmp_path)
    received = json.loads(done.stdout)
    assert received == {"sent": received["offset"], "offset": received["offset"], "key": "k",
                        "value": {"n": 1}}
