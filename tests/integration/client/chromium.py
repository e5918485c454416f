"""Debian's headless Chromium driven by Playwright for the browser tests: required in CI, one
profile per page, and no browser process left behind."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

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
