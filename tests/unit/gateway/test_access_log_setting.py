"""The per-request access log is off unless asked for (it costs a large share of a small request's
gateway CPU)."""

from __future__ import annotations

import logging

from gateway.cli import access_logger
from gateway.settings import GatewaySettings, settings_from_env


def test_access_log_is_off_by_default() -> None:
    assert settings_from_env({}).access_log is False
    assert access_logger(GatewaySettings()) is None


def test_access_log_turns_on_from_the_environment() -> None:
    settings = settings_from_env({"STREAMGATE_ACCESS_LOG": "true"})
    assert settings.access_log is True
    assert access_logger(settings) is logging.getLogger("aiohttp.access")
