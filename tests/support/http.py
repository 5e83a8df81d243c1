"""One TLS context for every HTTP client the tests make.

An `httpx.Client()` built without one reads the whole CA bundle (15-50 ms of CPU each); the
suite builds thousands of clients, nearly all for plain HTTP to loopback. Passing this shared,
default (verifying) context costs nothing per client.
"""

from __future__ import annotations

import ssl

#: `verify=TLS` on every httpx client and request helper in tests/
TLS = ssl.create_default_context()
