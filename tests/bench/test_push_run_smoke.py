"""Smoke test of the bench's push rows: `bench/run.py --quick --only push` end to end.

It asserts the rows' shape and that every figure is a number, never the figures' size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
from test_run_smoke import quick_run, require_binaries


@pytest.mark.timeout(400)
def test_quick_push_run_writes_both_push_rows_beside_the_websocket_drain(
        tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_binaries(report_missing)
    _, rows, markdown = quick_run(tmp_path, "push", timeout_s=390)
    assert [row["figure"] for row in rows] == [
        "push delivery + ack to a local endpoint",
        "push delivery + ack to a local endpoint, key_ordered"]
    for row in rows:
        assert row["goal"] == "5", row
        assert row["anchor_name"] == "WebSocket group delivery, same run", row
        assert isinstance(row["value"], float), row
        assert row["value"] > 0, row
        assert row["anchor"] > 0, row
        assert row["ratio"] == pytest.approx(row["value"] / row["anchor"]), row
        assert row["status"] in {"pass", "FAIL"}, row
        assert "bench/push_receiver.py" in row["note"], row
        assert "5,000 received" in row["note"], row
    assert markdown.count("\n| 5 |") == 2
