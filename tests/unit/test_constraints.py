"""constraints.txt, which the venv, CI and the image install from, pins every requirement that
pyproject.toml and client/pyproject.toml name, each pin inside the range asked for."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from scripts.version import ROOT

PROJECTS = ("pyproject.toml", "client/pyproject.toml")
OWN = {"streamgate", "streamgate-client"}  # built from this repository, never from an index
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def pins() -> dict[str, Version]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    found = [_PIN.match(line) for line in lines if line and not line.startswith((" ", "#"))]
    assert all(found), "every line of constraints.txt is name==version"
    return {canonicalize_name(m[1]): Version(m[2]) for m in found if m}


def requirements(path: str) -> list[Requirement]:
    """Every requirement ``path`` names: its dependencies and each extra's (the projects of this
    repository left out: the extras naming their own project, the server's client)."""
    project = tomllib.loads((ROOT / path).read_text())["project"]
    named = [*project["dependencies"],
             *(item for extra in project.get("optional-dependencies", {}).values()
               for item in extra)]
    return [req for req in map(Requirement, named) if req.name not in OWN]


@pytest.mark.parametrize("path", PROJECTS)
def test_every_requirement_is_pinned_inside_its_range(path: str) -> None:
    pinned = pins()
    for requirement in requirements(path):
        version = pinned.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement} has no pin in constraints.txt"
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement.name}=={version} is outside {requirement}")


def test_build_backend_is_pinned_inside_both_projects_ranges() -> None:
    pinned = pins()
    for path in PROJECTS:
        for named in tomllib.loads((ROOT / path).read_text())["build-system"]["requires"]:
            requirement = Requirement(named)
            assert requirement.specifier.contains(pinned[canonicalize_name(requirement.name)])
