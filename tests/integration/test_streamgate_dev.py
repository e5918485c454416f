"""`streamgate dev` as a user runs it: it comes up, serves, stops cleanly, and keeps data across
restarts."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.routes.console import console_is_built
from streamgate_devstack.ports import free_port

START_TIMEOUT_S = 90


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def console_status(base: str) -> int:
    """The status of the console's page (HTML, not JSON)."""
    try:
        with urllib.request.urlopen(f"{base}/console/", timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


class DevProcess:
    def __init__(self, data_dir: Path, port: int, *extra: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log = open(data_dir.parent / f"dev-{port}-{time.monotonic_ns()}.log", "w+")  # noqa: SIM115
        args = [
            sys.executable, "-m", "gateway.cli", "dev", "--port", str(port), "--data-dir",
            str(data_dir), "--redis-base-port", "0", "--etcd-port", "0", "--etcd-peer-port", "0",
            *extra,
        ]
        self.process = subprocess.Popen(
            args,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"streamgate dev exited early:\n{self.output()}"
            try:
                if call("GET", self.base + "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"streamgate dev not ready in {START_TIMEOUT_S}s:\n{self.output()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


@pytest.fixture
def dev_dir(tmp_path: Path) -> Path:
    return tmp_path / "stack"


def redis_caps(banner: str) -> list[tuple[str, str]]:
    """Each Redis node's maxmemory and policy, from the addresses the banner names."""
    line = next(line for line in banner.splitlines() if line.strip().startswith("redis "))
    caps = []
    for address in line.split(None, 1)[1].split(", "):
        host, _, port = address.rpartition(":")
        with redis.Redis(host=host, port=int(port), decode_responses=True) as node:
            config = node.config_get("maxmemory*")
        caps.append((config["maxmemory"], config["maxmemory-policy"]))
    return caps


def children_alive(data_dir: Path) -> list[str]:
    out = subprocess.run(
        ["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True
    ).stdout
    return [
        line for line in out.splitlines() if str(data_dir) in line and "gateway.cli" not in line
    ]


def test_dev_stack_serves_and_keeps_messages_across_a_restart(
    dev_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    first = DevProcess(dev_dir, port, "--redis-maxmemory", "64mb",
                       "--archive-url", f"file://{tmp_path}/archive")
    try:
        first.wait_ready()
        assert f"archive   file://{tmp_path}/archive" in first.output()
        assert "curl" in first.output()
        assert "memory    64.0 MiB per Redis node (noeviction" in first.output()
        assert redis_caps(first.output()) == [(str(64 * 1024 * 1024), "noeviction")] * 6
        assert f"console   {first.base}/console/" in first.output()
        assert console_status(first.base) == (200 if console_is_built() else 503)
        assert (
            call("POST", first.base + "/v1/topics", {"name": "orders", "partitions": 3})[0] == 201
        )
        status, body = call(
            "POST",
            first.base + "/v1/topics/orders/messages",
            {"acks": "all", "messages": [{"value": i, "partition": 1} for i in range(50)]},
        )
        assert status == 200, body
    finally:
        assert first.stop() == 0
    assert children_alive(dev_dir) == []

    second = DevProcess(dev_dir, port)
    try:
        second.wait_ready()
        assert f"archive   {(dev_dir / 'archive').resolve().as_uri()}" in second.output()
        status, page = call(
            "GET", second.base + "/v1/topics/orders/partitions/1/messages?limit=100"
        )
        assert status == 200
        assert [m["value"] for m in page["messages"]] == list(range(50))
    finally:
        assert second.stop() == 0
    assert children_alive(dev_dir) == []


def test_running_dev_stack_adds_shard_and_keeps_serving(dev_dir: Path) -> None:
    port = free_port()
    dev = DevProcess(dev_dir, port)
    try:
        dev.wait_ready()
        assert call("POST", dev.base + "/v1/topics", {"name": "grow", "partitions": 6})[0] == 201
        status, body = call(
            "POST",
            dev.base + "/v1/topics/grow/messages",
            {"acks": "all", "messages": [{"key": f"k{i}", "value": i} for i in range(300)]},
        )
        assert status == 200, body
        added = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "dev-add-shard", "--data-dir", str(dev_dir)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert added.returncode == 0, added.stderr + dev.output()
        assert json.loads(added.stdout)["primaries"] == 4
        values = []
        for partition in range(6):
            status, page = call(
                "GET", dev.base + f"/v1/topics/grow/partitions/{partition}/messages?limit=1000"
            )
            assert status == 200
            values += [m["value"] for m in page["messages"]]
        assert sorted(values) == list(range(300))
        status, body = call(
            "POST",
            dev.base + "/v1/topics/grow/messages",
            {"acks": "all", "messages": [{"key": f"k{i}", "value": i} for i in range(100)]},
        )
        assert status == 200, body
    finally:
        assert dev.stop() == 0
    assert children_alive(dev_dir) == []


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_push_commands() -> list[str]:
    """The README's push walk-through, line by line (comments dropped)."""
    text = README.read_text()
    start = text.index("**Point a push subscription at a small local receiver.**")
    block = text[start:].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if shlex.split(line, comments=True)]


def test_the_readme_push_walk_through_works_as_written(dev_dir: Path, tmp_path: Path) -> None:
    port, receiver_port = free_port(), free_port()
    dev = DevProcess(dev_dir, port)
    env = {**os.environ, "STREAMGATE_URL": f"http://127.0.0.1:{port}"}
    receiver: subprocess.Popen[str] | None = None
    received = open(tmp_path / "receiver.log", "w+")  # noqa: SIM115
    try:
        dev.wait_ready()
        for line in readme_push_commands():
            words = [word.replace("9000", str(receiver_port))
                     for word in shlex.split(line, comments=True)]
            if words[0] == "export":
                continue  # the secret: taken from what `push create` printed
            program = {".venv/bin/streamgate": [sys.executable, "-m", "gateway.cli"],
                       ".venv/bin/python": [sys.executable]}[words[0]]
            if words[-1] == "&":
                receiver = subprocess.Popen([*program, *words[1:-1]], env=env, stdout=received,
                                            stderr=subprocess.STDOUT, text=True)
                wait_for_port(receiver_port)
                continue
            describing = words[1:3] == ["push", "describe"]
            done = run_until([*program, *words[1:]], env,
                             lambda out, wait=describing: "closed" in out or not wait)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            if words[1:3] == ["push", "create"]:
                secret = done.stdout.split("signing secret (shown once): ", 1)[1].split()[0]
                env["STREAMGATE_PUSH_SECRET"] = secret
            if "produce" in words:
                wait_for_line(received, 'key=alice value={"total": 42}')
            if words[1:3] == ["push", "describe"]:
                assert "closed" in done.stdout, done.stdout
        assert receiver is not None
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait(timeout=10)
        received.close()
        assert dev.stop() == 0
    assert children_alive(dev_dir) == []


def run_until(argv: list[str], env: dict[str, str], done: Any,
              timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` again until ``done(stdout)`` or it fails (a partition's health comes with the
    owner's next lag round)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                                check=False)
        if result.returncode != 0 or done(result.stdout) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def wait_for_line(log: Any, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log.seek(0)
        if text in log.read():
            return
        time.sleep(0.1)
    log.seek(0)
    raise AssertionError(f"the receiver never printed {text!r}:\n{log.read()}")
