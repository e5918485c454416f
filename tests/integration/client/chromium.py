"""Debian's headless Chromium driven by Playwright for the browser tests: required in CI, one
profile per page, no browser process left behind, and the test page's files and scenarios."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from node_package import PACKAGE

if TYPE_CHECKING:
    from playwright.sync_api import Page


def require_browser(report_missing: Callable[[str], NoReturn]) -> str:
    """Debian's chromium (``make deps``) and Playwright (the dev extra): skip locally, fail in
    CI."""
    chromium = shutil.which("chromium")
    if chromium is None:
        report_missing("chromium is missing: `make deps` installs it")
    if importlib.util.find_spec("playwright") is None:
        report_missing("playwright is missing: pip install -e '.[dev]'")
    return chromium


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (a zombie's is empty: it is not counted)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass  # the process ended while we looked
    return found


def reap(profile: Path) -> list[int]:
    """Wait for every process of the browser that ``profile`` names to end; kill any that will
    not (they were ours). Returns those that had to be killed."""
    deadline = time.monotonic() + 10
    while (left := processes_mentioning(str(profile))) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


@contextmanager
def browser_page(chromium: str, profile: Path) -> Iterator[Page]:
    """A page of a headless Chromium with its own profile; the browser and Playwright's driver are
    stopped afterwards, and no browser process may outlive them."""
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=chromium, headless=True, args=["--no-sandbox"])
            try:
                yield context.pages[0] if context.pages else context.new_page()
            finally:
                context.close()
    finally:
        killed = reap(profile)
    assert killed == [], f"browser processes outlived the browser and were killed: {killed}"


PAGE_DIR = Path(__file__).with_name("browser")


def page_files() -> dict[str, Path]:
    """The page's files by URL path: its own from browser/, the Node tests' deadline helper, the
    built client's from dist/."""
    files = {f"/{path.name}": path for path in PAGE_DIR.iterdir()}
    files["/deadline.mjs"] = PACKAGE / "test" / "deadline.mjs"
    files |= {f"/dist/{path.name}": path for path in (PACKAGE / "dist").glob("*.js")}
    return files


# Chromium drops the requests in flight when the machine's network interfaces change (other tests
# create network namespaces and veth pairs): such a load is tried again.
NETWORK_CHANGED = "ERR_NETWORK_CHANGED"
LOADS = 3


def open_page(page: Any, url: str, log: list[str]) -> None:
    """Load the page until its modules are in (``window.ready``)."""
    for load in range(1, LOADS + 1):
        changed = sum(NETWORK_CHANGED in line for line in log)
        page.goto(url)
        try:
            page.wait_for_function("window.ready === true", timeout=20_000)
            return
        except Exception as error:
            dropped = sum(NETWORK_CHANGED in line for line in log) > changed
            if not dropped or load == LOADS:
                raise AssertionError("the page never became ready:\n" + "\n".join(log)) from error


def reload_when_the_network_changed(page: Page, problems: list[str]) -> None:
    """Make ``page.goto`` load again when Chromium dropped a file of the page because the machine's
    network interfaces changed (other tests make network namespaces): not the console's fault."""
    load = page.goto

    def goto(url: str, **options: Any) -> Any:
        for attempt in range(1, LOADS + 1):
            before = len(problems)
            response = load(url, **options)
            page.wait_for_load_state("load")
            dropped = [line for line in problems[before:] if NETWORK_CHANGED in line]
            if not dropped or attempt == LOADS:
                return response
            problems[before:] = [line for line in problems[before:] if line not in dropped]
        return None

    page.goto = goto  # type: ignore[method-assign]


def watch_page(page: Page, log: list[str]) -> None:
    """The page's console lines and uncaught errors into ``log``, for failure messages."""
    page.on("console", lambda message: log.append(f"console.{message.type}: {message.text}"))
    page.on("pageerror", lambda error: log.append(f"page error: {error}"))


def run_scenario(page: Page, log: list[str], name: str, *args: Any) -> Any:
    """``window.run(name, ...args)`` in the page (browser/page_runner.mjs): its result, or an
    AssertionError with the page's log."""
    try:
        return page.evaluate("([name, args]) => window.run(name, ...args)", [name, args])
    except Exception as error:
        raise AssertionError(f"{name} failed in the browser: {error}\n"
                             + "\n".join(log)) from error
