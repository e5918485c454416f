"""HTTP load from wrk (Debian package wrk), a C load generator, instead of a Python client.

On a 2-core machine the load generator shares the CPU with the gateway and Redis: an aiohttp client
posting single messages used a large share of a core, which the gateway then did not get.
redis-benchmark, the raw-Redis anchor, is C too. ``wrk_post_for`` posts one prebuilt body from N
connections for a duration and reads wrk's own summary (requests, duration, non-2xx count, latency
percentiles) printed by a Lua ``done``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = """
wrk.method = "POST"
local f = assert(io.open("{body}", "rb"))
wrk.body = f:read("*a")
f:close()
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("SGWRK %d %d %d %d %d %d\\n", summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class WrkRun:
    """What wrk measured: completed requests, seconds, and latency percentiles in ms."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    refused: int = 0  # of ``requests``, answered with a status other than 2xx (only with
                      # ``refused_ok``)


def wrk_binary() -> str | None:
    """wrk's path, or None when it is not installed (the caller falls back to its Python client)."""
    return shutil.which("wrk")


async def wrk_post_for(url: str, body: bytes, headers: dict[str, str], seconds: float,
                       connections: int, refused_ok: bool = False) -> WrkRun:
    """POST ``body`` to ``url`` from ``connections`` keep-alive connections (one wrk thread) for
    ``seconds``. A response other than 2xx fails the run unless ``refused_ok`` (then it is counted
    in ``refused``)."""
    binary = wrk_binary()
    if binary is None:
        raise FileNotFoundError("wrk not found (Debian package wrk)")
    with tempfile.TemporaryDirectory(prefix="sg-wrk-") as tmp:
        body_path = Path(tmp) / "body"
        body_path.write_bytes(body)
        header_lines = "\n".join(f'wrk.headers["{name}"] = "{value}"'
                                 for name, value in headers.items())
        script = Path(tmp) / "post.lua"
        script.write_text(_SCRIPT.format(body=body_path, headers=header_lines))
        process = await asyncio.create_subprocess_exec(
            binary, "-t", "1", "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
            "--timeout", "10s", "-s", str(script), url, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await process.communicate()
    text = out.decode(errors="replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("SGWRK ")), None)
    if process.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({process.returncode}): {text[-500:]}")
    requests, duration_us, bad_status, socket_errors, p50_us, p99_us = (
        int(x) for x in line.split()[1:])
    if (bad_status and not refused_ok) or socket_errors:
        raise RuntimeError(f"wrk: {bad_status} responses were not 2xx, "
                           f"{socket_errors} socket errors")
    return WrkRun(requests, duration_us / 1e6, p50_us / 1000, p99_us / 1000, bad_status)
