"""`redis-cli --cluster` commands the launcher runs: create, add-node, check, rebalance.

Each run appends its output to a log file in the cluster's data dir; a failure raises DevStackError
carrying that output, so a broken resharding is diagnosable from the exception alone.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from streamgate_devstack.errors import DevStackError

CLI_TIMEOUT_S = 120.0


def run_cluster_command(
    cli: Sequence[str], args: Sequence[str], log: Path, *, check: bool = True
) -> int:
    """Run `redis-cli --cluster <args>` with output appended to `log`; return the exit code.

    `cli` is the redis-cli argv before `--cluster` (the binary, plus `--tls ...` flags for a TLS
    cluster). With `check`, a non-zero exit raises DevStackError with this run's output.
    """
    argv = [*cli, "--cluster", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        start = out.tell()
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            timeout=CLI_TIMEOUT_S, check=False,
        )  # fmt: skip
    if check and result.returncode != 0:
        output = log.read_bytes()[start:].decode(errors="replace")
        raise DevStackError(
            f"redis-cli --cluster {args[0]} failed ({result.returncode}):\n{output}"
        )
    return result.returncode


def add_primary(cli: Sequence[str], new: str, existing: str, log: Path) -> None:
    """Join the empty node `new` ("host:port") to the cluster `existing` belongs to, as a slotless
    primary."""
    run_cluster_command(cli, ["add-node", new, existing], log)


def is_consistent(cli: Sequence[str], existing: str, log: Path) -> bool:
    """True when `--cluster check` finds every node agreeing on the slot map and no open slots."""
    return run_cluster_command(cli, ["check", existing], log, check=False) == 0


def rebalance_onto_empty_primaries(cli: Sequence[str], existing: str, log: Path) -> None:
    """Move slots (keys with MIGRATE, so clients see ASK/MOVED) until primaries, empty ones too, are
    even."""
    run_cluster_command(
        cli, ["rebalance", existing, "--cluster-use-empty-masters", "--cluster-yes"], log
    )
