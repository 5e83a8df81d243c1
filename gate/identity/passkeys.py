"""WebAuthn for gate: registering an approver's passkey, and checking an approval's assertion.

The ceremonies are Duo Labs' `webauthn` library's (`generate_*_options`, `verify_*`); this
module says what gate asks of them and words every refusal for the person:

* the relying party is the console's own address, `[server].public_url`: its host is the RP
  id, its scheme and host the only origin accepted;
* an approval's challenge is not random: it is the SHA-256 of (request id, the hash of the
  call being approved, a single-use server nonce), so the authenticator's signature covers
  exactly that call (`approval_challenge`); gate recomputes it from what is approved and
  what it issued, never from what the browser says;
* user verification (the authenticator's PIN or biometric) is required, and a signature
  counter that does not move forward (a cloned authenticator, or a replay) is refused.

Nothing here touches the database: `gate.store.passkeys` keeps credentials and challenges,
`gate.web.passkeys` runs the pages. The library is imported by the functions that use it, on
first use: it brings pyOpenSSL and the X.509 and ASN.1 stacks, a sixth of what a `gate serve`
or `gate` command otherwise spends importing, and most servers have no passkeys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any
from urllib.parse import urlsplit

#: how long a challenge may wait for its answer: long enough to find a security key and
#: touch it, short enough that an unanswered one is soon worth nothing
CHALLENGE_TTL = timedelta(minutes=2)
#: what the browser may wait for the person (milliseconds, WebAuthn's `timeout`)
TIMEOUT_MS = 90_000
#: separates gate's approval challenges from any other use of the same hash
_DOMAIN = b"gate/webauthn-approval/v1"


@cache
def _transports() -> frozenset[str]:
    """The transports WebAuthn names (what a browser's list is filtered to)."""
    from webauthn.helpers.structs import AuthenticatorTransport

    return frozenset(t.value for t in AuthenticatorTransport)


class PasskeyRefused(Exception):
    """An assertion or registration gate does not accept; `reason` says why, for the person."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class RelyingParty:
    """Who the passkeys are for: the console at `origin`, RP id its host name."""

    id: str
    origin: str
    name: str = "gate"

    @classmethod
    def of(cls, base_url: str) -> RelyingParty:
        """The relying party of a console reached at `base_url` (`[server].public_url`)."""
        parts = urlsplit(base_url)
        return cls(id=parts.hostname or "", origin=f"{parts.scheme}://{parts.netloc}")


@dataclass(frozen=True)
class NewPasskey:
    """A credential a registration created, checked."""

    credential_id: str
    public_key: bytes
    sign_count: int
    transports: tuple[str, ...]


def approval_challenge(request_id: str, args_hash: str, nonce: str) -> bytes:
    """The challenge an approval of `request_id` with arguments hashing to `args_hash` is
    signed over: bound to the request, the call and gate's single-use `nonce`."""
    parts = (_DOMAIN, request_id.encode(), args_hash.encode(), nonce.encode())
    return hashlib.sha256(b"\0".join(parts)).digest()


def registration_challenge(nonce: str) -> bytes:
    """The challenge a new passkey's registration signs: gate's single-use `nonce`, hashed
    apart from any approval's."""
    return hashlib.sha256(_DOMAIN + b"/register\0" + nonce.encode()).digest()


def user_handle(approver: str) -> bytes:
    """The WebAuthn user handle for an approver: a hash of their name (the handle must not
    carry personal data, and stays the same across their passkeys)."""
    return hashlib.sha256(b"gate approver\0" + approver.encode()).digest()[:32]


def registration_options(
    rp: RelyingParty, approver: str, existing: Sequence[str], challenge: bytes
) -> dict[str, Any]:
    """`navigator.credentials.create`'s `publicKey` options (JSON), for a new passkey of
    `approver`; `existing` are their credential ids, so the same authenticator is not
    registered twice."""
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers import base64url_to_bytes
    from webauthn.helpers.structs import (
        AuthenticatorSelectionCriteria,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    options = generate_registration_options(
        rp_id=rp.id,
        rp_name=rp.name,
        user_name=approver,
        user_id=user_handle(approver),
        user_display_name=approver,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(c)) for c in existing
        ],
    )
    loaded: dict[str, Any] = json.loads(options_to_json(options))
    return loaded


def verify_registration(rp: RelyingParty, credential: str, challenge: bytes) -> NewPasskey:
    """Check a registration's answer (the credential as JSON); PasskeyRefused says why not."""
    from webauthn import verify_registration_response
    from webauthn.helpers import bytes_to_base64url
    from webauthn.helpers.exceptions import WebAuthnException

    data = _json_object(credential)
    _check_client_data(rp, data, challenge, "webauthn.create")
    try:
        verified = verify_registration_response(
            credential=data,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
            require_user_verification=True,
        )
    except WebAuthnException as exc:
        raise PasskeyRefused("not_verified", f"the new passkey did not check out: {exc}") from None
    response = data.get("response")
    listed = response.get("transports") if isinstance(response, dict) else None
    transports = tuple(t for t in listed or () if isinstance(t, str) and t in _transports())
    return NewPasskey(
        credential_id=bytes_to_base64url(verified.credential_id),
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        transports=transports,
    )


