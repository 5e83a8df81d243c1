"""Gate's Telegram button and code format, written again from its description (README, the
docstring of `channels/telegram/tokens.py`) for tests that must not import the channel.

A driver uses it to read which request and action a card's button is for, and to mint the
buttons a crafted client could send (a grant longer than the rule allows, a preset reason
the rule does not have); the channel's own code must agree with it byte for byte.
"""

from __future__ import annotations

import base64
import struct
from datetime import UTC, datetime

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from ulid import ULID

LABEL = b"gate/telegram/button/v1"
KINDS = {
    "approve": b"a", "grant": b"g", "reject": b"r", "reason": b"p", "edit": b"e", "extend": b"x",
    "acknowledge": b"k",
}  # fmt: skip
SCOPES = ("call", "session", "agent", "pattern")  # as channels/telegram/tokens.py numbers them


def _derive(secret: str, info: bytes, length: int) -> bytes:
    kdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info)
    return kdf.derive(secret.encode())


def mint(
    secret: str,
    request_id: str,
    kind: str,
    *,
    grant: tuple[str, int] | None = None,
    reason: int | None = None,
    shown: datetime | None = None,
) -> str:
    """callback_data for a button, sealed as gate seals it."""
    plain = ULID.from_str(request_id).bytes + KINDS[kind]
    if grant is not None:
        plain += struct.pack(">BI", SCOPES.index(grant[0]), grant[1])
    if reason is not None:
        plain += bytes([reason])
    if shown is not None:
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        delta = shown - epoch
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        plain += struct.pack(">q", micros)
    sealed = AESSIV(_derive(secret, b"gate/telegram/button", 64)).encrypt(plain, [LABEL])
    return base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def read(secret: str, data: str) -> tuple[str, str]:
    """(request id, kind) of a button gate sealed; raises if it did not."""
    sealed = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    plain = AESSIV(_derive(secret, b"gate/telegram/button", 64)).decrypt(sealed, [LABEL])
    kind = next(k for k, v in KINDS.items() if v == plain[16:17])
    return str(ULID.from_bytes(plain[:16])), kind


def code(secret: str, request_id: str) -> str:
    """The code a card shows for typed commands."""
    cipher = Cipher(algorithms.AES(_derive(secret, b"gate/telegram/code", 32)), modes.ECB())
    encryptor = cipher.encryptor()
    block = encryptor.update(ULID.from_str(request_id).bytes) + encryptor.finalize()
    return base64.b32encode(block).decode().rstrip("=").lower()
