"""The console's topic operations in Debian's headless Chromium against a gateway process on the
real cluster: grow, purge and delete a topic, purge and redrive its dead letters, each after its
dry run; key history, a compacted partition's snapshot, and search within a partition."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from test_console_browser import (
    TIMINGS,
    WAIT_MS,
    call,
    console_page,
    dead_letter,
    expect_heading,
    timed,
)

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

__all__ = ["console_page"]  # the fixture this module's tests use

FILLER = 10_050


def publish(base: str, topic: str, messages: list[dict[str, Any]]) -> None:
    status, answer = call(base, "POST", f"/v1/topics/{topic}/messages",
                          {"acks": "all", "messages": messages})
    assert status == 200, answer


def dialog(page: Page, title: str) -> Locator:
    from playwright.sync_api import expect
    found = page.get_by_role("dialog", name=title)
    expect(found).to_be_visible(timeout=WAIT_MS)
    return found


def group_row(panel: Locator, group: str) -> list[str]:
    """The cells of a group's row in the panel's table of losses."""
    row = panel.get_by_role("table", name="What each group would lose").get_by_role(
        "row").filter(has=panel.page.get_by_role("rowheader", name=group, exact=True))
    return [cell.inner_text() for cell in row.get_by_role("cell").all()]


def partition_row(panel: Locator, partition: int) -> list[str]:
    """The cells of a dead-letter partition's row in the panel's table of a redrive."""
    row = panel.get_by_role("table", name="What each partition would send back").get_by_role(
        "row").filter(has=panel.page.get_by_role("rowheader", name=str(partition), exact=True))
    return [cell.inner_text() for cell in row.get_by_role("cell").all()]


@contextmanager
def new_topic(base: str, prefix: str, **fields: Any) -> Iterator[str]:
    """A topic made for one test (its name), deleted afterwards with its dead letters; the
    scenarios' timings are printed then."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert call(base, "POST", "/v1/topics", {"name": topic, **fields})[0] == 201
    try:
        yield topic
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}.dlq")
        call(base, "DELETE", f"/v1/topics/{topic}")
        print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))


