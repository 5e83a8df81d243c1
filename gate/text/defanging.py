"""Link-shaped text defanged, the way security mail does it (beside `gate.text.untrusted`, like
`gate.text.glyphs`: that module is at its size limit).

Mail clients (and some chat apps) turn text that looks like a link into one, in plain text
and in HTML alike, and escaping cannot stop that: `https://evil.example`, `www.evil.example`,
and a bare `approve-now.com/confirm` or the host of `pay@evil.example`. Text an agent wrote
must carry no link, so each of those is written so no client follows it:
`https[:]//evil[.]example`, `approve-now[.]com/confirm`. RE2, like every scan of untrusted text.
"""

from __future__ import annotations

from typing import Any

import re2

#: a character beyond ASCII that is not a dot (any script's letters, taken as letters: the
#: Unicode classes `\pL` and `\pN` make a program too big for RE2's fast matcher)
_WIDE = r"[^\x00-\x7F\x{FF0E}\x{3002}\x{FF61}]"
#: one label of a host name: letters, digits and hyphens
_LABEL = rf"(?:[a-z0-9]|{_WIDE})(?:[a-z0-9-]|{_WIDE})*"
#: a dot as a host name reads it: IDNA also takes the full-width and ideographic ones
_DOT = r"[.\x{FF0E}\x{3002}\x{FF61}]"
#: what a mail client (or a chat app) turns into a link: a scheme's `://`, a host name
#: whose last label could be a top-level domain (`approve-now.com/confirm`, `www.evil.example`,
#: the host in `user@evil.example`, `пример.рф`), an IPv4 address. Without a list of the real
#: top-level domains, any last label of two letters or more counts (`config.json` too): a
#: name read as a link costs less than a link
#: (over UTF-8 bytes, RE2's own form: a match costs no offset translation, as in `_mask_scanned`)
_LINKISH: Any = re2.compile(
    (
        r"(?i)[a-z][a-z0-9+.\-]*://"
        rf"|{_LABEL}(?:{_DOT}{_LABEL})*{_DOT}(?:[a-z]|{_WIDE})(?:[a-z]|{_WIDE})+"
        r"|\b\d+(?:[.]\d+){3}\b"
    ).encode()
)
#: the dots `_DOT` names, bracketed
_DEFANGED_DOTS = [(dot.encode(), f"[{dot}]".encode()) for dot in ".\uff0e\u3002\uff61"]


def defang(text: str) -> str:
    """Text with nothing a mail client would make a link of, defanged the way security mail
    does it: `https[:]//evil[.]example`, `approve-now[.]com/confirm`, `10[.]0[.]0[.]1`.
    Nothing else changes (the text is not cleaned, masked or cut)."""
    data = text.encode("utf-8", "surrogatepass")
    return str(_LINKISH.sub(_defanged, data).decode("utf-8", "surrogatepass"))


def _defanged(match: Any) -> bytes:
    # no capturing groups in _LINKISH: RE2 then finds matches without its slower engines
    found = bytes(match.group(0))
    scheme = found.endswith(b"://")
    if scheme:
        found = found[:-3]
    for dot, bracketed in _DEFANGED_DOTS:
        found = found.replace(dot, bracketed)
    return found + b"[:]//" if scheme else found
