"""The installed streamgate distribution's version, looked up once per process."""

from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def installed_version() -> str:
    """The installed streamgate distribution's version ("unknown" when run from a bare tree)."""
    try:
        return importlib.metadata.version("streamgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
