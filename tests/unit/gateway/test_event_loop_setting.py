"""The gateway runs on uvloop unless told otherwise; an event loop it cannot run is a bad setting
(exit 2)."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import uvloop

from gateway import cli
from gateway.settings import GatewaySettings, settings_from_env


def test_serve_runs_on_uvloop_unless_asked() -> None:
    assert settings_from_env({}).event_loop == "uvloop"
    default = cli.new_event_loop(GatewaySettings())
    standard = cli.new_event_loop(settings_from_env({"STREAMGATE_EVENT_LOOP": "asyncio"}))
    try:
        assert isinstance(default, uvloop.Loop)
        assert not isinstance(standard, uvloop.Loop)
        assert isinstance(standard, asyncio.BaseEventLoop)
    finally:
        default.close()
        standard.close()


def test_an_unknown_event_loop_is_a_bad_setting(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STREAMGATE_EVENT_LOOP", "tokio")
    assert cli.main(["serve", "--port", "0"]) == 2
    assert "event_loop must be one of uvloop, asyncio, got 'tokio'" in capsys.readouterr().err


def test_uvloop_without_the_package_is_a_bad_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *args: None if name == "uvloop" else real_find_spec(name, *args)
    )
    with pytest.raises(ValueError, match=r"needs the uvloop package.*event_loop=asyncio"):
        cli.check_event_loop(GatewaySettings())
    cli.check_event_loop(GatewaySettings(event_loop="asyncio"))
