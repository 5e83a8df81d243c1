"""`create_app(settings)`: builds the engine, policy, channels, notifier and scheduler.

Nothing is built at import time; tests call `create_app` with their own settings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

import anyio
from fastapi import FastAPI

from gate import deciding, outbox
from gate.acting import Result
from gate.api import health, v1
from gate.api.guard import SameOriginGuard
from gate.api.middleware import (
    BodyLimitMiddleware,
    RequestContextMiddleware,
    install_error_handlers,
)
from gate.auth import TokenBook
from gate.channel import Channel, Click, load_channels
from gate.config import Settings
from gate.db import Database, upgrade
from gate.models import utcnow
from gate.notify import Notifier
from gate.policy import Policy
from gate.readmodel import RequestView
from gate.scheduler import Scheduler
from gate.schemas import JsonLimits
from gate.service import GateService

log = logging.getLogger("gate")


@dataclass
class AppState:
    """Everything one gate app owns, typed (reached as `app.state.gate`)."""

    settings: Settings
    db: Database
    policy: Policy
    notifier: Notifier
    service: GateService
    tokens: TokenBook
    scheduler: Scheduler
    channels: dict[str, Channel] = field(default_factory=dict)
    clock: Callable[[], datetime] = utcnow
    #: told how long each sweep took, in seconds (metrics)
    on_sweep: Callable[[float], None] = lambda seconds: None

    async def pump_outbox(self) -> int:
        """Send every due delivery once; returns how many rows were handled."""
        now = self.clock()
        claims = await anyio.to_thread.run_sync(outbox.claim_due, self.db, now)
        for claim in claims:
            view = await anyio.to_thread.run_sync(self.service.view, claim.request_id)
            await outbox.deliver(
                self.db,
                claim,
                channels=self.channels,
                view=view,
                now=self.clock,
                max_attempts=self.settings.server.outbox_max_attempts,
                run_sync=anyio.to_thread.run_sync,
            )
        return len(claims)

    async def sweep(self) -> int:
        """Expire every request whose deadline passed."""
        started = time.perf_counter()
        done = await anyio.to_thread.run_sync(lambda: self.service.expire_due(self.clock()))
        self.on_sweep(time.perf_counter() - started)
        return done

    async def followups(self) -> tuple[int, int]:
        """Send due reminders and escalations."""
        from gate.followups import remind_and_escalate

        return await anyio.to_thread.run_sync(
            lambda: remind_and_escalate(self.service, self.clock())
        )


class ChannelGate:
    """The `ChannelContext` channels get: the decision pipeline and views, never the database."""

    def __init__(self, service: GateService) -> None:
        self._service = service

    @property
    def settings(self) -> Settings:
        return self._service.settings

    async def act(self, click: Click) -> Result:
        """Run a click through the one decision pipeline (in a worker thread)."""
        return await anyio.to_thread.run_sync(lambda: deciding.act(self._service, click))

    async def view(self, request_id: str) -> RequestView | None:
        """The current state of a request."""
        return await anyio.to_thread.run_sync(lambda: self._service.view(request_id))


def build_notifier(settings: Settings, db: Database) -> Notifier:
    """In-process wake-ups on SQLite; LISTEN/NOTIFY across replicas on PostgreSQL."""
    if not db.sqlite:
        try:
            from gate.notify_pg import PostgresNotifier
        except ImportError:  # the Postgres notifier ships with the multi-replica work
            return Notifier()
        return PostgresNotifier(db.url)
    return Notifier()


def create_app(settings: Settings, *, clock: Callable[[], datetime] = utcnow) -> FastAPI:
    """Build a gate app for `settings`; the lifespan starts and stops its parts."""
    server = settings.server
    policy = Policy(settings)  # a broken policy stops start-up before anything is touched
    if server.migrate_on_start:
        upgrade(server.database_url)
    db = Database(server.database_url, pool_size=server.db_pool_size)
    notifier = build_notifier(settings, db)
    service = GateService(settings=settings, db=db, policy=policy, notifier=notifier, clock=clock)
    state_ref: dict[str, AppState] = {}

    async def sweep_job() -> None:
        await state_ref["state"].sweep()

    async def pump_job() -> None:
        await state_ref["state"].pump_outbox()

    async def followup_job() -> None:
        await state_ref["state"].followups()

    scheduler = Scheduler(
        sweep=sweep_job,
        pump=pump_job,
        sweep_interval=server.sweep_interval_seconds,
        pump_interval=server.outbox_interval_seconds,
        followups=followup_job,
        followup_interval=server.followup_interval_seconds,
    )
    service.kick_outbox = scheduler.kick
    configured = settings.channels.configured()
    service.configured_channels = configured
    channels = load_channels(configured, ChannelGate(service), source=settings.source)
    state = AppState(
        settings=settings,
        db=db,
        policy=policy,
        notifier=notifier,
        service=service,
        tokens=TokenBook(settings),
        scheduler=scheduler,
        channels=channels,
        clock=clock,
    )
    state_ref["state"] = state

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await notifier.start()
        expired = await state.sweep()  # deadlines that passed while no server was running
        if expired:
            log.info(
                "catch-up sweep expired %d request(s) whose deadline passed while down", expired
            )
        scheduler.start()
        _log_startup(settings, state)
        try:
            yield
        finally:
            scheduler.shutdown()
            await scheduler.drain()
            await notifier.stop()
            for channel in channels.values():
                await channel.aclose()
            db.dispose()

    app = FastAPI(
        title="gate",
        version="0.1.0",
        lifespan=lifespan,
        description="Human approval for AI agent tool calls",
    )
    app.state.gate = state
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=server.max_body_bytes,
        json_limits=JsonLimits.of(server),
    )
    app.add_middleware(SameOriginGuard, settings=settings)
    app.add_middleware(RequestContextMiddleware)
    app.include_router(health.router)
    app.include_router(v1.router)
    for channel in channels.values():
        router = channel.router()
        if router is not None:
            app.include_router(router)
    _include_optional_routers(app, state)
    return app


def _include_optional_routers(app: FastAPI, state: AppState) -> None:
    """Routers that live in their own modules (web console, metrics) when present."""
    from gate import metrics

    metrics.install(app, state)
    try:
        from gate.api import web
    except ImportError:
        return
    web.install(app, state)


def _log_startup(settings: Settings, state: AppState) -> None:
    server = settings.server
    log.info(
        "gate ready: database %s, %d rule(s), channels: %s",
        _redact(server.database_url),
        len(state.policy.rules),
        ", ".join(state.channels) or "none",
    )
    if not settings.rules:
        log.warning(
            "no [[rules]] configured: every call is allowed unless the caller sets "
            "metadata.requires_confirmation. Add rules to gate.toml (see README, 'Policy')."
        )
    if state.tokens.anonymous_allowed:
        log.warning(
            "NO TOKENS CONFIGURED: anyone who can reach %s may submit and decide as 'local' "
            "(admin). This is allowed only because the server is bound to loopback. "
            "Add [[tokens]] to gate.toml before exposing it.",
            server.host,
        )


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory gate.app:app_from_env` (reads gate.toml / GATE_*)."""
    from gate.config import load_settings

    return create_app(load_settings())


__all__ = ["AppState", "ChannelGate", "create_app", "app_from_env"]
