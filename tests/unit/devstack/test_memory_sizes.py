"""Sizes for `streamgate dev --redis-maxmemory`, read the way redis.conf reads them, and the cap
every node of the local cluster starts with."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamgate_devstack.memory import (
    MIN_NODE_MAXMEMORY,
    default_node_maxmemory,
    format_size,
    parse_size,
)
from streamgate_devstack.redis_cluster import RedisClusterConfig


@pytest.mark.parametrize(("text", "size"), [
    ("512mb", 512 * 1024**2), ("2GB", 2 * 1024**3), ("64m", 64 * 1000**2),
    ("9000000", 9_000_000), (" 1gb ", 1024**3)])
def test_sizes_read_as_redis_reads_them(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "1.5gb", "-1mb", "12tb", "1mb"])
def test_what_is_not_a_usable_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        parse_size(text)


def test_the_default_shares_half_the_machine_between_the_nodes() -> None:
    six, twelve = default_node_maxmemory(6), default_node_maxmemory(12)
    assert six >= MIN_NODE_MAXMEMORY
    assert abs(six - 2 * twelve) <= 1 or twelve == MIN_NODE_MAXMEMORY


def test_every_node_starts_capped_with_noeviction(tmp_path: Path) -> None:
    config = RedisClusterConfig(data_dir=tmp_path, maxmemory_bytes=64 * 1024**2)
    assert config.memory_argv() == ["--maxmemory", str(64 * 1024**2),
                                    "--maxmemory-policy", "noeviction"]
    assert RedisClusterConfig(data_dir=tmp_path).memory_argv() == []


def test_sizes_print_in_binary_units() -> None:
    assert format_size(64 * 1024**2) == "64.0 MiB"
    assert format_size(3 * 1024**3 // 2) == "1.5 GiB"
