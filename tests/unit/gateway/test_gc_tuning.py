"""The serving process's collector settings: startup state frozen, a higher young-generation threshold."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from aiohttp import web

from gateway.gc_tuning import tune_collector, tune_collector_on_startup


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_collector")
def test_tuning_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    _, middle, old = gc.get_threshold()
    startup_state = [object(), {"long": "lived"}]
    tune_collector(20_000)
    assert gc.get_threshold() == (20_000, middle, old)
    assert gc.get_freeze_count() > 0
    assert all(tracked is not startup_state for tracked in gc.get_objects())  # frozen: out of the collector's view


@pytest.mark.usefixtures("restored_collector")
def test_zero_leaves_pythons_defaults() -> None:
    before = gc.get_threshold()
    tune_collector(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("restored_collector")
async def test_the_startup_hook_tunes_once_the_app_starts() -> None:
    app = web.Application()
    app.on_startup.append(tune_collector_on_startup(5_000))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        assert gc.get_threshold()[0] == 5_000
    finally:
        await runner.cleanup()
