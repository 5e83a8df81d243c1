"""Chat identities bound outside gate.toml: from the identity provider's claims, or by a
one-time code the approver sends from the chat platform; and which approver a click is.

A click names a platform user id the platform signed. gate maps it to an approver, in this
order, and records how (`gate.identity.authmethod.BoundBy`):

1. `configured_id`: the approver's key for that channel in gate.toml (`slack = "U01..."`);
2. `idp_claim` / `link`: an active row of `chat_identity`, written when the approver signed
   in through the identity provider with the claim `[oidc].identity_claims` names for the
   platform, or when they sent the console's one-time code from the platform;
3. `email`: the approver's email address (the email channel's clicks).

Each change is one write transaction and leaves a row behind (bindings end, never vanish)
plus a `gate.identities` log line: the record of who bound and unbound what, when, how.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from gate.config.people import ApproverSettings
from gate.config.settings import Settings
from gate.decisions.clicks import LinkAnswer
from gate.identity.authmethod import BoundBy
from gate.store import identities as store
from gate.store.db import Database
from gate.store.identities import IdentityRow

log = logging.getLogger("gate.identities")

#: the chat platforms an identity can be bound on (channel names), and how pages name them
PLATFORMS: dict[str, str] = {  # the keys are `gate.config.oidc.CHAT_PLATFORMS`
    "slack": "Slack",
    "teams": "Microsoft Teams",
    "telegram": "Telegram",
    "discord": "Discord",
    "wecom": "WeCom",
    "feishu": "Feishu",
}
#: a link code is typed by a person from one screen into another: long enough to guess
#: never (10 symbols of 32: 50 bits, tried only through a signed platform callback within
#: its lifetime), short enough to type, no look-alikes (no 0/O, 1/I/L)
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 10
#: how long a link code works: time to open the chat app and send it, not to keep it around
CODE_LIFETIME = timedelta(minutes=10)


#: the answer to a code sent where others read it
EXPOSED = (
    "Not linked: that code was sent where others can read it, so it no longer works. Get a "
    "new one on the Identities page in gate and send it in a private chat with the bot."
)


@dataclass(frozen=True)
class Bound:
    """Who a platform user id is, and how gate knows."""

    approver: ApproverSettings
    bound_by: BoundBy


@dataclass(frozen=True)
class Binding:
    """One of an approver's identities, as the console lists it."""

    platform: str
    user_id: str
    bound_by: BoundBy
    #: idp_claim: the claim's name; configured_id: "gate.toml"
    source: str | None
    bound_at: datetime | None = None
    #: set on the rows the approver may unbind (those in the database)
    id: int | None = None


def label(platform: str) -> str:
    """How pages name a platform ("Microsoft Teams")."""
    return PLATFORMS.get(platform, platform.title())


def configured(settings: Settings, platform: str, user_id: str) -> Bound | None:
    """The approver gate.toml binds `user_id` on `platform` to (by id, or by email for the
    email channel)."""
    approver = settings.approver_by_identity(platform, user_id)
    if approver is None:
        return None
    by_key = platform in (approver.model_extra or {})
    return Bound(approver, "configured_id" if by_key else "email")


def lookup(settings: Settings, db: Database, platform: str, user_id: str) -> Bound | None:
    """Which approver clicked: gate.toml first (no database read), then the bindings table."""
    found = configured(settings, platform, user_id)
    if found is not None or platform not in PLATFORMS:
        return found
    with db.read() as session:
        row = store.active(session, platform, user_id)
    approver = settings.approver(row.approver) if row is not None else None
    if row is None or approver is None or row.bound_by not in ("idp_claim", "link"):
        return None  # a binding of someone no longer in gate.toml maps to nobody
    return Bound(approver, "idp_claim" if row.bound_by == "idp_claim" else "link")


def bindings(settings: Settings, db: Database, approver: ApproverSettings) -> list[Binding]:
    """Every identity `approver` acts under on chat platforms: gate.toml's, the database's,
    and their email address."""
    found = [
        Binding(key, str(value), "configured_id", "gate.toml")
        for key, value in sorted((approver.model_extra or {}).items())
        if key in PLATFORMS
    ]
    with db.read() as session:
        rows = store.of_approver(session, approver.name)
    found += [_binding(row) for row in rows]
    if approver.email:
        found.append(Binding("email", approver.email, "email", "gate.toml"))
    return found


def _binding(row: IdentityRow) -> Binding:
    how: BoundBy = "idp_claim" if row.bound_by == "idp_claim" else "link"
    return Binding(row.platform, row.user_id, how, row.source, row.bound_at, row.id)


def bind_claims(
    settings: Settings,
    db: Database,
    approver: ApproverSettings,
    claims: Mapping[str, Any],
    now: datetime,
) -> list[str]:
    """Bind the chat ids the identity provider's claims give `approver` at a sign-in (the
    claims `[oidc].identity_claims` names), in one write transaction; returns what it could
    not bind, in words. A claim that changed replaces the old binding; one the provider no
    longer sends ends it (the provider is the source of these)."""
    wanted = settings.oidc.identity_claims if settings.oidc is not None else {}
    if not wanted:
        return []
    problems: list[str] = []
    try:
        with db.write() as session:
            _bind_claims(session, settings, approver, wanted, claims, now, problems)
    except sa.exc.IntegrityError:  # another sign-in bound one of these ids in the same moment
        problems.append("an id was bound by someone else meanwhile; sign in again")
        log.warning("did not bind %s's chat ids: one was bound meanwhile", approver.name)
    return problems


