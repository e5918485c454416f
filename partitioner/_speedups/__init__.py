"""Partitioner's compiled part or its Python reference (``murmur2_py``), chosen once at import under
the one switch ``STREAMGATE_NO_EXTENSIONS``, as aiohttp picks reader_c or reader_py: feature modules
import the chosen functions from here, never the compiled module."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = ["OFF", "murmur2", "partition_for", "partitions_of"]

# Read at import, before settings exist; each package's _speedups reads it by the same rule
# (tests/unit/test_speedups.py keeps them in step) so that no package imports another's.
OFF = os.environ.get("STREAMGATE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")

if TYPE_CHECKING or OFF:
    from partitioner._speedups.murmur2_py import murmur2, partition_for, partitions_of
else:
    try:
        from partitioner._speedups._murmur2 import murmur2, partitions_of
        from partitioner._speedups._murmur2 import partition_of as partition_for
    except ImportError:  # built without a C compiler: the reference, same results
        from partitioner._speedups.murmur2_py import murmur2, partition_for, partitions_of
