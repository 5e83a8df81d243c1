"""An SMTP server that fails part-way through a card's mails: the outbox retries the
delivery, and the retry mails only those who did not get the card, never anyone twice."""

from __future__ import annotations

import time

import pytest

from tests.conftest import Gate
from tests.email.conftest import ADDRESSES, ask, mails, wait_mail
from tests.email.test_email_delivery import deliveries, post_of
from tests.support.fake_smtp import FakeSMTP
from tests.support.servers import wait_until


def _order(gate: Gate, smtp: FakeSMTP) -> list[str]:
    """The addresses a card goes to, in the order gate mails them."""
    request_id = ask(gate)
    wait_until(lambda: len(mails(smtp, request_id)) == 2)
    return [m.recipients[0] for m in mails(smtp, request_id)]


@pytest.mark.parametrize("failure", ["later recipient refused for now", "hung up after DATA"])
def test_a_card_is_not_mailed_twice_when_the_server_fails_part_way(
    email_gate: Gate, smtp: FakeSMTP, failure: str
) -> None:
    first, last = _order(email_gate, smtp)
    assert {first, last} == {ADDRESSES["alice"], ADDRESSES["bob"]}
    if failure == "hung up after DATA":
        smtp.hang_up_next = True  # the first mail is accepted, then the connection drops
    else:
        smtp.refuse(last, 451)  # the first mail is accepted, the second one must wait
    request_id = ask(email_gate)
    failed = wait_until(lambda: (d := deliveries(email_gate, request_id)[0]).last_error and d)
    assert failed.status == "pending"  # a temporary failure: retried
    assert [m.recipients[0] for m in mails(smtp, request_id)] == [first]
    smtp.refused.pop(last, None)

    wait_mail(smtp, request_id, last)
    post = post_of(email_gate, request_id, "sent")

    assert post.attempts >= 2 and post.message_ref == "pending:2"
    time.sleep(0.5)
    assert sorted(m.recipients[0] for m in mails(smtp, request_id)) == sorted([first, last])
    assert smtp.problems == []
