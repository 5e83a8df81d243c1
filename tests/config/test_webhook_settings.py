"""`[[webhooks]]` in gate.toml: a URL that would send in the clear, a secret that is not a
Standard Webhooks one or an unset variable is refused at load, naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.base.errors import ConfigError
from gate.config.settings import load_settings

GOOD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw1W2Uk8OFcN8="


def toml(url: str = "https://hooks.example.com/gate", **keys: str) -> str:
    lines = ["[server]", 'host = "127.0.0.1"', "", "[[webhooks]]", 'name = "feed"']
    lines += [f'url = "{url}"']
    lines += [f'{k} = "{v}"' for k, v in ({"secret": GOOD_SECRET} | keys).items() if v]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        # the url's own line
        (toml("http://hooks.example.com/gate"), 6, "must use https://"),
        (toml("ftp://hooks.example.com/gate"), 6, "https:// URL"),
        (toml("https://user:pw@hooks.example.com/"), 6, "user name or password"),
        # the secret is checked with the whole entry: its [[webhooks]] line
        (toml(secret="not-a-secret"), 4, "must start with whsec_"),
        (toml(secret="whsec_%%%"), 4, "must be base64"),
        (toml(secret="whsec_QUJD"), 4, "24 to 64 bytes"),
        (toml(secret="", secret_env="GATE_TEST_UNSET_WEBHOOK_SECRET"), 4, "is not set"),
    ],
)
def test_a_webhook_that_cannot_work_is_refused_with_its_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    said = str(refused.value)
    assert said.startswith(f"{path}:{line}: webhooks"), said
    assert words in said, said


def test_http_to_loopback_and_a_secret_from_the_environment_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_TEST_WEBHOOK_SECRET", GOOD_SECRET)
    path = tmp_path / "gate.toml"
    path.write_text(
        toml("http://127.0.0.1:9/hook", secret="", secret_env="GATE_TEST_WEBHOOK_SECRET")
    )
    [hook] = load_settings(path).webhooks
    assert hook.signing_secret == GOOD_SECRET and GOOD_SECRET not in repr(hook)
    assert hook.events == ["created", "decided", "expired", "outcome", "grant"]


def test_webhook_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(toml() + toml().split("\n", 3)[3])
    with pytest.raises(ConfigError, match="webhook names must be unique"):
        load_settings(path)
