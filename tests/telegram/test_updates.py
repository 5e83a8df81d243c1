"""Reading Updates (the captured shapes in fixtures/) and what a typed message says."""

from __future__ import annotations

import pytest

from channels.telegram.updates import (
    Command,
    Press,
    Typed,
    command,
    edit_lines,
    prompt_line,
    prompt_of,
    read_update,
)
from tests.support.fake_telegram import BOT_ID
from tests.telegram.conftest import fixture

CODE = "abcdefghijklmnopqrstuvwxyz"  # 26 characters, shaped like a code


def test_a_press_is_read_from_telegrams_shape() -> None:
    update = fixture("update_callback_query.json")
    update["callback_query"]["data"] = "sealed"
    assert read_update(update, BOT_ID) == Press(
        "3840023343991832218", "894075106", "sealed", -1001234567890, 4242
    )
    # A press on an inline-mode message has no chat or message: still a press, to be answered.
    inline = read_update(fixture("update_inline_message_callback.json"), BOT_ID)
    assert isinstance(inline, Press) and inline.chat_id is None and inline.message_id is None


def test_a_reply_to_the_bot_carries_the_bots_text() -> None:
    update = fixture("update_message_reply.json")
    update["message"]["reply_to_message"]["text"] = prompt_line("reject", CODE)
    typed = read_update(update, BOT_ID)
    assert isinstance(typed, Typed) and typed.user_id == "714862471"
    assert typed.replying_to is not None and prompt_of(typed.replying_to) == ("reject", CODE)
    # The same reply to someone else's message is plain chat.
    update["message"]["reply_to_message"]["from"]["id"] = 5
    typed = read_update(update, BOT_ID)
    assert isinstance(typed, Typed) and typed.replying_to is None


@pytest.mark.parametrize(
    "update",
    [
        fixture("update_anonymous_admin.json"),  # a bot standing in for an admin
        {"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1}, "text": "/approve x"}},
        {"update_id": 1, "callback_query": {"id": "1", "from": {"id": "7", "is_bot": False}}},
        {"update_id": 1, "callback_query": {"id": "1", "from": {"id": True, "is_bot": False}}},
        {"update_id": 1, "channel_post": {"message_id": 1, "text": "/approve x"}},
        {"update_id": 1, "message": "not an object"},
    ],
)
def test_what_is_no_person_asking_is_nothing(update: dict[str, object]) -> None:
    assert read_update(update, BOT_ID) is None


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (f"/approve {CODE}", Command("approve", CODE, "")),
        (f"/approve@gate_test_bot {CODE} fine by me", Command("approve", CODE, "fine by me")),
        (f"/approve@GATE_TEST_BOT\n{CODE}", Command("approve", CODE, "")),
        (f"/reject {CODE} too much\nsplit it", Command("reject", CODE, "too much\nsplit it")),
        (f"/approve@other_bot {CODE}", None),
        (f"/approved {CODE}", None),
        (f"/APPROVE {CODE}", None),
        (f"please /approve {CODE}", None),
        ("hello", None),
    ],
)
def test_commands(text: str, found: Command | None) -> None:
    assert command(text, "gate_test_bot") == found


def test_a_command_without_a_code_gets_a_hint() -> None:
    assert "followed by the code" in str(command("/reject", "gate_test_bot"))
    assert "your reason" in str(command("/reject@gate_test_bot", None))


def test_prompts_are_recognised_by_their_first_line_only() -> None:
    assert prompt_of(prompt_line("edit", CODE) + "\nReply ...") == ("edit", CODE)
    for text in [
        f"Approval needed: Reject request {CODE}",
        f"Reject request {CODE}x",
        f"Reject request {CODE[:-1]}",
        f" \nReject request {CODE}",
    ]:
        assert prompt_of(text) is None


def test_edit_lines() -> None:
    texts, problems = edit_lines('amount = 500\n\ncurrency= "USD"\nnote = a = b\njust words\n= 3')
    assert texts == {"amount": "500", "currency": '"USD"', "note": "a = b"}
    assert problems == ["just words", "= 3"]
