"""docs/webhooks.md is true: its gate.toml loads, its payload has the keys gate sends, and its
Python receiver, run as written, takes gate's real messages and refuses tampered ones."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gate.config.settings import Settings, load_settings
from gate.delivery.webhooks import body_of, signed_headers
from gate.store import webhooks as outbox
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.docs import section
from tests.support.fake_webhooks import SECRET
from tests.support.servers import wait_until


def block(name: str, language: str) -> str:
    """The one fenced `language` block of docs section `name`."""
    [found] = re.findall(rf"```{language}\n(.*?)```", section(name), re.S)
    return str(found)


def shape(value: Any) -> Any:
    """The keys of a JSON value, nested (what a receiver's code depends on)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in ("detail",)}
    return type(value).__name__ if value is not None else "str"


@pytest.fixture
def documented_receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, Any]]]:
    """The page's receiver, run as written (not as __main__) on a free loopback port."""
    monkeypatch.setenv("GATE_WEBHOOK_SECRET", SECRET)
    namespace: dict[str, Any] = {"__name__": "receiver"}
    exec(compile(block("webhook-receiver", "python"), "docs/webhooks.md", "exec"), namespace)
    server = HTTPServer(("127.0.0.1", 0), namespace["Receiver"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", namespace
    server.shutdown()
    server.server_close()


def test_the_worked_toml_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_WEBHOOK_SECRET", SECRET)
    path = tmp_path / "gate.toml"
    path.write_text(block("webhook-toml", "toml"))
    [hook] = load_settings(path).webhooks
    assert hook.url.startswith("https://") and hook.signing_secret == SECRET
    assert hook.events == ["decided", "expired", "grant"]


def test_the_documented_receiver_takes_gates_messages(
    make_gate: GateFactory,
    sqlite_url: str,
    tmp_path: Path,
    documented_receiver: tuple[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, receiver = documented_receiver
    path = tmp_path / "gate.toml"
    path.write_text(
        block("webhook-toml", "toml").replace("https://siem.example.com/hooks/gate", url)
    )
    hook = load_settings(path).webhooks[0].model_copy(update={"events": ["created", "decided"]})
    data = cfg.settings_data(sqlite_url)
    settings = Settings(**data).model_copy(update={"webhooks": [hook]})
    gate = make_gate(settings=settings)
    rid = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]["id"]
    assert gate.decide(rid, cfg.ALICE).status_code == 200
    wait_until(lambda: len(receiver["seen"]) == 2)

    printed = capsys.readouterr().out
    assert f"request.created {rid} created by billing-agent" in printed
    assert f"request.decided {rid} approved by alice" in printed
    with gate.state.db.read_conn() as conn:
        sent = [row.payload for row in conn.execute(sa.select(outbox.WEBHOOK.c.payload))]
    documented = json.loads(block("webhook-payload", "json"))
    assert shape(sent[-1]) == shape(documented)
    assert documented["data"]["detail"].keys() <= {"approvals", "auth"}

    # a signed message with its body changed is refused by the page's code; as signed, taken
    body = body_of(sent[-1])
    headers = signed_headers(hook, "msg_extra", datetime.now(UTC), body)
    tampered = body.replace("approved", "rejected")
    assert httpx.post(url, content=tampered, headers=headers).status_code == 401
    assert len(receiver["seen"]) == 2
    assert httpx.post(url, content=body, headers=headers).status_code == 204
    assert "msg_extra" in receiver["seen"]
