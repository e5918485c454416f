"""The loopback port picker: free ports below the ephemeral range, one slice per xdist worker."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from streamgate_devstack import ports


@pytest.fixture(autouse=True)
def fresh_picker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_handed_out", set())
    monkeypatch.setattr(ports, "_cursor", [])


def test_picked_ports_are_distinct_bindable_and_below_ephemeral() -> None:
    picked = ports.free_ports(40)
    assert len(set(picked)) == 40
    assert all(port in ports.pick_range() for port in picked)
    assert not set(picked) & ports.RESERVED_PORTS
    for port in picked:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_is_never_handed_out_twice_by_one_process() -> None:
    first = set(ports.free_ports(200))
    assert not first & set(ports.free_ports(200))


def test_each_xdist_worker_picks_from_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setattr(ports, "_cursor", [])
        slices.append(ports.worker_slice())
        assert all(port in slices[-1] for port in ports.free_ports(20))
    assert slices[0].stop <= slices[1].start
    assert slices[1].stop <= slices[2].start
    assert slices[0].start == ports.pick_range().start
    assert slices[2].stop <= ports.pick_range().stop


def listening_in_worker_slice() -> tuple[socket.socket, int]:
    """A socket listening on the first port of this worker's slice that nobody holds yet."""
    for index, port in enumerate(ports.worker_slice()):
        taken = socket.socket()
        try:
            taken.bind(("127.0.0.1", port))
        except OSError:
            taken.close()
            continue
        taken.listen()
        return taken, index
    raise AssertionError("no port of the worker's slice is free")


def test_a_port_someone_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    taken, index = listening_in_worker_slice()
    monkeypatch.setattr(ports, "_cursor", [index])
    with taken:
        assert ports.free_port() != taken.getsockname()[1]


def test_a_block_is_consecutive_and_free() -> None:
    first = ports.free_port_block(3)
    for port in range(first, first + 3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    assert first + 1 not in ports.free_ports(100)


@pytest.mark.parametrize(("ephemeral", "picked"), [
    ("32768\t60999\n", range(10000, 32768)),
    ("1024 20000", range(20001, 65536)),
    ("1024 65000", range(10000, 65536)),
])
def test_pick_range_is_larger_side_of_ephemeral_range(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ephemeral: str, picked: range) -> None:
    (tmp_path / "range").write_text(ephemeral)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "range")
    assert ports.pick_range() == picked
