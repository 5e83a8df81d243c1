"""Verifying a Feishu callback on its raw bytes, before anything reads it.

A callback is anyone's bytes until checked: the signature (a plain hash of timestamp, nonce,
secret and body) and its timestamp window are checked on the raw body, then the body is
parsed and, when encrypted, decrypted with the Encrypt Key. Every failure is the one error
body with a precise code (`bad_signature`, `stale_request`, `undecryptable`, ...), never a
500.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from channels.feishu.settings import FeishuSettings
from channels.inbound import NestedTooDeep, load_json, same_secret
from gate.base.errors import BadRequest, Unauthenticated

#: Feishu documents no replay window; five minutes is the Slack convention and ours
TIMESTAMP_WINDOW_SECONDS = 300
#: "v2": signed with the Encrypt Key; "legacy": an old message-card callback signed with the
#: verification token; None: unsigned (only accepted when no Encrypt Key is set)
Signed = Literal["v2", "legacy"] | None


def decrypt(encrypt_key: str, data: str) -> bytes:
    """AES-256-CBC with key sha256(encrypt_key) and the IV in front; ValueError if broken."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if len(raw) < 32 or len(raw) % 16:
        raise ValueError("not a whole number of AES blocks")
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def signature(timestamp: str, nonce: str, secret: str, body: bytes, algo: str = "sha256") -> str:
    """Feishu's callback signature: a plain hash (not an HMAC) of ts+nonce+secret+body."""
    return hashlib.new(algo, (timestamp + nonce + secret).encode() + body).hexdigest()


@dataclass(frozen=True)
class Callback:
    """A callback that passed the signature check, parsed and decrypted."""

    payload: dict[str, Any]
    signed: Signed


class Verifier:
    """Checks callbacks against `[channels.feishu]`'s verification token and Encrypt Key."""

    def __init__(self, settings: FeishuSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        #: seconds since the epoch, for the timestamp window
        self.clock = clock

    def open(self, headers: Mapping[str, str], body: bytes) -> Callback:
        """Check the signature on the raw bytes, then parse and decrypt."""
        if self.settings.verification_token is None:
            raise Unauthenticated("Feishu callbacks are not configured", code="not_configured")
        signed = self._signed(headers, body) if headers.get("x-lark-signature") else None
        payload = json_object(body, "body", code="bad_callback")
        if "encrypt" in payload:
            key = self._encrypt_key()
            if key is None:
                raise BadRequest("encrypted body but no encrypt_key is set", code="undecryptable")
            try:
                plain = decrypt(key, str(payload["encrypt"]))
            except ValueError:
                raise BadRequest(
                    "body could not be decrypted with the configured encrypt_key",
                    code="undecryptable",
                ) from None
            payload = json_object(plain, "decrypted body", code="undecryptable")
        return Callback(payload, signed)

    def check_token(self, sent: object) -> None:
        """The verification token a payload carries must be ours (401 otherwise)."""
        assert self.settings.verification_token is not None
        expected = self.settings.verification_token.get_secret_value()
        if not isinstance(sent, str) or not same_secret(sent, expected):
            raise Unauthenticated("verification token does not match", code="bad_token")

    def _encrypt_key(self) -> str | None:
        key = self.settings.encrypt_key
        return key.get_secret_value() if key is not None else None

    def _signed(self, headers: Mapping[str, str], body: bytes) -> Signed:
        """Which secret signed this body; 401 for a bad, stale or refused signature."""
        assert self.settings.verification_token is not None
        key, token = self._encrypt_key(), self.settings.verification_token.get_secret_value()
        sent = headers.get("x-lark-signature", "")
        ts = headers.get("x-lark-request-timestamp", "")
        nonce = headers.get("x-lark-request-nonce", "")
        # isdigit() alone accepts "²" (a latin-1 header byte), which int() refuses.
        if not (ts.isascii() and ts.isdigit() and len(ts) <= 12):
            raise Unauthenticated("missing or malformed timestamp", code="bad_signature")
        if abs(self.clock() - int(ts)) > TIMESTAMP_WINDOW_SECONDS:
            raise Unauthenticated("timestamp outside the 300 s window", code="stale_request")
        # Compared as bytes: a non-ASCII header is a mismatch, not a TypeError.
        if key and same_secret(sent, signature(ts, nonce, key, body)):
            return "v2"
        if not same_secret(sent, signature(ts, nonce, token, body, "sha1")):
            raise Unauthenticated("signature does not match", code="bad_signature")
        if key:
            # The old callback is signed with the verification token alone, which unencrypted
            # events carry in clear: with an Encrypt Key configured, only callbacks signed
            # with that key are trusted.
            raise Unauthenticated(
                "legacy card callbacks (signed with the verification token) are "
                "refused when an encrypt_key is set; use card.action.trigger",
                code="legacy_callback_refused",
            )
        return "legacy"  # old message-card callbacks sign with the verification token


def json_object(raw: bytes, what: str, *, code: str) -> dict[str, Any]:
    """The JSON object in `raw`; 400 (never a 500) for anything else, deep nesting included."""
    try:
        payload = load_json(raw)
    except ValueError as exc:
        reason = "nested too deeply" if isinstance(exc, NestedTooDeep) else "not JSON"
        raise BadRequest(f"{what} is {reason}", code=code) from None
    if not isinstance(payload, dict):
        raise BadRequest(f"{what} is not a JSON object", code=code)
    return payload
