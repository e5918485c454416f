"""How an entry's fields are named and what their values say: shared by storage.codec and the entry
decoders (``storage._speedups``)."""

from __future__ import annotations

import orjson

from storage.models import ValueFormat

FORMATS = {fmt.value.encode(): fmt for fmt in ValueFormat}  # an f field's value -> its format
KEYED = b"K"  # a keyed record's value is stored under K + its key


def decode_headers(raw: bytes) -> dict[str, str]:
    """An entry's ``h`` field (an orjson map) as headers; anything but a map is none."""
    headers = orjson.loads(raw)
    if not isinstance(headers, dict):
        return {}
    return {str(k): str(v) for k, v in headers.items()}
