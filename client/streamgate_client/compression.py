"""Compressing publish bodies (``Content-Encoding: gzip`` or ``zstd``) for the producer."""

from __future__ import annotations

import sys
import zlib
from typing import Literal

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the standard library's zstd module (PEP 784), backported
    from backports import zstd

Compression = Literal["gzip", "zstd"]
GZIP_LEVEL = 6  # zlib's default: most of level 9's ratio at a fraction of its CPU
ZSTD_LEVEL = 3  # zstd's default


def compress_body(body: bytes, coding: Compression) -> bytes:
    """``body`` encoded with ``coding`` (a gzip member or one zstd frame)."""
    if coding == "gzip":
        encoder = zlib.compressobj(GZIP_LEVEL, wbits=zlib.MAX_WBITS | 16)
        return encoder.compress(body) + encoder.flush()
    if coding == "zstd":
        return zstd.compress(body, level=ZSTD_LEVEL)
    raise ValueError(f"compression must be 'gzip' or 'zstd', not {coding!r}")
