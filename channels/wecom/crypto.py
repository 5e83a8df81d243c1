"""WeCom's callback cryptography (the WXBizMsgCrypt scheme), on bytes, with no I/O.

* signature: SHA1 of the sorted concatenation of token, timestamp, nonce and the encrypted
  text (a plain hash, not an HMAC), as lower-case hex;
* encryption: AES-256-CBC, key = base64-decode(EncodingAESKey + "="), IV = the key's first
  16 bytes, PKCS#7 padding to 32-byte blocks; the plaintext is 16 random bytes, the
  message's length (4 bytes, network order), the message, and the receive id (the CorpID).

Only the receiving half lives here: gate answers callbacks with an empty body, never an
encrypted passive reply. The test fake encrypts with its own code.

Checked against the vectors of Tencent's reference implementation
(tests/wecom/fixtures/SOURCES.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

#: WeCom pads to 32-byte blocks (PKCS#7 with a 256-bit block), not AES's 16
BLOCK_BITS = 256


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    """`msg_signature`: sha1 of the four strings sorted and joined, as hex."""
    joined = "".join(sorted([token, timestamp, nonce, encrypted]))
    return hashlib.sha1(joined.encode("utf-8", "surrogatepass")).hexdigest()


def decrypt(key: bytes, encrypted: str, receive_id: str) -> bytes:
    """The message inside `encrypted`; ValueError when it is broken or for another receiver."""
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if not raw or len(raw) % 32:
        raise ValueError("not a whole number of 32-byte blocks")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(raw) + decryptor.finalize()
    unpadder = padding.PKCS7(BLOCK_BITS).unpadder()
    plain = unpadder.update(padded) + unpadder.finalize()
    if len(plain) < 20:
        raise ValueError("too short to hold a message")
    (length,) = struct.unpack(">I", plain[16:20])
    if 20 + length > len(plain):
        raise ValueError("the length field points past the end")
    message, sender = plain[20 : 20 + length], plain[20 + length :]
    # The receive id is not secret, but a message for another company is not for us.
    if sender != receive_id.encode():
        raise ValueError("encrypted for another receive id")
    return message
