"""Dependency aliases shared by the routers (`ServiceDep`, `PrincipalDep`, ...).

The dependencies are `async def` although none awaits: FastAPI runs a plain `def`
dependency in the thread pool, a hand-off to a worker thread and back for each one, on
every call. These only read the app's state and hash a token, which takes less time than
the hand-off.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gate.decisions.service import GateService
from gate.identity.auth import Principal
from gate.server.state import AppState


async def get_state(request: Request) -> AppState:
    """The app's typed state object."""
    state: AppState = request.app.state.gate
    return state


async def get_service(request: Request) -> GateService:
    """The service layer."""
    state: AppState = request.app.state.gate
    return state.service


async def get_principal(request: Request) -> Principal:
    """The caller, from the bearer token; 401 when missing or unknown."""
    state: AppState = request.app.state.gate
    return state.tokens.authenticate(request.headers.get("authorization"))


StateDep = Annotated[AppState, Depends(get_state)]
ServiceDep = Annotated[GateService, Depends(get_service)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
