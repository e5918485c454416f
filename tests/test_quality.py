"""Static checks are part of the test run: mypy --strict and ruff clean over every package."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Every package of the repository: the top-level folders holding an __init__.py, and the ones users
# import under names of their own, each inside its folder (client/streamgate_client).
INITS = [*ROOT.glob("*/__init__.py"), *ROOT.glob("*/streamgate_*/__init__.py")]
PACKAGES = sorted(init.parent.name for init in INITS)
FOLDERS = sorted(str(init.parent.relative_to(ROOT)) for init in INITS)

pytestmark = pytest.mark.quality


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_mypy_is_configured_for_every_package() -> None:
    """`make lint` runs mypy over pyproject's list, so a package left off it goes unchecked."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(config["tool"]["mypy"]["packages"]) == PACKAGES


def test_mypy_strict_is_clean() -> None:
    result = run("mypy", "--strict", *(arg for package in PACKAGES for arg in ("-p", package)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", *FOLDERS, "tests", "bench", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_examples_are_strictly_typed() -> None:
    """The examples users copy are held to the packages' standard."""
    result = run("mypy", "--strict", *map(str, sorted((ROOT / "examples").glob("*.py"))))
    assert result.returncode == 0, result.stdout + result.stderr
