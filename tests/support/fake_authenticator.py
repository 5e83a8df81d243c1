"""A WebAuthn authenticator emulated in the tests: an EC P-256 key (`cryptography`) that
answers `navigator.credentials.create` with a 'none' attestation and `.get` with assertions,
built byte by byte as the specification lays them out (authenticatorData, clientDataJSON,
the signature over both), and serialised the way a browser's script sends them to gate.

Each answer can be made wrong on purpose: another origin, another RP id, a counter that
does not move forward, another challenge.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

#: authenticatorData flags: user present, user verified, attested credential data included
UP, UV, AT = 0x01, 0x04, 0x40


def b64url(data: bytes) -> str:
    """Base64url without padding, as WebAuthn's JSON spells bytes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    """The bytes of a base64url string (padding optional)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Authenticator:
    """One credential on one authenticator, for the relying party `rp_id` at `origin`."""

    rp_id: str
    origin: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: os.urandom(32))
    sign_count: int = 0
    #: flags every answer carries (user present and verified unless a test says otherwise)
    flags: int = UP | UV

    @property
    def id(self) -> str:
        """The credential id as gate stores it."""
        return b64url(self.credential_id)

    def _cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return bytes(
            cbor2.dumps(
                {
                    1: 2,  # kty: EC2
                    3: -7,  # alg: ES256
                    -1: 1,  # crv: P-256
                    -2: numbers.x.to_bytes(32, "big"),
                    -3: numbers.y.to_bytes(32, "big"),
                }
            )
        )

    def _client_data(self, kind: str, challenge: str, origin: str | None) -> bytes:
        data = {"type": kind, "challenge": challenge, "origin": origin or self.origin}
        return json.dumps({**data, "crossOrigin": False}).encode()

    def create(self, options: dict[str, Any], *, origin: str | None = None) -> str:
        """Answer a registration's `publicKey` options: the credential JSON a browser sends."""
        client = self._client_data("webauthn.create", options["challenge"], origin)
        attested = (
            bytes(16)  # AAGUID: none (attestation 'none')
            + struct.pack(">H", len(self.credential_id))
            + self.credential_id
            + self._cose_key()
        )
        auth_data = (
            hashlib.sha256(self.rp_id.encode()).digest()
            + bytes([self.flags | AT])
            + struct.pack(">I", self.sign_count)
            + attested
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return json.dumps(
            {
                "id": self.id,
                "rawId": self.id,
                "type": "public-key",
                "response": {
                    "clientDataJSON": b64url(client),
                    "attestationObject": b64url(bytes(attestation)),
                    "transports": ["usb"],
                },
                "clientExtensionResults": {},
            }
        )

    def get(
        self,
        options: dict[str, Any],
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        count: int | None = None,
        challenge: str | None = None,
    ) -> str:
        """Answer an authentication's `publicKey` options: the assertion JSON a browser
        sends. `count` sets the signature counter (else it moves one forward)."""
        self.sign_count = self.sign_count + 1 if count is None else count
        client = self._client_data("webauthn.get", challenge or options["challenge"], origin)
        auth_data = (
            hashlib.sha256((rp_id or self.rp_id).encode()).digest()
            + bytes([self.flags])
            + struct.pack(">I", self.sign_count)
        )
        signed = auth_data + hashlib.sha256(client).digest()
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return json.dumps(
            {
                "id": self.id,
                "rawId": self.id,
                "type": "public-key",
                "response": {
                    "clientDataJSON": b64url(client),
                    "authenticatorData": b64url(auth_data),
                    "signature": b64url(signature),
                },
                "clientExtensionResults": {},
            }
        )
