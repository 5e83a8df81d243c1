"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gate.api.deps import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (touches nothing else)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(state: StateDep) -> Any:
    """Ready to serve: the database answers and the scheduler runs."""
    checks: dict[str, str] = {}
    try:
        await anyio.to_thread.run_sync(state.db.ping)
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means "not ready", never a 500
        checks["database"] = f"unreachable: {type(exc).__name__}"
    checks["scheduler"] = "ok" if state.scheduler.running else "stopped"
    ok = all(v == "ok" for v in checks.values())
    body = {"status": "ok" if ok else "unavailable", "checks": checks}
    return JSONResponse(body, status_code=200 if ok else 503)
