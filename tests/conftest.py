"""Session fixtures: a real Redis Cluster and etcd on free loopback ports, started once per test
run.

Tests under tests/integration are marked `integration` automatically. When a server binary is
missing the fixtures skip locally and fail when CI=true, so CI never passes by skipping.

Async tests run on the event loop a gateway process runs on: ``STREAMGATE_EVENT_LOOP`` (the
gateway's own setting, which gateways started by tests inherit too), uvloop unless it says
``asyncio``. `make test` runs the suite on uvloop and the gateway tests once more on asyncio's loop.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings
from moto_server import moto_s3  # noqa: F401  (a session fixture)
from workers import first_out

from streamgate_devstack import (
    EtcdConfig,
    EtcdProcess,
    MissingBinary,
    RedisClusterConfig,
    RedisClusterProcess,
)
from streamgate_devstack._process import require_binary

ROOT = Path(__file__).resolve().parent.parent
INTEGRATION_DIR = ROOT / "tests" / "integration"
# Generated-input tests check behaviour, not speed: on a loaded machine (the suite spread over
# workers) an example may outlast hypothesis' default deadline.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
# Shorter than the dev default (3000) so failover tests finish sooner; still far
# above scheduling jitter.
TEST_CLUSTER_NODE_TIMEOUT_MS = 2000


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM (e.g. from `timeout`) into KeyboardInterrupt, so fixtures stop their servers by
    PID."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    # the CLI reads saved contexts from the user's config dir: the suite never sees the developer's
    config_home = tempfile.mkdtemp(prefix="sg-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config_home
    config.add_cleanup(lambda: shutil.rmtree(config_home, ignore_errors=True))


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loop async tests run on: the gateway's (``STREAMGATE_EVENT_LOOP``, uvloop by default)."""
    if os.environ.get("STREAMGATE_EVENT_LOOP", "uvloop") == "asyncio":
        return {"asyncio": asyncio.new_event_loop}
    import uvloop

    return {"uvloop": uvloop.new_event_loop}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as `integration`; when the run is spread over
    workers by group (`make test TEST_WORKERS=3`), send the longest groups out first."""
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)
    if config.getoption("dist", "no") == "loadgroup":
        items.sort(key=lambda item: first_out(item.path.relative_to(ROOT)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup``: whole groups of tests per worker (tests/workers.py)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from workers import GroupScheduling

    return GroupScheduling(config, log)


MissingReport = Callable[[str], NoReturn]


def missing(message: str) -> NoReturn:
    """Skip locally, fail when CI=true: a missing binary or package must never turn CI green by
    skipping."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)


def unavailable(exc: MissingBinary) -> NoReturn:
    """A missing server binary: skipped locally, a failure in CI."""
    missing(f"a server binary is missing: {exc}")


def compiled_or_skip(name: str) -> ModuleType:
    """A compiled part, imported; when it is not built, skipped locally and a failure when CI=true
    (``missing``): its own tests never pass in CI by skipping."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(f"{name} is not built: pip install -e ./client -e . with a C compiler")


@pytest.fixture(scope="session")
def compiled_part() -> Callable[[str], ModuleType]:
    """For a compiled part's own tests: ``compiled_part("gateway._speedups._frames")`` is the
    module (skip, or fail in CI, when it is not built)."""
    return compiled_or_skip


@pytest.fixture(scope="session")
def report_missing() -> MissingReport:
    """For tests that need a binary or package of their own: call it with what is missing (skip, or
    fail in CI)."""
    return missing


@pytest.fixture(scope="session")
def devstack_binaries() -> None:
    """Request this in tests that start their own servers: skips (or fails in CI) if a binary is
    missing."""
    try:
        for binary in ("redis-server", "redis-cli", "etcd"):
            require_binary(binary)
    except MissingBinary as exc:
        unavailable(exc)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcess]:
    """3 primaries + 3 replicas, AOF on, replicas linked. Tests that pause/kill nodes must restore
    them."""
    config = RedisClusterConfig(
        data_dir=tmp_path_factory.mktemp("redis-cluster"),
        primaries=3,
        replicas_per_primary=1,
        cluster_node_timeout_ms=TEST_CLUSTER_NODE_TIMEOUT_MS,
    )
    cluster = RedisClusterProcess(config)
    try:
        cluster.start()  # stops whatever it started if it fails
    except MissingBinary as exc:
        unavailable(exc)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """A single etcd member; connect with `aetcd.Client(etcd_server.host, etcd_server.port)`."""
    server = EtcdProcess(EtcdConfig(data_dir=tmp_path_factory.mktemp("etcd")))
    try:
        server.start()
    except MissingBinary as exc:
        unavailable(exc)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def served_gateway(redis_cluster: RedisClusterProcess, etcd_server: EtcdProcess) -> Iterator[str]:
    """``python -m gateway.cli serve`` on a free port (its base URL); stopped by PID afterwards."""
    from served import serve_gateway

    yield from serve_gateway(redis_cluster, etcd_server)
