"""The console's view of a topic's schema in Debian's headless Chromium against a gateway process:
the versions (mode, fingerprint, when, by whom, each schema), a version registered meanwhile
appearing, the publish form checked as the user types, and a publish the schema refuses told
plainly."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_console_browser import WAIT_MS, artifacts, call, console_page, expect_heading, timed
from test_console_quotas import publish_in_form

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["artifacts", "console_page"]  # fixtures this module's tests use
pytestmark = pytest.mark.integration
ORDER: dict[str, Any] = {"type": "object", "properties": {"id": {"type": "string"},
                                                          "total": {"type": "integer"}},
                         "required": ["id", "total"]}


def register(base: str, topic: str, schema: dict[str, Any], compatibility: str) -> str:
    """Register ``schema``: its fingerprint."""
    status, answer = call(base, "POST", f"/v1/topics/{topic}/schemas",
                          {"schema": schema, "compatibility": compatibility})
    assert status == 201, answer
    return str(answer["fingerprint"])


@pytest.mark.timeout(300)
def test_the_topic_page_shows_schema_versions_checks_the_form_and_a_refused_publish_plainly(
        served_gateway: str, console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, page = served_gateway, console_page
    topic = f"schemas-{uuid.uuid4().hex[:8]}"
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1})[0] == 201
    try:
        with timed("schemas: a topic without one, then its first version"):
            page.goto(f"{base}/console/#/topics/{topic}")
            expect_heading(page, f"Topic {topic}")
            expect(page.get_by_text("No schema: the topic accepts any JSON value.")).to_be_visible(
                timeout=WAIT_MS)
            first = register(base, topic, ORDER, "backward")
            versions = page.get_by_role("table", name=f"Schema versions of {topic}")
            expect(versions.get_by_role("row")).to_have_count(2, timeout=WAIT_MS)
        with timed("schemas: a second version appears, the latest one's schema shown"):
            widened = ORDER | {"required": ["id"]}
            register(base, topic, widened, "backward_transitive")
            expect(versions.get_by_role("row")).to_have_count(3, timeout=WAIT_MS)
            row = versions.get_by_role("row").filter(
                has=page.get_by_role("rowheader", name="1", exact=True))
            cells = row.get_by_role("cell")
            expect(cells.nth(0)).to_have_text("backward")
            expect(cells.nth(1)).to_have_text(first[:12])
            expect(cells.nth(3)).to_have_text("anonymous")
            expect(versions.get_by_role("row").filter(
                has=page.get_by_role("rowheader", name="2", exact=True)).get_by_role("cell").nth(
                0)).to_have_text("backward transitive")
            expect(page.get_by_text("Publishes must match version 2, the latest")).to_be_visible()
            latest = page.get_by_label("Schema version 2", exact=True)
            expect(latest).to_be_visible()
            expect(latest).to_contain_text('"required": [\n    "id"\n  ]')
            expect(page.get_by_label("Schema version 1", exact=True)).to_be_hidden()
            page.get_by_text("Schema version 1", exact=True).click()
            expect(page.get_by_label("Schema version 1", exact=True)).to_contain_text('"total"')
        with timed("schemas: the form checked as the user types, before Publish"):
            check = page.get_by_label("Schema check", exact=True)
            page.get_by_label("Value", exact=True).fill('{"id": "a", "total": "ten"}')
            expect(check).to_contain_text(
                "Message 1 does not match the topic's schema version 2, at /total:",
                timeout=WAIT_MS)
            expect(check).to_contain_text("is not of type")
            expect(page.get_by_role("button", name="Publish", exact=True)).to_be_enabled()
            page.get_by_label("Value", exact=True).fill('{"id": "a", "total": 10}')
            expect(check).to_have_text("Valid against schema version 2.", timeout=WAIT_MS)
            assert call(base, "GET", f"/v1/topics/{topic}/partitions/0/messages")[1][
                "messages"] == []
        with timed("schemas: a publish that does not match, refused plainly"):
            status = page.locator("#publish ~ form [role=status]")
            publish_in_form(page, '{"id": "a", "total": "ten"}')
            expect(status).to_contain_text(
                "Message 1 does not match the topic's schema version 2, at /total:",
                timeout=WAIT_MS)
            expect(status).to_contain_text("is not of type")
            expect(status).to_contain_text("Nothing was written.")
            page.screenshot(path=artifacts / "schema-refused.png", full_page=True)
            publish_in_form(page, '{"id": "a", "total": 10}')
            expect(status).to_contain_text("Published to partition 0", timeout=WAIT_MS)
            assert call(base, "GET", f"/v1/topics/{topic}/partitions/0/messages")[1][
                "messages"][0]["value"] == {"id": "a", "total": 10}
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")
