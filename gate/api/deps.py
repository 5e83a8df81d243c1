"""Dependency aliases shared by the routers (`ServiceDep`, `PrincipalDep`, ...)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gate.auth import Principal
from gate.service import GateService
from gate.state import AppState


def get_state(request: Request) -> AppState:
    """The app's typed state object."""
    state: AppState = request.app.state.gate
    return state


def get_service(request: Request) -> GateService:
    """The service layer."""
    return get_state(request).service


def get_principal(request: Request) -> Principal:
    """The caller, from the bearer token; 401 when missing or unknown."""
    return get_state(request).tokens.authenticate(request.headers.get("authorization"))


StateDep = Annotated[AppState, Depends(get_state)]
ServiceDep = Annotated[GateService, Depends(get_service)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
