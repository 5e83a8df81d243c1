"""The TLS context gate's own HTTP clients verify servers with, made once per process.

httpx makes a context for every client built without one, reading the whole CA bundle each
time (15-50 ms of CPU and about a megabyte of memory, measured 2026-11-27); gate builds a
client per channel, per webhook sender and per identity provider fetch. They all verify the
same way, httpx's default (certifi's CAs, or the bundle `SSL_CERT_FILE` or `SSL_CERT_DIR`
names), so one context serves them all. An `ssl.SSLContext` is safe to share between clients
and threads.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def verifying_context() -> ssl.SSLContext:
    """httpx's default verifying context, made on first use and shared from then on."""
    return httpx.create_ssl_context()
