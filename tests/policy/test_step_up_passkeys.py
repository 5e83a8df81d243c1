"""A rule's `step_up` with `webauthn`: frozen on each request and read back failing closed,
and what `gate.policy.stepup.refusal` asks of an approval when passkeys (and a fresh single
sign-on) are demanded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gate.identity.authmethod import PASSWORD, AuthMethod
from gate.policy import stepup
from gate.policy.offers import StepUp

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_passkey_demand_reads_back_and_fails_closed() -> None:
    alone = StepUp(None, (), webauthn=True)
    assert alone.to_json() == {"max_age_seconds": None, "acr": [], "webauthn": True}
    assert StepUp.from_json(alone.to_json()) == alone
    both = StepUp(timedelta(minutes=5), ("mfa",), webauthn=True)
    assert StepUp.from_json(both.to_json()) == both
    # older requests (no key) read as before; anything unreadable demands the most
    assert StepUp.from_json({"max_age_seconds": 300.0, "acr": []}) == StepUp(timedelta(minutes=5))
    strictest = StepUp(timedelta(0), webauthn=True)
    for stored in ("x", {"max_age_seconds": 300, "webauthn": "yes"}, {"max_age_seconds": None}):
        assert StepUp.from_json(stored) == strictest


def test_a_passkey_rule_needs_a_passkey_and_with_max_age_a_fresh_sign_on_too() -> None:
    alone = StepUp(None, (), webauthn=True)
    refused = stepup.refusal(alone, PASSWORD, NOW)
    assert refused is not None and "passkey" in refused
    assert stepup.refusal(alone, PASSWORD.with_passkey("c1"), NOW) is None
    assert stepup.sign_in_refusal(alone, PASSWORD, NOW) is None  # nothing to sign in again for
    both = StepUp(timedelta(minutes=5), (), webauthn=True)
    old = AuthMethod("oidc", issuer="i", subject="s", auth_time=NOW - timedelta(hours=1))
    fresh = AuthMethod("oidc", issuer="i", subject="s", auth_time=NOW - timedelta(minutes=1))
    assert "ago" in (stepup.refusal(both, old.with_passkey("c1"), NOW) or "")
    assert "single sign-on" in (stepup.refusal(both, PASSWORD.with_passkey("c1"), NOW) or "")
    assert "passkey" in (stepup.refusal(both, fresh, NOW) or "")
    assert stepup.refusal(both, fresh.with_passkey("c1"), NOW) is None