@pytest.mark.timeout(420)
def test_a_topic_grows_is_purged_and_deleted_each_after_its_dry_run(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    base, page = served_gateway, console_page
    with new_topic(base, "ops", partitions=2) as topic:
        publish(base, topic, [{"key": f"k{n}", "value": n} for n in range(12)])
        pulled = call(base, "POST", "/v1/groups/readers/pull",
                      {"topic": topic, "max_messages": 5})[1]["messages"]
        assert pulled
        page.goto(f"{base}/console/#/topics/{topic}")
        expect_heading(page, f"Topic {topic}")

        with timed("grow a topic: its dry run, then the growth"):
            page.get_by_label("New partition count").fill("4")
            page.get_by_role("button", name="Preview growth").click()
            panel = dialog(page, f"Grow {topic} to 4 partitions?")
            expect(panel).to_contain_text("Adds partitions 2, 3 (from 2 to 4)")
            expect(panel).to_contain_text("50% of the key space keeps its partition")
            expect(panel.get_by_role("table")).to_contain_text("readers")
            assert call(base, "GET", f"/v1/topics/{topic}")[1]["partitions"] == 2
            panel.get_by_role("button", name="Grow topic").click()
            expect(page.get_by_text(f"Grew {topic} to 4 partitions.")).to_be_visible(
                timeout=WAIT_MS)
            expect(page.get_by_text(re.compile(r"^4 partitions"))).to_be_visible(timeout=WAIT_MS)
            assert call(base, "GET", f"/v1/topics/{topic}")[1]["partitions"] == 4

        with timed("purge a topic: the dry run's numbers, then the purge"):
            page.get_by_role("button", name="Preview purge").click()
            panel = dialog(page, f"Purge {topic}?")
            status, preview = call(base, "POST", f"/v1/topics/{topic}/purge?dry_run=true", {})
            assert status == 200, preview
            expect(panel).to_contain_text(f"{preview['purged']} messages and 0 scheduled")
            readers = next(g for g in preview["groups"] if g["group"] == "readers")
            unread = readers["unread_dropped"]
            assert group_row(panel, "readers") == [
                str(readers["pending_dropped"]), "unknown" if unread is None else str(unread),
                str(readers["parked_keys"])]
            assert readers["pending_dropped"] == len(pulled)
            panel.get_by_role("button", name="Purge messages").click()
            expect(page.get_by_text(f"Purged {preview['purged']} messages")).to_be_visible(
                timeout=WAIT_MS)
            lengths = [p["length"] for p in call(base, "GET", f"/v1/topics/{topic}")[1][
                "partition_details"]]
            assert lengths == [0, 0, 0, 0]

        with timed("delete a topic: its dry run, the name typed, then gone"):
            publish(base, topic, [{"key": "after", "value": "kept until deleted"}])
            page.get_by_role("button", name="Preview deletion").click()
            panel = dialog(page, f"Delete topic {topic}?")
            expect(panel).to_contain_text("1 message and 0 scheduled ones would go.")
            confirm = panel.get_by_role("button", name="Delete topic")
            expect(confirm).to_be_disabled()
            expect(panel.get_by_label(f"Type {topic} to confirm")).to_be_focused()
            page.keyboard.type(topic[:-1])
            expect(confirm).to_be_disabled()
            page.keyboard.type(topic[-1])
            confirm.click()
            expect_heading(page, "Topics")
            assert call(base, "GET", f"/v1/topics/{topic}")[0] == 404
            expect(page.get_by_text("Loading…")).to_have_count(0, timeout=WAIT_MS)
            expect(page.get_by_role("link", name=topic, exact=True)).to_have_count(0)


@contextmanager
def dead_letter_panel(base: str, page: Page, operation: str,
                      button: str) -> Iterator[tuple[str, Locator, dict[str, Any]]]:
    """A topic with two dead letters, then ``button`` on its dead-letter page: the topic, the
    confirmation panel it opens and the dry run of ``operation`` (purge, redrive) fetched beside
    it; timed, the topic deleted afterwards."""
    from playwright.sync_api import expect
    with new_topic(base, f"dlq-{operation}", partitions=2) as topic, timed(
            f"{operation} dead letters after the dry run"):
        dead_letter(base, topic, "poison-1")
        dead_letter(base, topic, "poison-2")
        page.goto(f"{base}/console/#/topics/{topic}/dead-letters")
        expect(page.get_by_role("table", name="2 dead letters")).to_be_visible(timeout=WAIT_MS)
        page.get_by_role("button", name=button).click()
        panel = page.get_by_role("dialog")
        expect(panel.get_by_role("button", name="Cancel")).to_be_focused(timeout=WAIT_MS)
        status, preview = call(base, "POST", f"/v1/topics/{topic}/dlq/{operation}?dry_run=true",
                               {})
        assert status == 200, preview
        yield topic, panel, preview


def dead_letters_left(base: str, topic: str) -> int:
    return sum(p["length"] for p in call(base, "GET", f"/v1/topics/{topic}.dlq")[1][
        "partition_details"])


def confirm_until_none_left(base: str, topic: str, confirm: Locator, done: str) -> None:
    """Confirm a panel's operation on every dead letter: its outcome shown, none left."""
    from playwright.sync_api import expect
    confirm.click()
    expect(confirm.page.get_by_text(done)).to_be_visible(timeout=WAIT_MS)
    expect(confirm.page.get_by_text("No dead letters.")).to_be_visible(timeout=WAIT_MS)
    assert dead_letters_left(base, topic) == 0


@pytest.mark.timeout(300)
def test_dead_letters_are_purged_after_their_dry_run(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    with dead_letter_panel(served_gateway, console_page, "purge",
                           "Purge dead letters") as (topic, panel, preview):
        expect(panel.get_by_role("heading")).to_have_text(f"Purge every dead letter of {topic}?")
        assert preview["purged"] == 2
        expect(panel).to_contain_text("2 messages and 0 scheduled ones would go.")
        confirm_until_none_left(served_gateway, topic, panel.get_by_role(
            "button", name="Purge dead letters"), f"Purged 2 dead letters of {topic}.")


@pytest.mark.timeout(300)
def test_dead_letters_are_redriven_after_their_dry_run(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    with dead_letter_panel(served_gateway, console_page, "redrive",
                           "Redrive all") as (topic, panel, preview):
        expect(panel.get_by_role("heading")).to_have_text(
            f"Send every dead letter of {topic} back to it?")
        assert preview["redriven"] == 2
        expect(panel).to_contain_text(f"2 of 2 dead letters would go back to {topic}")
        for part in preview["partitions"]:
            assert partition_row(panel, part["partition"]) == [str(part["waiting"]),
                                                               str(part["redriven"])]
        assert dead_letters_left(served_gateway, topic) == 2  # the preview moved nothing
        confirm_until_none_left(served_gateway, topic, panel.get_by_role(
            "button", name="Confirm redrive"), f"Redrove 2 dead letters to {topic}.")


@pytest.mark.timeout(300)
def test_key_history_and_a_compacted_partitions_snapshot(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    base, page = served_gateway, console_page
    with new_topic(base, "ledger", partitions=1, compact=True) as topic:
        publish(base, topic, [{"key": "alice", "value": {"balance": 1}},
                              {"key": "bob", "value": {"balance": 7}},
                              {"key": "alice", "value": {"balance": 2}},
                              {"key": "carol", "value": {"balance": 3}}])
        page.goto(f"{base}/console/#/topics/{topic}")
        expect_heading(page, f"Topic {topic}")

        with timed("a key's history, newest first"):
            page.get_by_label("History of key").fill("alice")
            page.get_by_label("Order", exact=True).select_option("desc")
            page.get_by_role("button", name="Read history").click()
            history = page.get_by_role("table", name="History of key alice")
            expect(history.locator("tbody tr")).to_have_count(2, timeout=WAIT_MS)
            values = [row.inner_text() for row in history.locator("tbody tr").all()]
            assert '"balance":2' in values[0], values
            assert '"balance":1' in values[1], values
            expect(page.get_by_text("2 messages of key alice in partition 0.")).to_be_visible()

        with timed("a compacted partition's snapshot"):
            page.get_by_role("button", name="Read snapshot").click()
            snapshot = page.get_by_role("table", name=re.compile(
                r"^Snapshot of partition 0 as of \d+-\d+$"))
            rows = snapshot.locator("tbody tr")
            expect(rows).to_have_count(3, timeout=WAIT_MS)
            keys = [row.locator("td").nth(1).inner_text() for row in rows.all()]
            assert keys == ["alice", "bob", "carol"]
            expect(snapshot).to_contain_text('{"balance":2}')
            expect(snapshot).not_to_contain_text('{"balance":1}')
            expect(page.get_by_text(re.compile(r"3 keys of partition 0 as of .*the last page")))\
                .to_be_visible()


@pytest.mark.timeout(300)
def test_search_finds_a_message_by_key_and_by_text_in_bounded_scans(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    base, page = served_gateway, console_page
    with new_topic(base, "search", partitions=1) as topic:
        for start in range(0, FILLER, 1000):
            publish(base, topic, [{"key": f"filler-{n}", "value": {"n": n}}
                                  for n in range(start, min(start + 1000, FILLER))])
        publish(base, topic, [{"key": "needle", "value": "a Haystack of words"}])
        page.goto(f"{base}/console/#/topics/{topic}")
        expect_heading(page, f"Topic {topic}")
        status = page.locator("#search ~ form [role=status]")

        with timed("search by key: one bounded scan, then continue"):
            page.get_by_label("Search by").select_option("key")
            page.get_by_label("Search for").fill("needle")
            page.get_by_role("button", name="Search", exact=True).click()
            expect(status).to_have_text("Scanned 10,000 messages, found 0.", timeout=WAIT_MS)
            page.get_by_role("button", name="Continue scanning").click()
            expect(status).to_have_text(
                f"Scanned {FILLER + 1:,} messages, found 1: the end of the partition.",
                timeout=WAIT_MS)
            expect(page.get_by_role("button", name="Continue scanning")).to_be_disabled()
            found = page.get_by_role("table", name="Messages found in partition 0")
            expect(found.locator("tbody tr")).to_have_count(1)
            expect(found).to_contain_text("a Haystack of words")

        with timed("search by text in the value, any case"):
            page.get_by_label("Search by").select_option("text")
            page.get_by_label("Search for").fill("haystack OF")
            page.get_by_role("button", name="Search", exact=True).click()
            page.get_by_role("button", name="Continue scanning").click()
            expect(status).to_contain_text("found 1: the end", timeout=WAIT_MS)
            expect(found).to_contain_text("needle")
