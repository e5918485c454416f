"""Compiled parts of streamgate; everything else is in pyproject.toml.

``partitioner._murmur2`` is Kafka's partitioner hash in C. It is optional to build: without a C compiler the
package installs and places keys with the pure-Python reference (same results, ~20x slower per key);
tests/unit/partitioner/test_hashing.py fails when the compiled one is missing, so CI always has it.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("partitioner._murmur2", ["partitioner/_murmur2.c"], optional=True,
                             extra_compile_args=["-O2"])])
