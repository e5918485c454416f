"""The console's quotas page in Debian's headless Chromium against a gateway process whose
principal may retain a capped number of bytes: its subject, its use rising after a publish, and a
publish past the cap refused in plain words."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from served import serve_gateway
from test_console_browser import WAIT_MS, artifacts, call, console_page, expect_heading, timed

from gateway.auth.keys import hash_api_key

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["artifacts", "console_page"]  # fixtures this module's tests use
pytestmark = pytest.mark.integration
CAP = 4096
VALUE = "x" * 1500  # two such messages fit under the cap, a third does not
# a principal of this run alone, so that no other test's bytes count against it
PRINCIPAL = f"ops-{uuid.uuid4().hex[:8]}"
SUBJECT = f"principal:{PRINCIPAL}"


@pytest.fixture
def capped_gateway(redis_cluster: Any, etcd_server: Any, tmp_path: Path
                   ) -> Iterator[tuple[str, str]]:
    """A gateway requiring credentials whose principal PRINCIPAL may retain CAP bytes: the URL and
    its key."""
    key = f"ops-{uuid.uuid4().hex}"
    config = tmp_path / "auth.toml"
    config.write_text(f'''
[[api_keys]]
principal = "{PRINCIPAL}"
sha256 = "{hash_api_key(key)}"

[[rules]]
principals = ["{PRINCIPAL}"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[quotas]]
principals = ["{PRINCIPAL}"]
retained_bytes = {CAP}
''')
    for url in serve_gateway(redis_cluster, etcd_server, {
            "STREAMGATE_AUTH_MODE": "required", "STREAMGATE_AUTH_CONFIG_PATH": str(config),
            "STREAMGATE_QUOTA_SYNC_INTERVAL_S": "0.1"}):
        yield url, key


def retained_used(base: str, key: str) -> int:
    status, answer = call(base, "GET", "/v1/quotas", api_key=key)
    assert status == 200, answer
    return int(answer["quotas"]["retained_bytes"]["used"] or 0)


def retained_reaching(base: str, key: str, at_least: int) -> int:
    """The retained use once the shared ledger has counted a publish, which takes up to a round."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while (used := retained_used(base, key)) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    return used


def publish_in_form(page: Page, value: str) -> None:
    page.locator("#publish ~ form [role=status]").evaluate("e => e.textContent = ''")
    page.get_by_label("Value", exact=True).fill(value)
    page.get_by_role("button", name="Publish", exact=True).click()


@pytest.mark.timeout(300)
def test_the_quotas_page_shows_the_subject_and_its_use_rising_after_a_publish(
        capped_gateway: tuple[str, str], console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    (base, key), page = capped_gateway, console_page
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1}, api_key=key)[0] == 201
    try:
        with timed("quotas: the subject, no use yet"):
            page.goto(f"{base}/console/")
            expect_heading(page, "Sign in")
            page.get_by_label("Credential", exact=True).fill(key)
            page.get_by_role("button", name="Sign in").click()
            expect_heading(page, "Topics")
            page.get_by_role("link", name="Quotas", exact=True).click()
            expect_heading(page, "Quotas")
            expect(page.get_by_text(f"Your use counts against {SUBJECT}.")).to_be_visible(
                timeout=WAIT_MS)
            quotas = page.get_by_role("table", name=f"Quotas of {SUBJECT}")
            retained = quotas.get_by_role("row").filter(has_text="Retained bytes")
            expect(retained.get_by_role("cell")).to_have_text(["0 B", "4.0 KiB", "0%"],
                                                              timeout=WAIT_MS)
            expect(quotas.get_by_role("row").filter(has_text="Messages in flight")
                   .get_by_role("cell")).to_have_text(["not counted", "no cap", "-"])
        with timed("quotas: a publish from the topic page, then the use risen"):
            page.goto(f"{base}/console/#/topics/{topic}")
            expect_heading(page, f"Topic {topic}")
            publish_in_form(page, VALUE)
            expect(page.locator("#publish ~ form [role=status]")).to_contain_text(
                "Published to partition", timeout=WAIT_MS)
            used = retained_reaching(base, key, len(VALUE))
            assert used >= len(VALUE)
            page.get_by_role("link", name="Quotas", exact=True).click()
            expect_heading(page, "Quotas")
            retained = page.get_by_role("table", name=f"Quotas of {SUBJECT}").get_by_role(
                "row").filter(has_text="Retained bytes")
            expect(retained.get_by_role("cell").nth(2)).to_have_text(
                f"{round(used * 100 / CAP)}%", timeout=WAIT_MS)
            expect(retained.get_by_role("meter")).to_have_attribute("value", str(used))
            page.screenshot(path=artifacts / "quotas.png", full_page=True)
        with timed("quotas: a publish past the cap refused plainly"):
            page.goto(f"{base}/console/#/topics/{topic}")
            expect_heading(page, f"Topic {topic}")
            status = page.locator("#publish ~ form [role=status]")
            publish_in_form(page, VALUE)
            expect(status).to_contain_text("Published to partition", timeout=WAIT_MS)
            publish_in_form(page, VALUE)
            expect(status).to_contain_text("Your retained-bytes quota is full", timeout=WAIT_MS)
            expect(status).to_contain_text("Try again in")
            page.screenshot(path=artifacts / "quota-refused.png", full_page=True)
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}", api_key=key)
