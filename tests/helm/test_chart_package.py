"""The chart as it is handed out: helm/chart_package.py keeps README.md generated from the values
schema, and packages the chart (Helm's own package action) into a tarball that holds the chart and
nothing else, and lints and renders as the directory does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import helm_python as helm
from helm_render import CHART_DIR, SCENARIOS, lint, manifests, validate

SCRIPT = CHART_DIR.parent / "chart_package.py"
# What belongs in the package, each path under the chart's top-level directory.
LAYOUT = ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", ".helmignore",
          "templates/*.yaml", "templates/_*.tpl", "templates/NOTES.txt", "templates/tests/*.yaml",
          "dashboards/*.json", "alerts/*.rules.yml", "examples/*.yaml")
WARNING = 2  # lint severities: 1 info, 2 warning, 3 error
REQUIRED = {"Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt"}
# Leftovers of editors, merges and caches that a working copy of the chart may hold.
STRAYS = ("values.yaml.orig", "templates/gateway-service.yaml.rej", ".idea/workspace.xml",
          ".vscode/settings.json", "templates/.gateway-deployment.yaml.swp", "Chart.yaml~",
          "__pycache__/x.cpython-311.pyc", ".DS_Store", "notes.bak")


def chart_package(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the script as ``make dist`` does, with the repository's interpreter."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=False)


def package_into(out: Path, chart: Path = CHART_DIR) -> Path:
    done = chart_package("--chart", chart, "package", "--out", out)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def members(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as archive:
        return [member.name for member in archive.getmembers() if member.isfile()]


def chart_files(chart: Path) -> set[str]:
    """The files of the chart's layout in ``chart``."""
    return {name for path in chart.rglob("*") if path.is_file()
            and in_layout(name := str(path.relative_to(chart)))}


def in_layout(name: str) -> bool:
    return any(fnmatch(name, glob) for glob in LAYOUT)


def copy_chart(into: Path) -> Path:
    copied = into / "streamgate"
    shutil.copytree(CHART_DIR, copied)
    return copied


def test_chart_readme_is_generated_from_the_current_schema_and_defaults() -> None:
    done = chart_package("readme", "--check")
    assert done.returncode == 0, done.stderr


def test_readme_check_fails_on_a_changed_default_until_regenerated(tmp_path: Path) -> None:
    chart = copy_chart(tmp_path)
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("  replicas: 2\n", "  replicas: 4\n", 1))
    stale = chart_package("--chart", chart, "readme", "--check")
    assert stale.returncode == 1
    assert "stale" in stale.stderr
    assert chart_package("--chart", chart, "readme").returncode == 0
    assert "| `gateway.replicas` | integer | `4` |" in (chart / "README.md").read_text()
    assert chart_package("--chart", chart, "readme", "--check").returncode == 0


def test_readme_refuses_a_value_without_a_description(tmp_path: Path) -> None:
    chart = copy_chart(tmp_path)
    path = chart / "values.schema.json"
    schema = json.loads(path.read_text())
    del schema["properties"]["service"]["properties"]["port"]["description"]
    path.write_text(json.dumps(schema))
    done = chart_package("--chart", chart, "readme")
    assert done.returncode == 1
    assert "service.port has no description" in done.stderr


def test_readme_lists_every_value_with_type_default_and_description() -> None:
    readme = (CHART_DIR / "README.md").read_text()
    assert "| `gateway.settings.max_batch_bytes` | integer | `16777216` |" in readme
    assert "| `image.pullPolicy` | `Always` \\| `IfNotPresent` \\| `Never` |" in readme
    assert "| `externalEtcd.endpoints` | array | `[]` |" in readme
    assert "helm install sg streamgate-<version>.tgz" in readme


def test_package_holds_the_chart_under_its_name_and_nothing_stray(tmp_path: Path) -> None:
    chart = copy_chart(tmp_path / "work")
    clean = chart_files(chart)
    for stray in STRAYS:
        (chart / stray).parent.mkdir(parents=True, exist_ok=True)
        (chart / stray).write_text("left behind\n")
    with helm.Chart.load(str(CHART_DIR)) as loaded:
        version = loaded.metadata["version"]
    tarball = package_into(tmp_path / "dist", chart)
    assert tarball == tmp_path / "dist" / f"streamgate-{version}.tgz"
    names = members(tarball)
    assert names[0] == "streamgate/Chart.yaml"
    assert all(name.startswith("streamgate/") for name in names), names
    packed = {name.removeprefix("streamgate/") for name in names}
    assert packed == clean, sorted(packed ^ clean)
    assert packed >= REQUIRED
    assert any(fnmatch(name, "templates/*.yaml") for name in packed)
    assert all(in_layout(name) for name in packed), sorted(packed)


def identities(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(obj["kind"], obj["metadata"]["name"]) for obj in objects}


def test_packaged_chart_lints_and_renders_like_the_directory(tmp_path: Path) -> None:
    tarball = package_into(tmp_path)
    report = lint({}, tarball)
    assert not report["errors"], report
    assert all(message["severity"] < WARNING for message in report["messages"]), report
    for scenario in ("defaults", "external-redis", "archive-s3"):
        objects = manifests(SCENARIOS[scenario], chart=tarball)
        assert identities(objects) == identities(manifests(SCENARIOS[scenario])), scenario
        for obj in objects:
            validate(obj)
    with helm.Chart.load(str(tarball)) as chart:
        readme = next(file["data"] for file in chart.files if file["name"] == "README.md")
    assert readme == (CHART_DIR / "README.md").read_text()
