"""pyproject.toml's version is the one source: every copy states it, the installed distribution
and the gateway report it, and `make version`'s script rewrites every copy."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import GatewayMetrics
from scripts.version import COPIES, ROOT, SOURCE, drifted, main, project_version, set_version


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the files that state the version."""
    for relative in (SOURCE, *(copy.path for copy in COPIES)):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    return tmp_path


def test_every_copy_states_the_project_version() -> None:
    assert drifted() == []


def test_installed_distribution_and_build_info_report_the_project_version() -> None:
    assert importlib.metadata.version("streamgate") == project_version()
    registry = CollectorRegistry()
    GatewayMetrics.create(registry)
    labels = {"version": project_version(), "python": platform.python_version()}
    assert registry.get_sample_value("streamgate_build_info", labels) == 1.0


def test_set_rewrites_the_source_and_every_copy(tree: Path) -> None:
    set_version("2.3.4", tree)
    assert project_version(tree) == "2.3.4"
    assert drifted(tree) == []
    assert [copy.read((tree / copy.path).read_text()) for copy in COPIES] == [
        ["2.3.4"], ["2.3.4"], ["2.3.4"], ["2.3.4", "2.3.4"], ["2.3.4", "2.3.4"]]


def test_set_back_leaves_every_file_as_it_was(tree: Path) -> None:
    version = project_version(tree)
    set_version("9.9.9", tree)
    set_version(version, tree)
    for relative in (SOURCE, *(copy.path for copy in COPIES)):
        assert (tree / relative).read_bytes() == (ROOT / relative).read_bytes(), relative


def test_check_names_a_copy_that_drifted(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tree / "helm" / "streamgate" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{project_version()}"',
                                               'appVersion: "0.0.1"'))
    assert main(["check", "--root", str(tree)]) == 1
    assert capsys.readouterr().err == (
        f"helm/streamgate/Chart.yaml: {project_version()}, 0.0.1 (expected {project_version()})\n")


def test_set_refuses_what_npm_helm_and_pip_would_read_differently(tree: Path) -> None:
    with pytest.raises(ValueError, match="not a MAJOR"):
        set_version("1.0.0rc1", tree)
    assert drifted(tree) == []

