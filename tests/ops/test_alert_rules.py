"""The alert rules pass `promtool check rules` and their `promtool test rules` unit tests."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import NoReturn

import pytest
from grafana_queries import GRAFANA_DIR, RULES_FILE, alert_expressions

EXPECTED_ALERTS = {"StreamgateGroupLagGrowing", "StreamgateOldestUnackedTooOld",
                   "StreamgateDeadLettersGrowing", "StreamgateAcksAllFailures",
                   "StreamgatePartitionWithoutOwner", "StreamgateRedisMemoryHigh",
                   "StreamgateRedisMemoryFull", "StreamgateRedisMaxmemoryUnset",
                   "StreamgateArchiveBehind", "StreamgateArchiveFailing"}


@pytest.fixture
def promtool(report_missing: Callable[[str], NoReturn]) -> str:
    path = shutil.which("promtool")
    if path is None:
        report_missing("promtool is missing (Debian package prometheus; make deps installs it)")
    return path


def test_the_rules_file_defines_every_documented_alert() -> None:
    assert set(alert_expressions()) == EXPECTED_ALERTS


def test_promtool_accepts_the_rules_file(promtool: str) -> None:
    result = subprocess.run([promtool, "check", "rules", str(RULES_FILE)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout


def test_alert_rule_unit_tests_pass_under_promtool(promtool: str) -> None:
    result = subprocess.run([promtool, "test", "rules", "streamgate.rules.test.yml"],
                            cwd=GRAFANA_DIR / "alerts", capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
