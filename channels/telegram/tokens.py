"""What a card's buttons and its typed-command code carry, sealed so only gate can read them.

Telegram gives a button 1-64 bytes of `callback_data`, and sends them back verbatim when the
button is pressed: anyone who can reach the webhook can send any bytes there. The channel
cannot use the database, so the data must carry the request, the action and its small
arguments itself, unreadable and unforgeable:

* **callback data** is AES-SIV (RFC 5297, `cryptography`'s `AESSIV`) over `request id (16
  bytes of the ULID) | action | arguments`, with a fixed associated-data label, base64url
  without padding. SIV is authenticated encryption without a nonce: 16 bytes of overhead
  instead of GCM's 28, so the largest button (Extend, 25 bytes of plaintext) is 55
  characters, under the 64-byte limit. A changed or made-up value fails the tag and is
  refused; the request id never shows. Being deterministic, the same button on the same
  card seals to the same data, which tells nobody anything they cannot see on the card.
* **the code** shown on a card for `/approve <code>` is one AES-256 block over the 16 bytes of
  the request id (a keyed permutation), in base32: 26 characters. Every code maps back to
  one request id and only the key maps an id to its code, so the code of one request says
  nothing about any other's; a guessed code names a random id that is no request.

Both keys come from `[channels.telegram] callback_secret` through HKDF-SHA256, one per use.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from ulid import ULID

#: Telegram's limit on an inline button's callback_data
CALLBACK_DATA_BYTES = 64
#: the associated data every sealed button is bound to (a version, so a format change can
#: refuse old buttons cleanly)
LABEL = b"gate/telegram/button/v1"
#: the length of a request code (base32 of 16 bytes, no padding)
CODE_CHARS = 26
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

#: what a button asks for; `reject` and `edit` open a forced reply, `reason` is a preset,
#: `acknowledge` says "I'm on it" (`gate.decisions.acknowledging`)
Kind = Literal["approve", "grant", "reject", "reason", "edit", "extend", "acknowledge"]
_KIND_BYTE: dict[str, bytes] = {
    "approve": b"a",
    "grant": b"g",
    "reject": b"r",
    "reason": b"p",
    "edit": b"e",
    "extend": b"x",
    "acknowledge": b"k",
}
_BYTE_KIND: dict[bytes, Kind] = {v: k for k, v in _KIND_BYTE.items()}  # type: ignore[misc]
#: grant scopes by the byte that names them
SCOPES = ("call", "session", "agent", "pattern")  # new ones at the end: old buttons keep theirs


@dataclass(frozen=True)
class Button:
    """What one button on a card asks for."""

    request_id: str
    kind: Kind
    #: a grant: (scope, seconds)
    grant: tuple[str, int] | None = None
    #: a preset reject reason: its index among the rule's reasons
    reason: int | None = None
    #: Extend: the deadline the card showed
    shown: datetime | None = None


class NotOurs(ValueError):
    """Data that gate did not seal with this key (forged, altered, or another bot's)."""


def _key(secret: str, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(
        secret.encode()
    )


def _id_bytes(request_id: str) -> bytes:
    try:
        return ULID.from_str(request_id).bytes
    except ValueError as exc:
        raise ValueError(f"not a gate request id: {request_id[:40]!r}") from exc


class Sealer:
    """Seals and opens buttons' callback data and cards' codes with one secret."""

    def __init__(self, secret: str) -> None:
        # AES-SIV takes two AES-256 keys (64 bytes): one for the tag, one for the cipher.
        self._siv = AESSIV(_key(secret, b"gate/telegram/button", 64))
        self._code_key = _key(secret, b"gate/telegram/code", 32)

    # -- buttons --------------------------------------------------------------------------------

    def seal(self, button: Button) -> str:
        """The callback_data for `button` (at most 64 bytes)."""
        plain = _id_bytes(button.request_id) + _KIND_BYTE[button.kind] + _arguments(button)
        sealed = self._siv.encrypt(plain, [LABEL])
        data = base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()
        assert len(data) <= CALLBACK_DATA_BYTES, data
        return data

    def open(self, data: str) -> Button:
        """The button behind callback data; NotOurs if gate did not seal it with this key."""
        if not data or len(data) > CALLBACK_DATA_BYTES or not data.isascii():
            raise NotOurs("not a gate button")
        try:
            sealed = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
            # One spelling per button: base64's unused low bits must be zero, as we write them.
            if base64.urlsafe_b64encode(sealed).rstrip(b"=").decode() != data:
                raise ValueError("not canonical base64")
            plain = self._siv.decrypt(sealed, [LABEL])
        except (binascii.Error, ValueError, InvalidTag):
            raise NotOurs("not a gate button") from None
        if len(plain) < 17 or plain[16:17] not in _BYTE_KIND:
            raise NotOurs("not a gate button")  # sealed by us, so only a format change
        request_id = str(ULID.from_bytes(plain[:16]))
        return _button(request_id, _BYTE_KIND[plain[16:17]], plain[17:])

    # -- codes ----------------------------------------------------------------------------------

    def code(self, request_id: str) -> str:
        """The code a person types after /approve or /reject for this request."""
        encryptor = Cipher(algorithms.AES(self._code_key), modes.ECB()).encryptor()
        block = encryptor.update(_id_bytes(request_id)) + encryptor.finalize()
        return base64.b32encode(block).rstrip(b"=").decode().lower()

    def request_of(self, code: str) -> str:
        """The request id behind a typed code; ValueError if it is not shaped like one."""
        text = code.strip().upper()
        if len(text) != CODE_CHARS or not text.isascii() or not text.isalnum():
            raise ValueError("a code is 26 letters and digits, as the card shows it")
        try:
            block = base64.b32decode(text + "======")
        except (binascii.Error, ValueError):
            raise ValueError("a code is 26 letters and digits, as the card shows it") from None
        decryptor = Cipher(algorithms.AES(self._code_key), modes.ECB()).decryptor()
        return str(ULID.from_bytes(decryptor.update(block) + decryptor.finalize()))


def _arguments(button: Button) -> bytes:
    if button.kind == "grant":
        assert button.grant is not None
        scope, seconds = button.grant
        return struct.pack(">BI", SCOPES.index(scope), seconds)
    if button.kind == "reason":
        assert button.reason is not None
        return struct.pack(">B", button.reason)
    if button.kind == "extend":
        assert button.shown is not None
        return struct.pack(">q", (button.shown - EPOCH) // MICROSECOND)
    return b""


def _button(request_id: str, kind: Kind, args: bytes) -> Button:
    try:
        if kind == "grant":
            scope, seconds = struct.unpack(">BI", args)
            return Button(request_id, kind, grant=(SCOPES[scope], seconds))
        if kind == "reason":
            return Button(request_id, kind, reason=struct.unpack(">B", args)[0])
        if kind == "extend":
            (micros,) = struct.unpack(">q", args)
            return Button(request_id, kind, shown=EPOCH + micros * MICROSECOND)
    except (struct.error, IndexError, OverflowError):
        raise NotOurs("not a gate button") from None
    if args:
        raise NotOurs("not a gate button")
    return Button(request_id, kind)
