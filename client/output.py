"""The CLI's output: one JSON document per line on stdout."""

from __future__ import annotations

import sys
from typing import Any

import orjson


def emit(document: Any) -> None:
    """Write one JSON line to stdout."""
    sys.stdout.write(orjson.dumps(document).decode() + "\n")
    sys.stdout.flush()
