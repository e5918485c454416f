"""How long the ``streamgate`` command takes to start, next to ``python -c "import aiohttp"`` in the
same run: best of N runs of each (client commands should start well under half a second).

    python bench/cli_start.py            # best of 5; --runs N, --markdown for the docs' table
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from table import Row, below, render_markdown, render_text

ANCHOR = "python -c 'import aiohttp'"
COMMANDS = (("streamgate --version", ["--version"]),
            ("streamgate topics --help", ["topics", "--help"]),
            ("streamgate produce --help", ["produce", "--help"]))
GOAL_S = 0.5


def best_of(argv: list[str], runs: int) -> float:
    """The shortest wall time of ``runs`` runs of ``argv`` (seconds); the others measure noise."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return min(times)


def script() -> str:
    """The installed ``streamgate`` console script beside this interpreter."""
    found = Path(sys.executable).with_name("streamgate")
    if not found.exists():
        raise SystemExit(f"no streamgate script at {found}: pip install -e ./client -e . first")
    return str(found)


def rows(runs: int) -> list[Row]:
    """One row per command, in ms, with the anchor measured in the same run."""
    anchor_s = best_of([sys.executable, "-c", "import aiohttp"], runs)
    measured = [Row(goal="cli start", figure=ANCHOR, value=anchor_s * 1000, unit="ms")]
    for name, argv in COMMANDS:
        row = Row(goal="cli start", figure=name, value=best_of([script(), *argv], runs) * 1000,
                  unit="ms", anchor=anchor_s * 1000, anchor_name=ANCHOR,
                  goal_text=f"< {GOAL_S * 1000:.0f} ms")
        measured.append(below(row, GOAL_S * 1000))
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    table = rows(args.runs)
    print(render_markdown(table) if args.markdown else render_text(table))
    return 0 if all(row.status != "FAIL" for row in table) else 1


if __name__ == "__main__":
    raise SystemExit(main())
