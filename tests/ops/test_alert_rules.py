"""The alert rules pass `promtool check rules` and their `promtool test rules` unit tests, which
see every alert fire; each alert links to its section of docs/runbooks.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from typing import NoReturn

import pytest
import yaml
from grafana_queries import GRAFANA_DIR, ROOT, RULES_FILE, alert_expressions, alert_rules

EXPECTED_ALERTS = {"StreamgateGroupLagGrowing", "StreamgateOldestUnackedTooOld",
                   "StreamgateDeadLettersGrowing", "StreamgateAcksAllFailures",
                   "StreamgatePartitionWithoutOwner", "StreamgateRedisMemoryHigh",
                   "StreamgateRedisMemoryFull", "StreamgateRedisMaxmemoryUnset",
                   "StreamgateArchiveBehind", "StreamgateArchiveFailing",
                   "StreamgateGatewayDown", "StreamgateAllGatewaysDown",
                   "StreamgateGatewayNotReady", "StreamgateHttpErrorsHigh",
                   "StreamgatePublishLatencyHigh", "StreamgateRedisErrors", "StreamgateEtcdErrors",
                   "StreamgateSlowClientCloses", "StreamgateGroupStalled"}
RUNBOOKS = ROOT / "docs" / "runbooks.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"
RUNBOOK_URL = "https://github.com/streamgate/streamgate/blob/main/docs/runbooks.md#"
TESTS_FILE = GRAFANA_DIR / "alerts" / "streamgate.rules.test.yml"


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Anchor -> heading of every second-level section of docs/runbooks.md."""
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {heading_anchor(heading): heading for heading in headings}


def alerts_seen_firing() -> set[str]:
    """The alerts some promtool unit test expects to fire."""
    tests = yaml.safe_load(TESTS_FILE.read_text())["tests"]
    return {case["alertname"] for test in tests for case in test["alert_rule_test"]
            if case["exp_alerts"]}


@pytest.fixture
def promtool(report_missing: Callable[[str], NoReturn]) -> str:
    path = shutil.which("promtool")
    if path is None:
        report_missing("promtool is missing (Debian package prometheus; make deps installs it)")
    return path


def test_the_rules_file_defines_every_documented_alert() -> None:
    assert set(alert_expressions()) == EXPECTED_ALERTS


def test_the_metrics_doc_lists_every_alert() -> None:
    alerts_table = METRICS_DOC.read_text().split("\n## Alerts\n", 1)[1]
    assert set(re.findall(r"^\| `(Streamgate\w+)` \|", alerts_table, flags=re.MULTILINE)) \
        == EXPECTED_ALERTS


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


def test_every_alert_is_seen_firing_by_a_promtool_unit_test() -> None:
    assert alerts_seen_firing() == EXPECTED_ALERTS


def test_every_alert_links_to_its_own_runbook_section() -> None:
    sections = runbook_sections()
    for name, rule in alert_rules().items():
        url = rule["annotations"]["runbook_url"]
        assert url == RUNBOOK_URL + heading_anchor(name), name
        assert sections.get(heading_anchor(name)) == name, f"docs/runbooks.md lacks ## {name}"


def test_runbook_sections_named_like_alerts_are_alerts() -> None:
    named = {heading for heading in runbook_sections().values() if heading.startswith("Streamgate")}
    assert named == EXPECTED_ALERTS


@pytest.mark.parametrize(("heading", "anchor"), [
    ("StreamgateGroupStalled", "streamgategroupstalled"),
    ("Before you start", "before-you-start"),
    ("acks=all, and 5xx!", "acksall-and-5xx"),
])
def test_heading_anchor_follows_github(heading: str, anchor: str) -> None:
    assert heading_anchor(heading) == anchor
