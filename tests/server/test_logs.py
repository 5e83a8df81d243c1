"""gate's log never carries what a platform puts in a request URL (a bot token)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from gate.base.logs import configure_logging
from tests.support.http import TLS

SECRET = "123456:AAH-bot-token-in-the-path"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    levels = {name: logging.getLogger(name).level for name in ("httpx", "httpcore", "apscheduler")}
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_request_urls_stay_out_of_the_log_even_at_debug(
    restored_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("DEBUG")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
    with httpx.Client(transport=transport, verify=TLS) as client:
        client.post(f"https://api.telegram.org/bot{SECRET}/sendMessage", json={})
    logging.getLogger("gate.test").debug("gate's own debug lines still show")

    err = capsys.readouterr().err
    assert "gate's own debug lines still show" in err
    assert SECRET not in err
