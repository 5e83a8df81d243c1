"""RSA keys for the fakes (Teams' Bot Framework, an OpenID provider), made once per process.

Generating an RSA-2048 key costs 50-100 ms of CPU; the fakes made one or more per test. Here
the n-th key of a purpose is made on first use and the same key from then on, in this test
process. What the fakes need of their keys still holds: a fake's keys are distinct from each
other (key 0 signs, key 1 is the forger's that was never published, key 2 the rotation's),
and each test has its own fake and its own gate, so a key shared across tests lets no test
see another's tokens.
"""

from __future__ import annotations

from functools import cache

from cryptography.hazmat.primitives.asymmetric import rsa


@cache
def rsa_key(purpose: str, n: int = 0) -> rsa.RSAPrivateKey:
    """The `n`-th RSA-2048 key for `purpose` ("teams", "oidc", ...) in this process."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)
