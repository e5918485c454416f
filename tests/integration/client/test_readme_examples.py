"""The README's client examples, run as written (the topic renamed) against a real gateway."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def example(language: str) -> str:
    """The first ``language`` code block of the README's client section."""
    section = README.read_text().split("## Python client and CLI", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match is not None, f"no {language} example"
    return match.group(1)


async def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_python_example_runs_as_written(base_url: str, topic_name: str) -> None:
    code = example("python").replace('"http://127.0.0.1:8080"', repr(base_url)).replace(
        '"orders"', repr(topic_name))
    returncode, out, err = await run(sys.executable, "-c", code)
    assert returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("1000 ")
    assert len(lines) >= 2


async def test_the_shell_example_runs_as_written(base_url: str, topic_name: str) -> None:
    for line in example("sh").splitlines():
        command = shlex.split(line, comments=True)
        if not command or command[0] == "source":
            continue
        assert command[0] == "streamgate"
        argv = [topic_name if word == "orders" else word for word in command[1:]]
        returncode, _, err = await run(sys.executable, "-m", "gateway.cli", *argv,
                                       env={"STREAMGATE_URL": base_url})
        assert returncode == 0, (line, err)
