"""Compiled parts of streamgate; everything else is in pyproject.toml.

``partitioner._murmur2`` is Kafka's partitioner hash in C; ``gateway.publish._plain`` and
``storage._wire`` are the plain publish's codec (request messages to columns, offsets to the
response) and its RESP encoder; ``gateway.observe._sketch`` counts keys in the hot-key sketches;
``storage._entries`` decodes read stream entries and ``gateway.delivery._frames`` frames them for
group deliveries; ``pipeline._pages`` turns the Spark source's XRANGE pages into Arrow buffers.
Each is optional to build: without a C compiler the package installs and uses the pure-Python
references (same results, slower); tests fail when a compiled one is missing (test_hashing.py,
test_plain_codec.py, test_plain_append_wire.py, test_hotspots.py, test_entry_decoding.py,
test_wire_frames.py, test_page_columns.py), so CI always has them. ``STREAMGATE_NO_EXTENSIONS=1``
leaves every compiled part out at import (each package's ``native.py``); CI runs the unit tests once
that way.
"""

from setuptools import Extension, setup

HEADERS = {"storage/_wire.c": ["storage/_decimal.h"],  # put_decimal: each package has its own
           "gateway/publish/_plain.c": ["gateway/_decimal.h"],
           "gateway/delivery/_frames.c": ["gateway/_decimal.h"]}

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O2"],
                             depends=HEADERS.get(source, []))
                   for name, source in [("partitioner._murmur2", "partitioner/_murmur2.c"),
                                        ("gateway.publish._plain", "gateway/publish/_plain.c"),
                                        ("gateway.observe._sketch", "gateway/observe/_sketch.c"),
                                        ("gateway.delivery._frames", "gateway/delivery/_frames.c"),
                                        ("storage._wire", "storage/_wire.c"),
                                        ("storage._entries", "storage/_entries.c"),
                                        ("pipeline._pages", "pipeline/_pages.c")]])
