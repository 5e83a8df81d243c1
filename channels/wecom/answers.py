"""What the person who clicked (or typed) is told, in a text message only they get.

WeCom has no ephemeral message: the app's one-to-one chat with the clicker is the private
place. The words come from gate (`Result.message()`, its refusal); this module adds the
instructions for what a card cannot hold (a typed reason, edited values) and makes text safe
for a text message, which renders `<a href=…>` links: every `<` becomes a look-alike, and the
message is cut to WeCom's 2048 bytes.
"""

from __future__ import annotations

from channels import edits
from channels.wecom import card
from channels.wecom.clicks import reject_hint
from gate.decisions.readmodel import RequestView
from gate.text import untrusted

#: WeCom cuts text messages at 2048 bytes; stay under it with room for the note
TEXT_BYTES = 2000
#: what the `name=value` lines of an edit template may take of it (the rest is the preamble)
TEMPLATE_BYTES = 1600
_TAG_OPEN = untrusted.compile(r"<")


def safe_text(text: str) -> str:
    """Text fit for a WeCom text message: no invisible characters, no `<` that could open a
    link, at most `TEXT_BYTES` bytes."""
    shown = _TAG_OPEN.sub(lambda m: "‹", untrusted.strip_invisible(untrusted.cap(text)))
    raw = shown.encode("utf-8", "replace")
    if len(raw) <= TEXT_BYTES:
        return shown
    return raw[: TEXT_BYTES - 3].decode("utf-8", "ignore") + "…"


def reject_instructions(view: RequestView) -> str:
    """After Reject…: how to give the reason the agent is told."""
    tool = card.clean(view.tool_name, 60)
    lines = [f"To reject {tool} ({view.id}), reply with the reason:", reject_hint(view.id)]
    if view.offers.reject_reasons:
        lines.append("or tick preset reasons on the form just sent and press Reject.")
    lines.append(f"Or decide in gate: {view.url}")
    return "\n".join(lines)


def edit_template(view: RequestView) -> str:
    """After Edit…: the command to copy, change and send back, one `name=value` per line.

    Only arguments a line can carry unchanged are listed (no `=` or line break in the name,
    no `<` anywhere, which a text message would turn into a look-alike); the others keep
    their values here and can be edited in gate.
    """
    lines = [f"edit {view.id}"]
    left_out, size = 0, 0
    for field in card.editable(view):
        line = f"{field.key}={field.text}"
        # A line cut off by the message limit would send a broken value back: leave it out.
        fits = size + len(line.encode()) < TEMPLATE_BYTES
        if edits.named_by_a_line(field) and fits and "<" not in line:
            lines.append(line)
            size += len(line.encode()) + 1
        else:
            left_out += 1
    intro = "To approve with changes, copy the lines below, change the values (JSON) and send:"
    tail = f"\n({left_out} more can be edited in gate: {view.url})" if left_out else ""
    return f"{intro}\n" + "\n".join(lines) + tail
