"""Compiled parts of streamgate; everything else is in pyproject.toml.

Each package keeps its C behind one boundary, ``<package>/_speedups/``: the sources, their stubs and
the selector (``__init__.py``) that picks each compiled part or its Python reference (``*_py.py``)
under the one ``STREAMGATE_NO_EXTENSIONS`` switch. ``partitioner._speedups._murmur2`` is Kafka's
partitioner hash; ``gateway._speedups._plain`` and ``storage._speedups._wire`` are the plain
publish's codec (request messages to columns, offsets to the response) and its RESP encoder;
``gateway._speedups._sketch`` counts keys in the hot-key sketches; ``storage._speedups._entries``
decodes read stream entries (and archived ones from Arrow columns) and ``gateway._speedups._frames``
frames them for group deliveries, ``gateway._speedups._rename`` renames top-level members of
converted values on their bytes; ``storage._speedups._pages`` turns XRANGE pages into Arrow buffers
(the archive's moves, the Spark source). Each is optional to build: without a C compiler the package
installs and uses the pure-Python references (same results, slower); a compiled part's own tests
fail under CI=true when it is missing, so CI always has them, and CI runs the unit tests once more
with the switch on.
"""

from setuptools import Extension, setup

# put_decimal: every package keeps the same _decimal.h beside its own C (test_speedups.py)
HEADERS = {"storage/_speedups/_wire.c": ["storage/_speedups/_decimal.h"],
           "gateway/_speedups/_plain.c": ["gateway/_speedups/_decimal.h"],
           "gateway/_speedups/_frames.c": ["gateway/_speedups/_decimal.h"]}

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O2"],
                             depends=HEADERS.get(source, []))
                   for name, source in [
                       ("partitioner._speedups._murmur2", "partitioner/_speedups/_murmur2.c"),
                       ("gateway._speedups._plain", "gateway/_speedups/_plain.c"),
                       ("gateway._speedups._sketch", "gateway/_speedups/_sketch.c"),
                       ("gateway._speedups._frames", "gateway/_speedups/_frames.c"),
                       ("gateway._speedups._rename", "gateway/_speedups/_rename.c"),
                       ("storage._speedups._wire", "storage/_speedups/_wire.c"),
                       ("storage._speedups._entries", "storage/_speedups/_entries.c"),
                       ("storage._speedups._pages", "storage/_speedups/_pages.c")]])
