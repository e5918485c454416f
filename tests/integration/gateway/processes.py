"""Gateway child processes (`streamgate serve`) for tests that need more than one gateway."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass


@dataclass
class GatewayProcess:
    """A `streamgate serve` child process."""

    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"gateway at {url} exited with {process.returncode}"
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gateway at {url} not ready in {timeout_s}s")