def assertion_options(
    rp: RelyingParty, challenge: bytes, credentials: Sequence[tuple[str, Sequence[str]]]
) -> dict[str, Any]:
    """`navigator.credentials.get`'s `publicKey` options (JSON) for the approver's passkeys
    (credential id, transports)."""
    from webauthn import generate_authentication_options, options_to_json
    from webauthn.helpers import base64url_to_bytes
    from webauthn.helpers.structs import (
        AuthenticatorTransport,
        PublicKeyCredentialDescriptor,
        UserVerificationRequirement,
    )

    options = generate_authentication_options(
        rp_id=rp.id,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        allow_credentials=[
            PublicKeyCredentialDescriptor(
                id=base64url_to_bytes(cid),
                transports=[AuthenticatorTransport(t) for t in transports if t in _transports()],
            )
            for cid, transports in credentials
        ],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    loaded: dict[str, Any] = json.loads(options_to_json(options))
    return loaded


def credential_of(assertion: str) -> str:
    """The credential id an assertion (JSON) names; PasskeyRefused when it names none."""
    from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

    found = _json_object(assertion).get("rawId")
    if not isinstance(found, str) or not found or len(found) > 1400:
        raise PasskeyRefused("malformed", "the passkey's answer names no credential")
    try:
        return bytes_to_base64url(base64url_to_bytes(found))  # one spelling of each id
    except ValueError:
        raise PasskeyRefused("malformed", "the passkey's answer names no credential") from None


def verify_assertion(
    rp: RelyingParty,
    assertion: str,
    *,
    challenge: bytes,
    public_key: bytes,
    sign_count: int,
) -> int:
    """Check an approval's assertion (JSON) against the challenge gate computed and the
    credential's stored key and counter; the authenticator's new counter, or PasskeyRefused."""
    from webauthn import verify_authentication_response
    from webauthn.helpers import base64url_to_bytes, parse_authenticator_data
    from webauthn.helpers.exceptions import WebAuthnException

    data = _json_object(assertion)
    _check_client_data(rp, data, challenge, "webauthn.get")
    response = data.get("response")
    try:
        raw = base64url_to_bytes(response["authenticatorData"])  # type: ignore[index]
        auth_data = parse_authenticator_data(raw)
    except Exception:  # the library raises several types for a malformed structure
        raise PasskeyRefused("malformed", "the passkey's answer is malformed") from None
    if auth_data.rp_id_hash != hashlib.sha256(rp.id.encode()).digest():
        raise PasskeyRefused(
            "wrong_rp_id",
            f"the passkey signed for another site than {rp.id} (the relying party id does not "
            "match)",
        )
    if (auth_data.sign_count or sign_count) and auth_data.sign_count <= sign_count:
        raise PasskeyRefused(
            "counter_backwards",
            f"the passkey's signature counter did not move forward ({auth_data.sign_count} "
            f"after {sign_count}): this may be a copy of the authenticator, or a replayed "
            "answer; nothing was recorded",
        )
    try:
        verified = verify_authentication_response(
            credential=data,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
            credential_public_key=public_key,
            credential_current_sign_count=sign_count,
            require_user_verification=True,
        )
    except WebAuthnException as exc:
        raise PasskeyRefused(
            "not_verified", f"the passkey's answer did not check out: {exc}"
        ) from None
    return int(verified.new_sign_count)


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise PasskeyRefused("malformed", "the passkey's answer is not the JSON a browser sends")
    return data


def _check_client_data(rp: RelyingParty, data: dict[str, Any], challenge: bytes, kind: str) -> None:
    """What the browser said it signed, checked first so each refusal says what is wrong."""
    from webauthn.helpers import base64url_to_bytes, parse_client_data_json

    response = data.get("response")
    try:
        raw = base64url_to_bytes(response["clientDataJSON"])  # type: ignore[index]
        client = parse_client_data_json(raw)
    except Exception:  # a missing field, bad base64, bad JSON: all "malformed"
        raise PasskeyRefused("malformed", "the passkey's answer is malformed") from None
    if client.type != kind:
        raise PasskeyRefused("malformed", f"the passkey's answer is a {client.type}, not {kind}")
    if client.origin != rp.origin:
        raise PasskeyRefused(
            "wrong_origin",
            f"the passkey was asked by {client.origin}, not by gate at {rp.origin}",
        )
    if client.challenge != challenge:
        raise PasskeyRefused(
            "wrong_challenge",
            "the passkey signed another challenge than the one gate issued for this request "
            "and these arguments (another request's, or an older one): ask your passkey again",
        )
