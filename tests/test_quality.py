"""Static checks are part of the test run: mypy --strict and ruff must be clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["gateway", "partitioner", "storage", "pipeline"]

pytestmark = pytest.mark.quality


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_mypy_strict_is_clean() -> None:
    result = run("mypy", "--strict", *PACKAGES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", *PACKAGES, "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr
