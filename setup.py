"""Compiled parts of streamgate; everything else is in pyproject.toml.

``partitioner._murmur2`` is Kafka's partitioner hash in C; ``gateway._plain`` and ``storage._wire`` are the
plain publish's codec (request messages to columns, offsets to the response) and its RESP encoder;
``gateway._sketch`` counts keys in the hot-key sketches; ``storage._entries`` decodes read stream entries and
``gateway._frames`` frames them for group deliveries. Each is
optional to build: without a C compiler the package installs and uses the pure-Python references (same
results, slower); tests fail when a compiled one is missing (test_hashing.py, test_plain_codec.py,
test_plain_append_wire.py, test_hotspots.py, test_entry_decoding.py, test_wire_frames.py), so CI always has them.
``STREAMGATE_NO_EXTENSIONS=1`` leaves every compiled part out at import (each package's ``native.py``); CI runs
the unit tests once that way.
"""

from setuptools import Extension, setup

DECIMAL = "storage/_decimal.h"  # put_decimal, shared by the encoders
USES_DECIMAL = ("storage/_wire.c", "gateway/_plain.c", "gateway/_frames.c")

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O2"],
                             depends=[DECIMAL] if source in USES_DECIMAL else [])
                   for name, source in [("partitioner._murmur2", "partitioner/_murmur2.c"),
                                        ("gateway._plain", "gateway/_plain.c"),
                                        ("gateway._sketch", "gateway/_sketch.c"),
                                        ("gateway._frames", "gateway/_frames.c"),
                                        ("storage._wire", "storage/_wire.c"),
                                        ("storage._entries", "storage/_entries.c")]])
