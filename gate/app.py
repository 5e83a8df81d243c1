"""The composition root: `create_app(settings)` builds the engine, policy, service, channels,
jobs, scheduler and routers, and the lifespan starts and stops them.

Nothing is built at import time; tests call `create_app` with their own settings. Nothing in
gate imports this module (the CLI, at the top, does): what the parts share is `gate.server.state`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any

from fastapi import FastAPI

from gate import web
from gate.api import agents, decisions, docs, health, lean, metrics, v1
from gate.api.guard import SameOriginGuard
from gate.api.headers import SECURITY_HEADERS
from gate.api.lean import GateAPI
from gate.api.middleware import RequestEnvelope, install_error_handlers
from gate.base import threads
from gate.base.notify import Notifier
from gate.base.statuses import utcnow
from gate.config.settings import Settings, load_settings
from gate.decisions import denials
from gate.decisions.decision_log import DecisionLog
from gate.decisions.service import GateService
from gate.delivery.channel import load_channels
from gate.delivery.jobs import Jobs
from gate.delivery.scheduler import WEBHOOK_JOB, Scheduler
from gate.delivery.webhooks import WebhookSender, subscriptions
from gate.identity.auth import TokenBook
from gate.inputs.bodies import JsonLimits
from gate.policy import shadow
from gate.policy.rules import Policy
from gate.server import telemetry
from gate.server.state import AppState, ChannelGate
from gate.store.db import Database, upgrade

log = logging.getLogger("gate")


def build_notifier(settings: Settings, db: Database) -> Notifier:
    """In-process wake-ups on SQLite; LISTEN/NOTIFY across replicas on PostgreSQL."""
    if not db.sqlite:
        try:
            from gate.store.notify_pg import PostgresNotifier
        except ImportError:  # psycopg is the `postgres` extra; without it, one replica only
            return Notifier()
        return PostgresNotifier(db.url, db.engine)
    return Notifier()


def create_app(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, span_exporter: Any = None
) -> FastAPI:
    """Build a gate app for `settings`; the lifespan starts and stops its parts.

    Tracing starts here when `[telemetry]` (or `OTEL_*`) configures it, or to `span_exporter`
    (an OpenTelemetry SDK exporter: tests and benches), and stops with the lifespan.
    """
    state = build_state(settings, clock)
    state.tracing = telemetry.start(settings.telemetry, state.db.engine, exporter=span_exporter)
    app = GateAPI(
        title="gate",
        version="0.1.0",
        lifespan=_lifespan(state),
        description="Human approval for AI agent tool calls",
        # FastAPI's pages load Swagger UI and ReDoc from a CDN, which gate's CSP blocks:
        # `gate.api.docs` serves Swagger UI from gate's own files instead, and there is no ReDoc
        docs_url=None,
        redoc_url=None,
    )
    app.state.gate = state
    install_error_handlers(app)
    server = settings.server
    app.add_middleware(SameOriginGuard, settings=settings)
    app.add_middleware(  # outermost: every response passes one wrapper of `send`
        RequestEnvelope,
        max_bytes=server.max_body_bytes,
        json_limits=JsonLimits.of(server),
        headers=SECURITY_HEADERS,
    )
    app.include_router(health.router)
    docs.install(app)
    app.include_router(v1.router)
    app.include_router(decisions.router)
    app.include_router(agents.router)
    for channel in state.channels.values():
        router = channel.router()
        if router is not None:
            app.include_router(router)
    metrics.install(app, state)
    web.install(app, state)
    lean.install(app, state)  # plain asks, decisions and long-polls skip it (same checks)
    return app


def build_state(settings: Settings, clock: Callable[[], datetime] = utcnow) -> AppState:
    """The app's parts, wired together and not yet started."""
    server = settings.server
    # a broken policy (or a shadow rule past its `until`) stops start-up before anything is touched
    policy = Policy(settings, wall=clock)
    if server.migrate_on_start:
        upgrade(server.database_url)
    db = Database(
        server.database_url, pool_size=server.db_pool_size, pool_overflow=server.db_pool_overflow
    )
    db.webhooks = subscriptions(settings.webhooks)  # owed with each audit event that wants one
    notifier = build_notifier(settings, db)
    service = GateService(settings=settings, db=db, policy=policy, notifier=notifier, clock=clock)
    if settings.decision_log.enabled:
        service.decision_log = DecisionLog(
            db=db, settings=settings.decision_log, revision=policy.revision, clock=clock
        )
    configured = settings.channels.configured()
    service.configured_channels = configured
    channels = load_channels(configured, ChannelGate(service), source=settings.source)
    jobs = Jobs(service, channels, clock)
    sender = WebhookSender(db, settings.webhooks, clock) if settings.webhooks else None
    scheduler = Scheduler(
        sweep=jobs.sweep,
        pump=jobs.scheduled_pump,
        remind=jobs.remind,
        sweep_interval=server.sweep_interval_seconds,
        pump_interval=server.outbox_interval_seconds,
        remind_interval=server.followup_interval_seconds,
        # the decision log's retention, and history rows past every window
        prune=jobs.prune if service.decision_log is not None or policy.history_terms else None,
        prune_interval=settings.decision_log.prune_interval_seconds,
        webhooks=sender.pump if sender is not None else None,
    )
    service.kick_outbox = scheduler.kick
    if sender is not None:
        service.kick_webhooks = partial(scheduler.kick, WEBHOOK_JOB)
    jobs.kick, jobs.running = scheduler.kick, lambda: scheduler.running
    service.pump = jobs
    return AppState(
        settings=settings,
        db=db,
        policy=policy,
        notifier=notifier,
        service=service,
        tokens=TokenBook(settings),
        scheduler=scheduler,
        jobs=jobs,
        channels=channels,
        decision_log=service.decision_log,
        clock=clock,
        webhooks=sender,
    )


