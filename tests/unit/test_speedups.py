"""The packages' compiled-code boundaries (``<package>/_speedups``) agree: one switch read by one
rule, one decimal writer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "partitioner", "storage")  # the packages with compiled parts
BOUNDARIES = [f"{package}._speedups" for package in PACKAGES
              if (ROOT / package / "_speedups" / "__init__.py").exists()]
SWITCH_VALUES = {"": False, "0": False, "false": False, " No ": False, "1": True, "yes": True,
                 "TRUE": True, "on": True}


def test_every_boundary_reads_the_switch_by_the_same_rule() -> None:
    code = (
        "import importlib, os, sys\n"
        "for value in sys.argv[2:]:\n"
        "    os.environ['STREAMGATE_NO_EXTENSIONS'] = value\n"
        "    print([importlib.reload(importlib.import_module(name)).OFF\n"
        "           for name in sys.argv[1].split(',')])\n"
    )
    lines = subprocess.run([sys.executable, "-c", code, ",".join(BOUNDARIES), *SWITCH_VALUES],
                           capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines()
    assert len(BOUNDARIES) == len(PACKAGES)
    assert lines == [str([off] * len(BOUNDARIES)) for off in SWITCH_VALUES.values()]


def test_every_package_writes_decimals_with_the_same_header() -> None:
    copies = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("_decimal.h"))
    assert len(copies) >= 2
    assert {path.read_bytes() for path in copies} == {copies[0].read_bytes()}


def test_every_c_source_sits_in_its_packages_boundary() -> None:
    sources = [path for package in PACKAGES for path in (ROOT / package).rglob("*.[ch]")]
    assert sources
    assert [path for path in sources if path.parent.name != "_speedups"] == []
