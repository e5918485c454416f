"""A hook through which the storage layer reports each Redis call, without knowing who listens.

The gateway sets one that feeds its metrics; storage imports no metrics library.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CallObserver = Callable[[str, float, "str | None"], None]
"""Called once per attempt with (operation, seconds taken, error class name or None on success)."""


def ignore_call(operation: str, seconds: float, error: str | None) -> None:
    """The default observer: reports go nowhere."""


def report(observer: CallObserver, operation: str, started: float,
           error: BaseException | None) -> None:
    """Tell ``observer`` how an attempt that began at ``started`` (``time.perf_counter()``)
    ended."""
    observer(operation, time.perf_counter() - started,
             None if error is None else type(error).__name__)
