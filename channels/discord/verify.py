"""Verifying a Discord interaction on its raw bytes, before anything reads it.

Discord signs `timestamp + body` with the application's Ed25519 key and sends the signature
(hex) in `X-Signature-Ed25519` and the timestamp in `X-Signature-Timestamp`. The signature
proves Discord sent these bytes; the timestamp window (which the signature covers) keeps a
captured body from being replayed later. Every failure is the one 401 error body.
"""

from __future__ import annotations

from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gate.base.errors import Unauthenticated

#: Discord documents no window; five minutes either way is the Slack convention and ours
SIGNATURE_WINDOW_SECONDS = 300
#: an Ed25519 signature is 64 bytes, sent as 128 hex digits
SIGNATURE_HEX_LENGTH = 128


def public_key(hex_key: str) -> Ed25519PublicKey:
    """The application's public key from its 64 hex digits (as the Developer Portal shows it)."""
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key))


def verify_signature(
    key: Ed25519PublicKey, body: bytes, headers: Mapping[str, str], *, now: float
) -> None:
    """Check the Ed25519 signature over timestamp + raw body and the window; 401 otherwise.

    Header text of any shape (non-ASCII, absurdly long, not hex) is a refusal, never an
    exception.
    """
    timestamp = headers.get("x-signature-timestamp") or ""
    signature = headers.get("x-signature-ed25519") or ""
    # isdigit() alone accepts "²"; more than 12 digits is no Unix time gate will see.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise _refused("the Discord signature timestamp is missing or malformed")
    if abs(now - int(timestamp)) > SIGNATURE_WINDOW_SECONDS:
        raise _refused("the Discord signature is too old (or from the future)")
    if len(signature) != SIGNATURE_HEX_LENGTH or not signature.isascii():
        raise _refused("the Discord signature is missing or malformed")
    try:
        key.verify(bytes.fromhex(signature), timestamp.encode() + body)
    except (ValueError, InvalidSignature):
        raise _refused("the Discord signature does not match") from None


def _refused(message: str) -> Unauthenticated:
    return Unauthenticated(message, code="invalid_signature")
