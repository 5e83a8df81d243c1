"""How fast a Discord click is answered, and how fast the card changes, on loopback.

A real gate (in-process uvicorn, SQLite or PostgreSQL, the production outbox interval of 1 s)
with the Discord channel talks to `tests.support.fake_discord`. For each of `--clicks`
requests the fake delivers a signed click, the way Discord would, and times:

* click -> answer: from sending the interaction to gate's HTTP answer (Discord's 3 s budget);
  for Approve the answer is UPDATE_MESSAGE with the re-rendered card, so this is also when
  the clicked card changes for everybody in that channel;
* click -> card edited by the outbox: from sending the click to the fake receiving the
  `PATCH /channels/{id}/messages/{id}` the outbox sends (what every other card of the request,
  in any channel, waits for);
* the same two for Extend (answered privately, the card refreshed by the outbox only), and
  click -> modal for Reject….

    .venv/bin/python -m bench.discord_clicks
    .venv/bin/python -m bench.discord_clicks --clicks 200 --db postgres
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

from bench._common import database
from gate.app import create_app
from tests.conftest import Gate
from tests.discord.conftest import USERS, ask, card_for, custom_id, discord_settings
from tests.support.fake_discord import FakeDiscord, Message
from tests.support.servers import ThreadServer, wait_until


def _edited_after(fake: FakeDiscord, message: Message, since: float) -> Callable[[], float | None]:
    """When the outbox's edit of `message` arrived (perf_counter), once it has."""
    path = f"/messages/{message.id}"
    seen = len([c for c in fake.calls_to("PATCH") if c.path.endswith(path)])

    def edited() -> float | None:
        patches = [c for c in fake.calls_to("PATCH") if c.path.endswith(path)]
        return time.perf_counter() - since if len(patches) > seen else None

    return edited


def _figures(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[max(0, round(0.95 * len(ms)) - 1)]
    median = statistics.median(ms)
    return f"{name:<44} median {median:6.1f} ms   p95 {p95:6.1f} ms   max {ms[-1]:6.1f} ms"


def run(kind: str, clicks: int) -> None:
    fake = FakeDiscord().start()
    with database(kind) as url:
        settings = discord_settings(url, fake)
        settings.server.outbox_interval_seconds = 1.0
        server = ThreadServer(create_app(settings)).start()
        gate = Gate(server, settings)
        answer, outbox, ext_answer, ext_outbox, modal = [], [], [], [], []
        try:
            for _ in range(clicks):
                request_id = ask(gate)
                message = card_for(fake, request_id)
                sent = time.perf_counter()
                edited = _edited_after(fake, message, sent)
                click = fake.component(message, custom_id(message, "approve"), USERS["alice"])
                delivered = fake.deliver(gate.url, click)
                assert delivered.kind == 7, delivered.answer
                answer.append(delivered.seconds)
                outbox.append(wait_until(edited, interval=0.001))

                request_id = ask(gate, "refund_order", {"amount": 900})
                message = card_for(fake, request_id)
                reject = fake.component(message, custom_id(message, "reject"), USERS["bob"])
                opened = fake.deliver(gate.url, reject)
                assert opened.kind == 9, opened.answer
                modal.append(opened.seconds)
                sent = time.perf_counter()
                edited = _edited_after(fake, message, sent)
                extend = fake.component(message, custom_id(message, "extend"), USERS["bob"])
                delivered = fake.deliver(gate.url, extend)
                assert delivered.private and delivered.private.startswith("Deadline moved")
                ext_answer.append(delivered.seconds)
                ext_outbox.append(wait_until(edited, interval=0.001))
        finally:
            server.stop()
            fake.stop()
    print(f"{kind}, {clicks} clicks of each kind, Python {platform.python_version()}")
    print(_figures("Approve: click -> answer (card replaced)", answer))
    print(_figures("Approve: click -> card edited by the outbox", outbox))
    print(_figures("Extend: click -> private answer", ext_answer))
    print(_figures("Extend: click -> card edited by the outbox", ext_outbox))
    print(_figures("Reject…: click -> modal", modal))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=100)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    run(args.db, args.clicks)


if __name__ == "__main__":
    main()
