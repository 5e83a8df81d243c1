"""gate's outbound HTTP clients share one verifying TLS context (gate.base.tls)."""

from __future__ import annotations

import ssl

import httpx

from gate.base.tls import verifying_context


def test_the_shared_context_verifies_as_httpx_would() -> None:
    shared = verifying_context()
    assert shared is verifying_context()  # made once per process
    default = httpx.create_ssl_context()
    assert shared.verify_mode is ssl.CERT_REQUIRED and shared.check_hostname
    assert shared.minimum_version == default.minimum_version
    # the same trusted roots as a client httpx builds by itself
    assert len(shared.get_ca_certs()) == len(default.get_ca_certs()) > 0