def _bind_claims(
    session: Session,
    settings: Settings,
    approver: ApproverSettings,
    wanted: Mapping[str, str],
    claims: Mapping[str, Any],
    now: datetime,
    problems: list[str],
) -> None:
    """`bind_claims`' writes, in its transaction."""
    mine = [r for r in store.of_approver(session, approver.name) if r.bound_by == "idp_claim"]
    for platform, claim in sorted(wanted.items()):
        value = _claim_text(claims.get(claim))
        for old in mine:
            if old.platform == platform and old.user_id != value:
                store.unbind(session, old.id, approver=approver.name, by="idp", now=now)
                log.info(
                    "unbound %s %s from %s (claim %s changed)",
                    platform,
                    old.user_id,
                    approver.name,
                    claim,
                )
        if value is None or any(o.platform == platform and o.user_id == value for o in mine):
            continue
        problem = _taken(settings, session, approver, platform, value)
        if problem is not None:
            problems.append(problem)
            log.warning("did not bind %s %s to %s: %s", platform, value, approver.name, problem)
            continue
        store.bind(
            session,
            approver=approver.name,
            platform=platform,
            user_id=value,
            bound_by="idp_claim",
            source=claim,
            now=now,
        )
        log.info(
            "bound %s %s to %s by the identity provider's claim %s",
            platform,
            value,
            approver.name,
            claim,
        )


def _claim_text(value: Any) -> str | None:
    """A claim's value as an id: text or a whole number (Telegram's ids are numbers)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    return text or None


def _taken(
    settings: Settings, session: Session, approver: ApproverSettings, platform: str, user_id: str
) -> str | None:
    """Why `user_id` on `platform` cannot be bound to `approver`, or None when it can."""
    owner = configured(settings, platform, user_id)
    if owner is not None and owner.approver.name != approver.name:
        return f"that {label(platform)} id belongs to another approver in gate.toml"
    row = store.active(session, platform, user_id)
    if row is not None and row.approver != approver.name:
        return f"that {label(platform)} id is bound to another approver; they must unbind it"
    if owner is not None or row is not None:
        return f"that {label(platform)} id is yours already"
    return None


def new_code() -> str:
    """A fresh one-time code, shown as two groups of five ("ABCDE-23456")."""
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    return f"{raw[:5]}-{raw[5:]}"


def _code_hash(code: str) -> str:
    """The stored form of a code, as typed in any case, with or without spaces and dashes."""
    return hashlib.sha256("".join(code.split()).replace("-", "").upper().encode()).hexdigest()


def start_link(db: Database, approver: ApproverSettings, platform: str, now: datetime) -> str:
    """A one-time code `approver` sends from `platform` to bind their id there."""
    code = new_code()
    with db.write() as session:
        store.add_code(
            session,
            code_hash=_code_hash(code),
            approver=approver.name,
            platform=platform,
            now=now,
            expires_at=now + CODE_LIFETIME,
        )
    log.info("%s asked for a code to link a %s id", approver.name, platform)
    return code


def complete_link(
    settings: Settings,
    db: Database,
    platform: str,
    user_id: str,
    code: str,
    now: datetime,
    *,
    exposed: bool = False,
) -> LinkAnswer:
    """Bind `user_id` on `platform` (the platform signed who sent it) to the approver whose
    console gave out `code`; the code works once, on its platform, within its lifetime.
    `exposed`: the code was sent where others read it (a group chat); it is used up and
    binds nothing, since whoever read it could send it first."""
    name = label(platform)
    try:
        with db.write() as session:
            used = store.use_code(session, _code_hash(code), now=now)
            approver = settings.approver(used.approver) if used is not None else None
            if used is None or approver is None:
                return LinkAnswer(
                    False,
                    "That code is not valid (used, expired or mistyped). "
                    "Get a new one on the Identities page in gate.",
                )
            if used.platform != platform:
                return LinkAnswer(
                    False,
                    f"That code was for {label(used.platform)}, not "
                    f"{name}. Get a new one for {name} in gate.",
                )
            if exposed:
                log.warning("a code of %s's was sent where others read it: used up", used.approver)
                return LinkAnswer(False, EXPOSED)
            problem = _taken(settings, session, approver, platform, user_id)
            if problem is not None:
                return LinkAnswer(False, f"Not linked: {problem}.")
            store.bind(
                session,
                approver=approver.name,
                platform=platform,
                user_id=user_id,
                bound_by="link",
                source="console",
                now=now,
            )
    except sa.exc.IntegrityError:  # another replica bound that id in the same moment
        return LinkAnswer(False, f"Not linked: that {name} id was bound meanwhile.")
    log.info("bound %s %s to %s by a link code", platform, user_id, approver.name)
    return LinkAnswer(True, f"Linked: your {name} clicks now count as {approver.name} in gate.")


def unbind(db: Database, approver: ApproverSettings, identity_id: int, now: datetime) -> bool:
    """End one of `approver`'s bindings from the database; False when it is not theirs or
    not active."""
    with db.write() as session:
        row = store.unbind(session, identity_id, approver=approver.name, by=approver.name, now=now)
    if row is not None:
        log.info("%s unbound %s %s", approver.name, row.platform, row.user_id)
    return row is not None
