"""Mail carries decision links only to someone who may decide, and no link an agent wrote."""

from __future__ import annotations

import re

import pytest

from tests.conftest import Gate
from tests.email.conftest import ADDRESSES, ask, links, wait_mail
from tests.support.fake_smtp import FakeSMTP


@pytest.mark.parametrize("user_id", ["ALICE@EXAMPLE.COM", "Alice@Example.com", " alice "])
def test_the_requester_under_another_spelling_gets_no_links(
    email_gate: Gate, smtp: FakeSMTP, user_id: str
) -> None:
    # gate compares who asked with who decides case-, width- and space-blind: the mail must
    # too, or alice gets links that could only be refused (and she could forward them)
    request_id = ask(email_gate, user_id=user_id)
    mine = wait_mail(smtp, request_id, ADDRESSES["alice"])
    assert links(mine) == {}
    assert "approve" in links(wait_mail(smtp, request_id, ADDRESSES["bob"]))


#: what a mail client would make a link of, in text gate did not write (an independent check:
#: a host name ending in a real top-level domain, or a scheme's ://)
LINKABLE = re.compile(r"(?i)\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|net|io|org|example)\b|://")


def test_bare_domains_and_addresses_from_the_agent_are_defanged(
    email_gate: Gate, smtp: FakeSMTP
) -> None:
    summary = "Confirm at approve-now.com/confirm or write to billing@pay-desk.net"
    args = {"memo": "Log in at login.microsoftonline.com.evil.io/x, then 10.0.0.1/admin"}
    request_id = ask(email_gate, args=args, summary=summary, agent_id="bot.evil.org")
    mail = wait_mail(smtp, request_id, ADDRESSES["bob"])
    for text in (mail.part("plain"), mail.part("html")):
        theirs = text
        for url in links(mail).values():  # gate's own links stay links
            theirs = theirs.replace(url, "").replace(url.replace("&", "&amp;"), "")
        theirs = theirs.replace("http://127.0.0.1:8000/", "")  # the request's page in gate
        theirs = theirs.replace(ADDRESSES["bob"], "")  # gate's own words to bob
        assert LINKABLE.findall(theirs) == [], theirs
        assert "approve-now[.]com/confirm" in text
        assert "billing@pay-desk[.]net" in text
        assert "login[.]microsoftonline[.]com[.]evil[.]io/x" in text
        assert "10[.]0[.]0[.]1/admin" in text
    # the subject is gate's headline of the call (the agent's summary never reaches a header),
    # defanged like the body
    subject = str(mail.message["Subject"])
    assert "login[.]microsoftonline[.]com" in subject and "approve-now" not in subject
