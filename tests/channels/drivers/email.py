"""The email driver: cards are mails on `FakeSMTP`, clicks are the links in them, followed.

A "card" is the newest mail about the request to one recipient (the first one mailed): gate
cannot edit a sent mail, so an update is a new mail, and `updates` counts the mails after
the first. A "click" is what a person does with their mail: open their link (GET the
confirm page, which decides nothing) and submit the page's form (POST, with its CSRF
token). Someone who got no mail (a non-approver, a stranger) clicks a link crafted with the
right secret, as a stolen secret would allow: gate still refuses them. The link format
(itsdangerous' URL-safe timed serializer, HMAC-SHA256, the salt below) is built here from
the README's description, not imported from the channel.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from tests.channels.drivers.base import Answer, Card, Driver, Private, invisible, no_answer
from tests.support import fake_smtp
from tests.support.http import TLS
from tests.support.servers import wait_until

SECRET = "contract-suite-email-link-secret-0123456789"
SALT = "gate.channels.email.link"
CONFIRM = "/channels/email/confirm"
#: what the mail's markup may contain; anything else came from untrusted text
TAGS = {"html", "head", "meta", "title", "body", "h1", "h2", "table", "tr", "th", "td", "pre"}
TAGS |= {"p", "a", "strong", "em", "small", "br"}
HEADERS = {"subject", "from", "to", "date", "message-id", "in-reply-to", "references"}
HEADERS |= {"auto-submitted", "x-gate-request", "content-type", "mime-version"}
#: text a mail client would turn into a link
LINKISH = re.compile(r"(?i)[a-z][a-z0-9+.\-]*://[^\s<>\"]*|\bwww\.[^\s<>\"]*")


class Page(HTMLParser):
    """What the driver reads off a mail's HTML or the confirm page: links, the form, texts."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.links: list[str] = []
        self.texts: list[str] = []
        self.by_id: dict[str, str] = {}
        self.form_action: str | None = None
        self.hidden: dict[str, str] = {}
        self.boxes: dict[str, str] = {}  # textarea label text -> name
        self.checks: dict[str, str] = {}  # checkbox label text -> value
        self._open: list[str | None] = []
        self._label: str | None = None
        self._last_label: str | None = None
        self._pending_check: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if tag == "a":
            self.links.append(a.get("href", ""))
        if tag == "form":
            self.form_action = a.get("action")
        if tag == "input" and a.get("type") == "hidden":
            self.hidden[a.get("name", "")] = a.get("value", "")
        if tag == "input" and a.get("type") == "checkbox":
            self._pending_check = a.get("value", "")
        if tag == "textarea":
            self.boxes[self._last_label or a.get("name", "")] = a.get("name", "")
        if tag == "label":
            self._label = ""
        if tag not in ("meta", "input", "br", "link"):
            self._open.append(a.get("id"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label" and self._label is not None:
            if self._pending_check is not None:
                self.checks[self._label.strip()] = self._pending_check
            else:
                self._last_label = self._label.strip()
            self._label = self._pending_check = None
        if tag not in ("meta", "input", "br", "link") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._label is not None:
            self._label += data
        for element in self._open:
            if element:
                self.by_id[element] = self.by_id.get(element, "") + data

    @property
    def text(self) -> str:
        return " ".join(t.strip() for t in self.texts if t.strip())


class EmailDriver(Driver):
    """Email through `FakeSMTP` (STARTTLS and AUTH on loopback), links followed over HTTP."""

    name = "email"
    form_in_card = "the confirm page is the form, built by gate: a cut call's offers rejecting"
    args_chars = 4000
    CREDENTIALS = ("gate-sender", "contract-smtp-password")

    def start(self) -> None:
        self.fake = fake_smtp.FakeSMTP(credentials=self.CREDENTIALS, tls=True).start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": self.fake.port,
            "security": "starttls",
            "validate_certs": False,  # the fake's certificate is self-signed
            "username": self.CREDENTIALS[0],
            "password": self.CREDENTIALS[1],
            "sender": "gate <gate@example.test>",
            "link_secret": SECRET,
            "default_target": "approvers",
            "timeout": 5,
        }

    def user_id(self, person: str) -> str:
        return f"{person}@example.test"

    # -- cards --

    def mails(self, request_id: str, to: str | None = None) -> list[fake_smtp.Received]:
        """Every mail about the request (to one address), oldest first."""
        return self.fake.about(request_id, to)

    def card(self, request_id: str) -> Card:
        first = wait_until(lambda: self.mails(request_id))[0]
        mine = self.mails(request_id, first.to)
        newest = mine[-1]
        html = newest.part("html")
        plain = newest.part("plain")
        subject = str(newest.message["Subject"])
        offers = {parse_qs(urlsplit(u).query).get("do", [""])[0] for u in Page(html).links}
        raw = {"mail": newest, "html": html, "plain": plain, "subject": subject}
        text = "\n".join([subject, plain, html])
        return Card(text, len(mine) - 1, frozenset(offers - {""}), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # A mail is live where a client would act on it: a tag or link that is not the
        # template's, text a client turns into a link, a header untrusted text added.
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(own_url))
        page = Page(card.raw["html"])
        live = [f"<{t}>" for t in page.tags if t not in TAGS]
        live += [u for u in page.links if not u.startswith(origin)]
        for text in (card.raw["plain"], page.text, card.raw["subject"]):
            live += [u for u in LINKISH.findall(text) if not u.startswith(origin)]
        mail = card.raw["mail"].message
        live += [f"header {k}" for k in mail.keys() if k.lower() not in HEADERS]
        live += [c for c in ("\r", "\n") if c in card.raw["subject"]]
        return live + invisible(card.raw["plain"] + card.raw["html"] + card.raw["subject"])

    # -- clicks --

    def _token(self, request_id: str, person: str, *, secret: str = SECRET, age: float = 0) -> str:
        """A link token for `person`: from their mail when they got one, else crafted.

        A person clicks in a mail they have: wait for the card to be mailed first (the outbox
        sends it a moment after the request is made)."""
        wait_until(lambda: self.mails(request_id))
        if secret == SECRET and not age:
            for mail in reversed(self.mails(request_id, self.user_id(person))):
                for link in Page(mail.part("html")).links:
                    token = parse_qs(urlsplit(link).query).get("t")
                    if token:
                        return token[0]

        class Then(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(time.time() - age)

        return str(
            URLSafeTimedSerializer(
                secret, salt=SALT, signer=Then, signer_kwargs={"digest_method": hashlib.sha256}
            ).dumps({"r": request_id, "u": self.user_id(person), "n": "crafted"})
        )

    @staticmethod
    def _url(token: str, do: str) -> str:
        return f"{CONFIRM}?{urlencode({'t': token, 'do': do})}"

    def _open(self, gate_url: str, token: str, do: str) -> tuple[httpx.Response, Page]:
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            r = client.get(self._url(token, do), headers={"Accept": "text/html"})
        return r, Page(r.text)

    @staticmethod
    def _private(page: Page) -> Private:
        return Private(page.by_id.get("answer", "").strip(), page.by_id.get("acting-as", ""))

    def _form(
        self,
        page: Page,
        do: str,
        *,
        reason: str | None,
        reasons: Sequence[str],
        edits: dict[str, str] | None,
        grant: tuple[str, str] | None,
    ) -> list[tuple[str, str]]:
        """The page's form as a browser submits it, filled in as the person would (or as a
        crafted form would be, for controls the page does not show)."""
        fields = list(page.hidden.items())
        if do == "reject":
            fields.append(("reason", reason or ""))
            fields += [("reasons", page.checks.get(r, r)) for r in reasons]
        if do == "edit":
            for n, (label, text) in enumerate((edits or {}).items()):
                fields.append((page.boxes.get(label, f"e{n}"), text))
        if do == "grant" and grant is not None:
            fields.append(("grant", f"{grant[0]}:{grant[1]}"))
        return fields

    def click(
        self,
        gate_url: str,
        request_id: str,
        person: str,
        action: str,
        *,
        reason: str | None = None,
        reasons: Sequence[str] = (),
        edits: dict[str, str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> Answer:
        do = "grant" if grant is not None and action == "approve" else action
        token = self._token(request_id, person)
        r, page = self._open(gate_url, token, do)
        if "csrf" not in page.hidden:  # refused before a form was shown
            return Answer(r.status_code, lambda: self._private(page))
        form = self._form(page, do, reason=reason, reasons=reasons, edits=edits, grant=grant)
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            r = client.post(self._url(token, do), data=dict(form) | _multi(form))
        answered = Page(r.text)
        return Answer(r.status_code, lambda: self._private(answered))

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        body = {"csrf": "anything"}
        cases = {
            "wrong secret": self._token(request_id, person, secret="not-the-secret-" * 3),
            "garbage under a wrong secret": "\u00ff{not a token" * 10,
            "unsigned": "",
            "stale": self._token(request_id, person, age=30 * 86400),
        }
        answers = {}
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            for how, token in cases.items():
                answers[how] = client.post(self._url(token, "approve"), data=body)
                answers[f"{how} (opened)"] = client.get(self._url(token, "approve"))
        return answers

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        token = self._token(request_id, person)
        _, page = self._open(gate_url, token, action)
        if "csrf" not in page.hidden:
            return [Answer(0, no_answer("no form to replay"))]
        form = self._form(page, action, reason="replayed", reasons=(), edits=None, grant=None)
        answers = []
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            for _ in range(2):
                r = client.post(self._url(token, action), data=dict(form) | _multi(form))
                answered = Page(r.text)
                answers.append(Answer(r.status_code, lambda p=answered: self._private(p)))
        return answers

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        # The suite counts `platform_calls` to see the new card's post tried; an earlier
        # case's mail still on its way (an outcome, a refresh) would count too. Let what is
        # in flight land before the server goes down.
        quiet_since, seen = time.monotonic(), self.fake.attempts
        deadline = quiet_since + 10
        while time.monotonic() - quiet_since < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
            if self.fake.attempts != seen:
                quiet_since, seen = time.monotonic(), self.fake.attempts
        with self.fake.down(451):
            yield

    def platform_calls(self) -> int:
        return self.fake.attempts


def _multi(form: list[tuple[str, str]]) -> dict[str, Any]:
    """Fields given more than once (ticked reasons), as lists: httpx sends each value."""
    names = [name for name, _ in form]
    return {n: [v for k, v in form if k == n] for n in set(names) if names.count(n) > 1}
