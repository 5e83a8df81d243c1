"""Verifying a WeCom callback before anything reads it, then reading it safely.

WeCom signs the *encrypted* text, not the body: `msg_signature` (a query parameter) is the
SHA1 of token, `timestamp`, `nonce` and the `<Encrypt>` value. So the encrypted value is
located on the raw bytes with one linear-time pattern (RE2), no XML parser touches a byte
before the signature and the timestamp window pass, and only the decrypted, authenticated
message is parsed, refusing any DTD or entity declaration. Every failure is the one error
body with a precise code, never a 500.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from channels.inbound import same_secret
from channels.wecom import crypto
from channels.wecom.settings import WeComSettings, aes_key
from gate.base.errors import BadRequest, Unauthenticated
from gate.text import untrusted

#: WeCom documents no replay window; five minutes is the Slack convention and ours
TIMESTAMP_WINDOW_SECONDS = 300
#: a click or a typed message is well under 4 KB; nothing legitimate comes near this
MAX_BODY = 64 * 1024
#: the random string a URL check's echostr hides (a number of about 19 digits in the docs)
MAX_ECHO = 128
#: the encrypted value: base64 only, with or without a CDATA wrapper
_ENCRYPT = untrusted.compile(r"<Encrypt>(?:<!\[CDATA\[)?([A-Za-z0-9+/=]+)(?:\]\]>)?</Encrypt>")
#: the one "<!" construct WeCom's XML uses; any other (DOCTYPE, ENTITY, comment) is refused
CDATA = "<![CDATA["


@dataclass(frozen=True)
class Message:
    """A decrypted callback's fields (the ones gate reads), as WeCom sent them."""

    to_user: str
    from_user: str
    create_time: str
    msg_type: str
    event: str = ""
    event_key: str = ""
    task_id: str = ""
    card_type: str = ""
    response_code: str = ""
    content: str = ""
    msg_id: str = ""
    agent_id: str = ""
    #: a card's picked options: question key -> option ids
    selected: dict[str, tuple[str, ...]] = field(default_factory=dict)


class Verifier:
    """Checks callbacks against `[channels.wecom]`'s token, EncodingAESKey and CorpID."""

    def __init__(self, settings: WeComSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        #: seconds since the epoch, for the timestamp window
        self.clock = clock

    def echo(self, query: Mapping[str, str]) -> bytes:
        """URL verification (the GET): the decrypted `echostr`, once its signature checks."""
        echostr = query.get("echostr", "")
        self._check(query, echostr)
        echo = self._decrypt(echostr)
        # WeCom's echostr hides a random number. A callback's <Encrypt> is signed the same
        # way, so without this check anyone who saw a callback go by (they may travel over
        # plain HTTP: that is why they are encrypted) could replay it here inside the window
        # and read its plaintext back.
        if not (0 < len(echo) <= MAX_ECHO and echo.isalnum()):
            raise BadRequest("echostr does not hold a URL check", code="bad_echostr")
        return echo

    def open(self, query: Mapping[str, str], body: bytes) -> Message:
        """A POSTed callback: signature and window on the raw bytes, then decrypt and parse."""
        found = _ENCRYPT.search(body.decode("latin-1")) if len(body) <= MAX_BODY else None
        # Bytes without an encrypted value cannot carry a valid signature: 401 like any other
        # unsigned body, so nobody learns how far a forgery got.
        encrypted = str(found.group(1)) if found is not None else ""
        self._check(query, encrypted)
        return read_message(self._decrypt(encrypted))

    def _secrets(self) -> tuple[str, bytes, str]:
        s = self.settings
        if s.token is None or s.encoding_aes_key is None or not s.corp_id:
            raise Unauthenticated("WeCom callbacks are not configured", code="not_configured")
        return s.token.get_secret_value(), aes_key(s.encoding_aes_key.get_secret_value()), s.corp_id

    def _check(self, query: Mapping[str, str], encrypted: str) -> None:
        token, _, _ = self._secrets()
        sent = query.get("msg_signature", "")
        ts, nonce = query.get("timestamp", ""), query.get("nonce", "")
        if not encrypted:
            raise Unauthenticated("no encrypted message to check", code="bad_signature")
        # isdigit() alone accepts "²", which int() refuses.
        if not (ts.isascii() and ts.isdigit() and len(ts) <= 12):
            raise Unauthenticated("missing or malformed timestamp", code="bad_signature")
        if not same_secret(sent, crypto.signature(token, ts, nonce, encrypted)):
            raise Unauthenticated("signature does not match", code="bad_signature")
        if abs(self.clock() - int(ts)) > TIMESTAMP_WINDOW_SECONDS:
            raise Unauthenticated("timestamp outside the 300 s window", code="stale_request")

    def _decrypt(self, encrypted: str) -> bytes:
        _, key, corp_id = self._secrets()
        try:
            return crypto.decrypt(key, encrypted, corp_id)
        except ValueError as exc:
            # Signed with our token but not decryptable with our key (or for another
            # company): a misconfiguration, not a forgery.
            why = f"callback could not be decrypted: {exc}"
            raise BadRequest(why, code="undecryptable") from None


def read_message(raw: bytes) -> Message:
    """The fields of a decrypted callback; 400 for anything that is not one."""
    text = raw.decode("utf-8", "replace")
    if declares(text):
        raise BadRequest("callback XML may not declare a DTD or entities", code="bad_callback")
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        raise BadRequest("callback is not XML", code="bad_callback") from None
    if root.tag != "xml":
        raise BadRequest("callback is not a WeCom message", code="bad_callback")

    def value(name: str) -> str:
        found = root.find(name)
        return (found.text or "").strip() if found is not None else ""

    selected: dict[str, tuple[str, ...]] = {}
    for item in root.iterfind("SelectedItems/SelectedItem"):
        key = (item.findtext("QuestionKey") or "").strip()
        ids = tuple((o.text or "").strip() for o in item.iterfind("OptionIds/OptionId"))
        if key:
            selected[key] = ids
    message = Message(
        to_user=value("ToUserName"),
        from_user=value("FromUserName"),
        create_time=value("CreateTime"),
        msg_type=value("MsgType"),
        event=value("Event"),
        event_key=value("EventKey"),
        task_id=value("TaskId"),
        card_type=value("CardType"),
        response_code=value("ResponseCode"),
        content=(root.findtext("Content") or ""),
        msg_id=value("MsgId"),
        agent_id=value("AgentID"),
        selected=selected,
    )
    if not message.from_user or not message.msg_type:
        raise BadRequest("callback names no sender or type", code="bad_callback")
    return message


def declares(text: str) -> bool:
    """Whether `text` has a "<!" that does not open a CDATA section (a DTD, an entity).

    Refused outright, so no entity is ever expanded; one pass, linear in the text.
    """
    at = text.find("<!")
    while at != -1:
        if not text.startswith(CDATA, at):
            return True
        at = text.find("<!", at + len(CDATA))
    return False
