"""What Discord refuses in a message or a modal, checked independently of gate's own code.

`message_problems` and `modal_problems` return the reasons real Discord would answer
`50035 Invalid Form Body` (an empty list: Discord would take it). The limits come from
Discord's documentation (docs/resources/message "Embed Limits", docs/components/reference,
docs/interactions/receiving-and-responding "Modal"); tests/discord/fixtures/SOURCES.md names
them. Beyond Discord, every message must carry `allowed_mentions: {"parse": []}`: gate's rule,
checked here so no message can ping anyone.
"""

from __future__ import annotations

from typing import Any

ACTION_ROW, BUTTON, STRING_SELECT, TEXT_INPUT = 1, 2, 3, 4
LINK = 5
EPHEMERAL = 1 << 6


def _text(value: Any, where: str, limit: int, problems: list[str], *, empty: bool = False) -> None:
    if not isinstance(value, str) or len(value) > limit or (not empty and not value):
        problems.append(f"{where}: must be a string of {0 if empty else 1}..{limit} characters")


def message_problems(body: Any, *, response: bool = False) -> list[str]:
    """Why Discord would refuse this message body (create, edit, or an interaction answer)."""
    problems: list[str] = []
    if not isinstance(body, dict):
        return ["the message is not a JSON object"]
    if body.get("allowed_mentions") != {"parse": []}:
        problems.append('allowed_mentions must be {"parse": []} (no pings from gate)')
    if "content" in body:
        _text(body["content"], "content", 2000, problems, empty=True)
    flags = body.get("flags", 0)
    if flags not in ((0, EPHEMERAL) if response else (0,)):
        problems.append(f"flags {flags!r} not allowed here")
    embeds = body.get("embeds", [])
    if not isinstance(embeds, list) or len(embeds) > 10:
        problems.append("embeds: at most 10")
        embeds = []
    total = 0
    for i, embed in enumerate(embeds):
        total += _embed(embed, f"embeds[{i}]", problems)
    if total > 6000:
        problems.append(f"embeds: {total} characters, over 6000")
    _components(body.get("components", []), problems)
    if not (body.get("content") or embeds or body.get("components")):
        problems.append("a message needs content, embeds or components")
    return problems


def _embed(embed: Any, where: str, problems: list[str]) -> int:
    if not isinstance(embed, dict):
        problems.append(f"{where}: not an object")
        return 0
    size = 0
    for key, limit in (("title", 256), ("description", 4096)):
        if key in embed:
            _text(embed[key], f"{where}.{key}", limit, problems)
            size += len(str(embed[key]))
    url = embed.get("url")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        problems.append(f"{where}.url: must be an http(s) URL")
    color = embed.get("color", 0)
    if not isinstance(color, int) or not 0 <= color <= 0xFFFFFF:
        problems.append(f"{where}.color: must be an RGB integer")
    fields = embed.get("fields", [])
    if not isinstance(fields, list) or len(fields) > 25:
        problems.append(f"{where}.fields: at most 25")
        fields = []
    for j, field in enumerate(fields):
        _text(field.get("name"), f"{where}.fields[{j}].name", 256, problems)
        _text(field.get("value"), f"{where}.fields[{j}].value", 1024, problems)
        size += len(str(field.get("name", ""))) + len(str(field.get("value", "")))
    if "footer" in embed:
        _text(embed["footer"].get("text"), f"{where}.footer.text", 2048, problems)
        size += len(str(embed["footer"].get("text", "")))
    return size


def _components(rows: Any, problems: list[str]) -> None:
    if not isinstance(rows, list) or len(rows) > 5:
        problems.append("components: at most 5 action rows")
        return
    custom_ids: list[str] = []
    for i, row in enumerate(rows):
        where = f"components[{i}]"
        inner = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != ACTION_ROW or not isinstance(inner, list) or not inner:
            problems.append(f"{where}: must be an action row with components")
            continue
        kinds = {c.get("type") for c in inner}
        if kinds == {BUTTON}:
            if len(inner) > 5:
                problems.append(f"{where}: at most 5 buttons in a row")
            for j, button in enumerate(inner):
                _button(button, f"{where}.components[{j}]", problems, custom_ids)
        elif kinds == {STRING_SELECT} and len(inner) == 1:
            _select(inner[0], f"{where}.components[0]", problems, custom_ids)
        else:
            problems.append(f"{where}: up to 5 buttons, or one select, per row")
    if len(custom_ids) != len(set(custom_ids)):
        problems.append("custom_id values must be unique in a message")


