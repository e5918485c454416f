"""The one switch for storage's compiled parts: ``STREAMGATE_NO_EXTENSIONS=1`` keeps it on its
Python references.

Read once, at import (as aiohttp reads AIOHTTP_NO_EXTENSIONS): a compiled part is chosen before
settings exist.
"""

from __future__ import annotations

import os

OFF = os.environ.get("STREAMGATE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")


def refuse_if_off() -> None:
    """ImportError when the compiled parts are switched off; called just before importing one."""
    if OFF:
        raise ImportError("compiled parts switched off by STREAMGATE_NO_EXTENSIONS")
