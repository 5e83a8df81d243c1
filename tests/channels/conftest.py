"""Fixtures of the channel contract suite: one driver and one gate per installed channel.

Both live for the whole module and per channel (the suite is parametrised over every
channel's entry point), so each channel pays for one fake and one gate start; every test
makes its own requests, so tests stay independent of each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.app import create_app
from gate.base.surfaces import available
from gate.config.settings import Settings
from tests.channels.drivers import DRIVERS, Driver
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.databases import migrated_sqlite
from tests.support.servers import ThreadServer

#: the longest a request may run: two Extends (+15 min each) past the 10 min rules, so a
#: replayed Extend that moved the deadline twice would not be hidden by the limit
MAX_TIMEOUT = "40m"
#: a rule for shell commands, as an agent's hook sends them (any approver decides)
CONTRACT_RULES: list[dict[str, object]] = [
    {"name": "shell-commands", "tools": ["Bash"], "timeout": "10m"},
    # a chain: carol (the lead), then finance (`gate.policy.stages`)
    {
        "name": "chained-payments",
        "tools": ["chain_pay"],
        "timeout": "10m",
        "stages": [
            {"name": "lead", "approvers": ["carol"]},
            {"name": "finance", "approvers": ["group:finance"]},
        ],
    },
    # "approve similar": the same repo, at most two calls (`gate.decisions.grants`)
    {
        "name": "releases",
        "tools": ["release_*"],
        "timeout": "10m",
        "grant_scopes": ["pattern"],
        "grant_pin": ["repo"],
        "max_grant_uses": 2,
    },
    # approvals only from a fresh single sign-on in the console (`gate.policy.stepup`)
    {"name": "step-up", "tools": ["risky_*"], "timeout": "10m", "step_up": {"max_age": "5m"}},
    # clicks by a person gate knows only by email address are refused
    {"name": "bound-only", "tools": ["bound_*"], "timeout": "10m", "refuse_email_bound": True},
]
#: single sign-on, for the step-up rule (nothing is fetched from the issuer until a sign-in)
CONTRACT_OIDC = {"issuer": "https://idp.example", "client_id": "gate", "client_secret": "s3cret"}
#: people the suite clicks as who are not `[[approvers]]` at all
STRANGERS = ("stranger",)


def contract_settings(driver: Driver, database_url: str) -> Settings:
    """The standard test settings, the chat rules, and only the channel under test.

    Each approver gets an id on the channel, from the driver, under the channel's name (the
    key gate maps a platform user to an approver by).
    """
    data = cfg.settings_data(database_url, max_timeout=MAX_TIMEOUT)
    data["rules"] = [*CHAT_RULES, *CONTRACT_RULES, *data["rules"]]
    for approver in data["approvers"]:
        approver[driver.name] = driver.user_id(approver["name"])
    data["channels"] = {driver.name: driver.settings()}
    data["oidc"] = CONTRACT_OIDC
    return Settings(**data)


@pytest.fixture(scope="module", params=sorted(available()))
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    """The driver of one installed channel, its fake platform started."""
    name: str = request.param
    if name not in DRIVERS:
        pytest.fail(f"channel {name!r} is installed but has no driver in tests/channels/drivers/")
    found = DRIVERS[name]()
    with pytest.MonkeyPatch.context() as mp:
        # slack-sdk sends every call through HTTP(S)_PROXY when set, ignoring NO_PROXY:
        # calls meant for the loopback fake would go to the proxy.
        for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            mp.delenv(var, raising=False)
        found.start()
        try:
            yield found
        finally:
            found.stop()


@pytest.fixture(scope="module")
def gate(driver: Driver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    """A real gate (SQLite) whose only channel is the driver's, talking to its fake."""
    folder: Path = tmp_path_factory.mktemp(f"contract-{driver.name}")
    settings = contract_settings(driver, migrated_sqlite(folder / "gate.db"))
    server = ThreadServer(create_app(settings)).start()
    driver.attach(server.url)
    try:
        yield Gate(server, settings)
    finally:
        server.stop()


@pytest.fixture
def clicks(driver: Driver) -> Driver:
    """The driver, for cases about clicks; skipped for a channel that takes none."""
    if driver.no_clicks:
        pytest.skip(driver.no_clicks)
    return driver