def _lifespan(state: AppState) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the notifier, catch up on expiries, tick the jobs; stop them in reverse."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.notifier.start()
        denials.follow(state.notifier, state.service.trips)
        await threads.run_sync(state.service.trips.reload)  # before any call is answered
        expired = await state.jobs.sweep()  # deadlines that passed while no server was running
        if expired:
            log.info(
                "catch-up sweep expired %d request(s) whose deadline passed while down", expired
            )
        state.scheduler.start()
        if state.decision_log is not None:
            state.decision_log.start()
        _log_startup(state.settings, state)
        try:
            yield
        finally:
            state.scheduler.shutdown()
            await state.scheduler.drain()
            if state.decision_log is not None:  # a clean stop writes what is buffered
                await threads.run_sync(state.decision_log.stop)
            released = await threads.run_sync(state.jobs.release_handed)
            if released:
                log.info("gave back %d card delivery(ies) not sent before shutdown", released)
            await state.notifier.stop()
            for channel in state.channels.values():
                await channel.aclose()
            if state.webhooks is not None:
                await state.webhooks.aclose()
            if state.tracing is not None:
                state.tracing.stop()
            state.db.dispose()

    return lifespan


def _log_startup(settings: Settings, state: AppState) -> None:
    server = settings.server
    log.info(
        "gate ready: database %s, %d rule(s) (policy revision %s), channels: %s",
        _redact(server.database_url),
        len(state.policy.rules),
        state.policy.revision,
        ", ".join(state.channels) or "none",
    )
    trial = shadow.startup_line(shadow.notices(state.policy.shadows, state.clock()))
    if trial is not None:
        log.warning("%s", trial)
    tripped = sorted(state.service.trips.tripped)
    if tripped:
        log.warning(
            "%d agent(s) tripped by their rejections, every call asked until reset (the "
            "console's Agents page, or gate agents reset NAME): %s",
            len(tripped),
            ", ".join(repr(name) for name in tripped),
        )
    if not settings.rules:
        log.warning(
            "no [[rules]] configured: every call is allowed unless the caller sets "
            "metadata.requires_confirmation. Add rules to gate.toml (see docs/policy.md)."
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
    return create_app(load_settings())


__all__ = ["app_from_env", "build_notifier", "build_state", "create_app"]
