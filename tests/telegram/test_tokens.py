"""Buttons and codes: sealed so that only gate reads them, within Telegram's 64 bytes, and
agreeing byte for byte with the format written again in `tests/support/telegram_buttons`."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from ulid import ULID

from channels.telegram.tokens import CALLBACK_DATA_BYTES, Button, NotOurs, Sealer
from tests.support import telegram_buttons

SECRET = "tokens-test-secret-0123456789abcdef0123"
SHOWN = datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=UTC)


def every_kind(request_id: str) -> list[Button]:
    return [
        Button(request_id, "approve"),
        Button(request_id, "reject"),
        Button(request_id, "edit"),
        Button(request_id, "reason", reason=5),
        Button(request_id, "grant", grant=("agent", 3600)),
        Button(request_id, "extend", shown=SHOWN),
    ]


def test_every_button_fits_and_reads_back() -> None:
    sealer = Sealer(SECRET)
    request_id = str(ULID())
    for button in every_kind(request_id):
        data = sealer.seal(button)
        assert len(data.encode()) <= CALLBACK_DATA_BYTES
        assert sealer.open(data) == button


def test_the_request_id_never_shows_in_the_data() -> None:
    sealer = Sealer(SECRET)
    request_id = str(ULID())
    raw_id = ULID.from_str(request_id).bytes
    for button in every_kind(request_id):
        data = sealer.seal(button)
        assert request_id not in data and request_id.lower() not in data.lower()
        assert raw_id not in base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def test_an_altered_or_made_up_button_is_refused() -> None:
    sealer = Sealer(SECRET)
    data = sealer.seal(Button(str(ULID()), "extend", shown=SHOWN))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i in range(len(data)):
        swapped = alphabet[(alphabet.index(data[i]) + 1) % 64]
        altered = data[:i] + swapped + data[i + 1 :]
        with pytest.raises(NotOurs):
            sealer.open(altered)
    for junk in ["", "approve", "a" * 65, "é" * 10, data[:-4], data + "AAAA", "vote_8_15"]:
        with pytest.raises(NotOurs):
            sealer.open(junk)


def test_another_key_cannot_read_or_forge_buttons() -> None:
    data = Sealer(SECRET).seal(Button(str(ULID()), "approve"))
    with pytest.raises(NotOurs):
        Sealer("another-gate-entirely-0123456789abcdef").open(data)


def test_the_format_agrees_with_its_independent_description() -> None:
    sealer = Sealer(SECRET)
    request_id = str(ULID())
    minted = {
        "approve": telegram_buttons.mint(SECRET, request_id, "approve"),
        "reason": telegram_buttons.mint(SECRET, request_id, "reason", reason=5),
        "grant": telegram_buttons.mint(SECRET, request_id, "grant", grant=("agent", 3600)),
        "extend": telegram_buttons.mint(SECRET, request_id, "extend", shown=SHOWN),
    }
    for button in every_kind(request_id):
        if button.kind in minted:
            assert sealer.seal(button) == minted[button.kind]  # SIV is deterministic
        assert telegram_buttons.read(SECRET, sealer.seal(button)) == (request_id, button.kind)
    assert sealer.code(request_id) == telegram_buttons.code(SECRET, request_id)


def test_codes_map_back_and_say_nothing_of_other_requests() -> None:
    sealer = Sealer(SECRET)
    first, second = str(ULID()), str(ULID())  # same millisecond: ids differ in a few bits
    code_a, code_b = sealer.code(first), sealer.code(second)
    assert len(code_a) == 26 and code_a.isalnum()
    assert sealer.request_of(code_a) == first and sealer.request_of(code_b) == second
    assert sealer.request_of(f"  {code_a.upper()} ") == first  # typed in capitals, with spaces
    # A permutation: neighbouring ids give unrelated codes (about half the bits differ).
    bits = int.from_bytes(base64.b32decode(code_a.upper() + "======"), "big") ^ int.from_bytes(
        base64.b32decode(code_b.upper() + "======"), "big"
    )
    assert 32 < bin(bits).count("1") < 96
    assert (
        first not in code_a.upper()
        and Sealer("other-key-0123456789abcdef0123").code(first) != code_a
    )


@pytest.mark.parametrize("typed", ["", "abc", "x" * 26 + "y", "!" * 26, "é" * 26, "0" * 26])
def test_a_malformed_code_is_refused(typed: str) -> None:
    with pytest.raises(ValueError):
        Sealer(SECRET).request_of(typed)