def _button(button: dict[str, Any], where: str, problems: list[str], ids: list[str]) -> None:
    style = button.get("style")
    if style not in (1, 2, 3, 4, 5):
        problems.append(f"{where}.style: 1..5")
    _text(button.get("label"), f"{where}.label", 80, problems)
    if style == LINK:
        url = button.get("url")
        if "custom_id" in button or not (isinstance(url, str) and url.startswith("http")):
            problems.append(f"{where}: a link button has a url and no custom_id")
        return
    if "url" in button:
        problems.append(f"{where}: only link buttons have a url")
    _text(button.get("custom_id"), f"{where}.custom_id", 100, problems)
    ids.append(str(button.get("custom_id")))


def _select(select: dict[str, Any], where: str, problems: list[str], ids: list[str]) -> None:
    _text(select.get("custom_id"), f"{where}.custom_id", 100, problems)
    ids.append(str(select.get("custom_id")))
    if "placeholder" in select:
        _text(select["placeholder"], f"{where}.placeholder", 150, problems)
    options = select.get("options")
    if not isinstance(options, list) or not 1 <= len(options) <= 25:
        problems.append(f"{where}.options: 1..25")
        return
    for k, option in enumerate(options):
        _text(option.get("label"), f"{where}.options[{k}].label", 100, problems)
        _text(option.get("value"), f"{where}.options[{k}].value", 100, problems)
    values = [o.get("value") for o in options]
    if len(values) != len(set(values)):
        problems.append(f"{where}.options: values must be unique")
    low, high = select.get("min_values", 1), select.get("max_values", 1)
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high <= len(options)):
        problems.append(f"{where}: 0 <= min_values <= max_values <= options")


def modal_problems(modal: Any) -> list[str]:
    """Why Discord would refuse this modal (the `data` of a MODAL answer)."""
    problems: list[str] = []
    if not isinstance(modal, dict):
        return ["the modal is not a JSON object"]
    _text(modal.get("custom_id"), "custom_id", 100, problems)
    _text(modal.get("title"), "title", 45, problems)
    rows = modal.get("components")
    if not isinstance(rows, list) or not 1 <= len(rows) <= 5:
        return [*problems, "components: 1..5 rows"]
    ids: list[str] = []
    for i, row in enumerate(rows):
        where = f"components[{i}]"
        inner = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != ACTION_ROW or not isinstance(inner, list) or len(inner) != 1:
            problems.append(f"{where}: an action row holding one text input")
            continue
        text_input = inner[0]
        if text_input.get("type") != TEXT_INPUT:
            problems.append(f"{where}: only text inputs in a modal")
            continue
        _text(text_input.get("custom_id"), f"{where}.custom_id", 100, problems)
        ids.append(str(text_input.get("custom_id")))
        _text(text_input.get("label"), f"{where}.label", 45, problems)
        if text_input.get("style") not in (1, 2):
            problems.append(f"{where}.style: 1 (short) or 2 (paragraph)")
        high = text_input.get("max_length", 4000)
        if not isinstance(high, int) or not 1 <= high <= 4000:
            problems.append(f"{where}.max_length: 1..4000")
            high = 4000
        if "value" in text_input:
            _text(text_input["value"], f"{where}.value", min(high, 4000), problems, empty=True)
        if "placeholder" in text_input:
            _text(text_input["placeholder"], f"{where}.placeholder", 100, problems)
    if len(ids) != len(set(ids)):
        problems.append("text input custom_ids must be unique")
    return problems
