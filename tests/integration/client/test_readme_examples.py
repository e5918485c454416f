"""The Python client guide's examples (client/README.md), run as written (the topic renamed)
against a gateway process (conftest's ``served_gateway``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

CLIENT_README = Path(__file__).resolve().parents[3] / "client" / "README.md"


def example(language: str, index: int = 0) -> str:
    """The ``index``-th ``language`` code block of the client guide."""
    blocks = re.findall(rf"```{language}\n(.*?)```", CLIENT_README.read_text(), re.S)
    assert len(blocks) > index, f"no {language} example {index}"
    return str(blocks[index])


def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def test_the_python_example_runs_as_written(served_gateway: str, topic_name: str) -> None:
    code = example("python").replace('"http://127.0.0.1:8080"', repr(served_gateway)).replace(
        '"orders"', repr(topic_name)).replace('"payments"', repr(f"{topic_name}-payments"))
    returncode, out, err = run(sys.executable, "-c", code)
    assert returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("1000 ")
    assert len(lines) >= 2


def test_the_event_sourcing_example_runs_as_written(served_gateway: str, topic_name: str) -> None:
    code = example("python", 1).replace('"http://127.0.0.1:8080"', repr(served_gateway)).replace(
        '"carts"', repr(topic_name))
    returncode, out, err = run(sys.executable, "-c", code)
    assert returncode == 0, err
    assert out.splitlines() == ["['fig', 'pear']"]


def test_the_admin_example_runs_as_written(served_gateway: str, topic_name: str) -> None:
    code = example("python", 2).replace('"http://127.0.0.1:8080"', repr(served_gateway)).replace(
        '"orders"', repr(topic_name))
    returncode, out, err = run(sys.executable, "-c", code)
    assert returncode == 0, err
    assert out.splitlines() == ["2 3600000 None", "0 0 0", "1 0 0", "True 2"]


def test_the_shell_example_runs_as_written(served_gateway: str, topic_name: str) -> None:
    for line in example("sh").splitlines():
        command = shlex.split(line, comments=True)
        if not command or command[0] == "source":
            continue
        assert command[0] == "streamgate"
        names = {"orders": topic_name, "carts": f"{topic_name}-carts",
                 "profiles": f"{topic_name}-profiles"}
        argv = [names.get(word, word) for word in command[1:]]
        returncode, _, err = run(sys.executable, "-m", "gateway.cli", *argv,
                                 env={"STREAMGATE_URL": served_gateway})
        assert returncode == 0, (line, err)
