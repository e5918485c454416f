"""The one version source, pyproject.toml's ``[project] version``, and every file that carries a
copy: ``show`` prints it, ``check`` lists the copies that drifted, ``set X.Y.Z`` writes them all."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "pyproject.toml"
# npm and Helm take semantic versions, Python PEP 440 ones: plain releases read the same to all
RELEASE = re.compile(r"\d+\.\d+\.\d+")
_TOML_VERSION = re.compile(r'(?m)^(version = ")([^"]+)(")$')  # the first is [project]'s
_CLIENT_PIN = re.compile(r'(?m)^(    "streamgate-client==)([^"]+)(",)')  # the server's dependency
_CHART_VERSIONS = re.compile(r'(?m)^((?:version|appVersion): "?)([^"\n]+)("?)$')


@dataclass(frozen=True)
class Copy:
    """A file holding the version: the versions it states, and its text with them replaced."""

    path: str
    read: Callable[[str], list[str]]
    write: Callable[[str, str], str]


def _pattern_copy(path: str, pattern: re.Pattern[str], count: int) -> Copy:
    return Copy(path, lambda text: [m[2] for m in pattern.finditer(text)][:count],
                lambda text, version: pattern.sub(rf"\g<1>{version}\g<3>", text, count=count))


def _json_copy(path: str, *keys: tuple[str, ...]) -> Copy:
    """``keys``: where the version sits, as paths of object keys (npm writes two-space JSON)."""

    def holder(document: dict[str, Any], key: tuple[str, ...]) -> dict[str, Any]:
        for part in key[:-1]:
            document = document[part]
        return document

    def write(text: str, version: str) -> str:
        document = json.loads(text)
        for key in keys:
            holder(document, key)[key[-1]] = version
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    return Copy(path, lambda text: [holder(json.loads(text), key)[key[-1]] for key in keys], write)


SOURCE_COPY = _pattern_copy(SOURCE, _TOML_VERSION, 1)
COPIES = (
    _pattern_copy(SOURCE, _CLIENT_PIN, 1),
    _pattern_copy("client/pyproject.toml", _TOML_VERSION, 1),
    _json_copy("client/typescript/package.json", ("version",)),
    _json_copy("client/typescript/package-lock.json", ("version",), ("packages", "", "version")),
    _pattern_copy("helm/streamgate/Chart.yaml", _CHART_VERSIONS, 2),
)


def project_version(root: Path = ROOT) -> str:
    """The version every artifact carries."""
    found = SOURCE_COPY.read((root / SOURCE).read_text())
    if not found:
        raise ValueError(f"{SOURCE} states no version")
    return found[0]


def drifted(root: Path = ROOT) -> list[str]:
    """One line per copy that does not state the project's version (empty when all agree)."""
    version = project_version(root)
    lines = []
    for copy in COPIES:
        found = copy.read((root / copy.path).read_text())
        if not found or any(stated != version for stated in found):
            lines.append(f"{copy.path}: {', '.join(found) or 'no version'} (expected {version})")
    return lines


def set_version(version: str, root: Path = ROOT) -> None:
    """Write ``version`` into the source and every copy."""
    if not RELEASE.fullmatch(version):
        raise ValueError(f"{version!r} is not a MAJOR.MINOR.PATCH release")
    for copy in (SOURCE_COPY, *COPIES):
        file = root / copy.path
        file.write_text(copy.write(file.read_text(), version))


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/version.py show|check|set X.Y.Z [--root DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["show", "check", "set"])
    parser.add_argument("version", nargs="?", help="the new version (set)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository (default: this one)")
    args = parser.parse_args(argv)
    if args.command == "set":
        if args.version is None:
            parser.error("set needs a version")
        set_version(args.version, args.root)
    if args.command == "check":
        problems = drifted(args.root)
        sys.stderr.write("".join(f"{line}\n" for line in problems))
        return 1 if problems else 0
    print(project_version(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
