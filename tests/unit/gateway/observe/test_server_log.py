"""aiohttp's server log: a refused request head is one line that quotes none of it, other records
pass as they are."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from gateway.observe.server_log import server_log


def test_a_refused_head_is_one_line_without_its_bytes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        server_log().exception("Error handling request from %s", "10.0.0.1",
                               exc_info=LineTooLong(b"Bearer s3cret", 8190))
        server_log().exception("Error handling request from %s", "10.0.0.2",
                               exc_info=BadHttpMessage("Invalid header: s3cret"))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "refused a request from 10.0.0.1: 400 a request line or header over 8190 "
                       "bytes"),
        (logging.INFO, "refused a request from 10.0.0.2: 400 BadHttpMessage")]
    assert not [r for r in caplog.records if r.exc_info]


def test_other_errors_keep_their_traceback(caplog: pytest.LogCaptureFixture) -> None:
    try:
        raise RuntimeError("handler bug")
    except RuntimeError as exc:
        with caplog.at_level(logging.ERROR, logger="aiohttp.server"):
            server_log().exception("Error handling request from %s", "10.0.0.3", exc_info=exc)
    [record] = caplog.records
    assert (record.levelno, record.exc_info is not None) == (logging.ERROR, True)
