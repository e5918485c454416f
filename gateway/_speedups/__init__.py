"""Gateway's compiled parts or their Python references (``*_py``), chosen once at import under the
one switch ``STREAMGATE_NO_EXTENSIONS``, as aiohttp picks reader_c or reader_py: feature modules
import the chosen functions from here, never a compiled module."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from gateway._speedups.frames_py import SHORT_MAX, frame_header
from gateway._speedups.frames_py import text_frames as text_frames_python
from gateway._speedups.sketch_py import Sketch

__all__ = ["OFF", "SHORT_MAX", "Sketch", "SpaceSaving", "count_batch", "frame_header",
           "message_frames_or_none", "parse_plain", "plain_results_json", "refilled_or_declined",
           "renamed_or_none", "scan_plain_body", "text_frames_or_none", "text_frames_python"]

# Read at import, before settings exist; each package's _speedups reads it by the same rule
# (tests/unit/test_speedups.py keeps them in step) so that no package imports another's.
OFF = os.environ.get("STREAMGATE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")


def _declines(*_: object) -> None:
    """The compiled framing's stand-in: it frames nothing, the caller's reference frames it all."""
    return None


if TYPE_CHECKING or OFF:
    from gateway._speedups.plain_py import parse_plain, plain_results_json, scan_plain_body
    from gateway._speedups.sketch_py import SpaceSaving, count_batch
else:
    try:
        from gateway._speedups._plain import parse_plain, plain_results_json, scan_plain_body
    except ImportError:  # built without a C compiler: the references, same results
        from gateway._speedups.plain_py import parse_plain, plain_results_json, scan_plain_body
    try:
        from gateway._speedups._sketch import SpaceSaving, count_batch
    except ImportError:
        from gateway._speedups.sketch_py import SpaceSaving, count_batch

def _refills_nothing(*_: object) -> bool:
    """The compiled refill's stand-in: it changes no delivery, the caller's reference does."""
    return False


# The framing in C declines (None) whatever it is not sure of; the references
# (gateway.delivery.wire.message_frame, text_frames_python) then frame it.
if TYPE_CHECKING:
    from gateway._speedups._frames import message_frames as message_frames_or_none
    from gateway._speedups._frames import refill as refilled_or_declined
    from gateway._speedups._frames import text_frames as text_frames_or_none
else:
    message_frames_or_none = text_frames_or_none = _declines
    refilled_or_declined = _refills_nothing
    if not OFF:
        try:
            from gateway._speedups._frames import message_frames as message_frames_or_none
            from gateway._speedups._frames import refill as refilled_or_declined
            from gateway._speedups._frames import text_frames as text_frames_or_none
        except ImportError:
            pass

# The renames on bytes decline (None) every value they are not sure of, and every value without
# the extension; gateway.schemas.migrate.ValueStep then converts it the parsed way.
if TYPE_CHECKING:
    from gateway._speedups._rename import renamed as renamed_or_none
else:
    renamed_or_none = _declines
    if not OFF:
        with contextlib.suppress(ImportError):
            from gateway._speedups._rename import renamed as renamed_or_none
