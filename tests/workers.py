"""How `make test TEST_WORKERS=3` spreads the suite over xdist workers: each worker runs whole
groups (a shared folder's, or one file's), and the longest groups go out first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

# Tests that must not run on two workers at once (group, folder, file pattern): the deployment
# tests build one image and share podman; the Spark tests each start JVMs that take both cores;
# the TypeScript tests rebuild client/typescript/dist, which the others read.
SHARED_GROUPS = (
    ("containers", Path("tests/integration/deploy"), "test_*.py"),
    ("spark", Path("tests/spark"), "test_*.py"),
    ("typescript", Path("tests/integration/client"), "test_typescript_*.py"),
)
# Sent out first, so that none of them is left running alone at the end of the run.
LONGEST_FIRST = (Path("tests/integration/deploy"), Path("tests/spark"), Path("tests/bench"))


def worker_group(relative: Path) -> str:
    """The group of the test file at ``relative`` (to the repository): a shared group's name, or
    the file's path."""
    for group, folder, pattern in SHARED_GROUPS:
        if relative.parent == folder and relative.match(pattern):
            return group
    return relative.as_posix()


def first_out(relative: Path) -> int:
    """0 for the files of the longest groups, 1 for the rest (kept in collection order by a stable
    sort)."""
    return 0 if any(relative.is_relative_to(folder) for folder in LONGEST_FIRST) else 1


def told_apart(nodeids: Sequence[str]) -> list[str]:
    """The node ids with repeats numbered: a scheduler keyed by node id would run a repeated one
    once (schemathesis gives every operation's case of one test the same id)."""
    seen: Counter[str] = Counter()
    unique = []
    for nodeid in nodeids:
        seen[nodeid] += 1
        unique.append(nodeid if seen[nodeid] == 1 else f"{nodeid} #{seen[nodeid]}")
    return unique


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with `worker_group` as the scope. xdist's own ``loadgroup`` renames
    node ids to carry the group, which current pytest no longer honours."""

    def _split_scope(self, nodeid: str) -> str:
        return worker_group(Path(nodeid.partition("::")[0]))

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        super().add_node_collection(node, told_apart(collection))
