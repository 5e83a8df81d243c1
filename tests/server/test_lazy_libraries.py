"""The libraries of optional features load when the feature is used, not with every `gate`
process: each `gate serve`, `gate mcp` and CLI command imports the app, and the passkey stack
(webauthn, pyOpenSSL, X.509, ASN.1, CBOR) and the single sign-on stack (Authlib, joserfc)
were about a tenth of that import's CPU."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("webauthn", "OpenSSL", "cbor2", "pyasn1", "authlib", "joserfc")

PROBE = f"""
import json, sys
def loaded():
    return sorted({{m.split('.')[0] for m in sys.modules}} & set({OPTIONAL!r}))
import gate.app, gate.cli
at_start = loaded()
from gate.identity import passkeys
passkeys.assertion_options(passkeys.RelyingParty.of("https://gate.example"), b"c" * 32, [])
print(json.dumps([at_start, loaded()]))
"""


def test_optional_libraries_load_when_their_feature_is_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    at_start, after_a_passkey = json.loads(done.stdout)
    assert at_start == [], "importing gate loaded an optional feature's library"
    # the function that needs the library imports it (a server with passkeys or single
    # sign-on works end to end: tests/web/test_passkeys.py, tests/web/test_sso.py)
    assert {"webauthn", "OpenSSL"} <= set(after_a_passkey)
