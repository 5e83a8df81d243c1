"""The Teams driver: Adaptive Cards on `FakeTeams`, JWT-signed invokes, user-specific views.

Teams shows everybody the base card the bot posted (read-only) and each approver named in
its `refresh.userIds` a view of their own, which their client fetches with a signed
`adaptiveCard/action` invoke (verb `refresh`). So "the card" here is both: the base card as
the fake holds it, and the view gate answers the first listed approver's refresh with; the
offers are the controls of that view. An answer only the presser sees is the card an invoke
answers with (its notice), or the text of a message-type answer.

Gate's messaging endpoint is what a Teams admin registers for the bot; the contract suite
hands the driver gate's URL once gate runs (`attach`), since the client fetches an
approver's view before anyone clicks.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from tests.channels.drivers.base import (
    Answer,
    Card,
    Driver,
    Private,
    invisible,
    no_answer,
    objects,
    strings,
)
from tests.support import fake_teams
from tests.support.http import TLS
from tests.support.keys import rsa_key
from tests.support.servers import wait_until

URL = "/channels/teams/messages"
#: `<` opening something Teams could read as a tag (<at> mentions, HTML-ish markup)
TAG_SHAPED = re.compile(r"<[A-Za-z/!?][^<]{0,20}")
#: a markdown link, which TextBlocks (and some hosts' labels) render
MD_LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")
VERB_OFFERS = {
    "approve": "approve",
    "reject": "reject",
    "approve_edits": "edit",
    "extend": "extend",
    "acknowledge": "acknowledge",
}


class TeamsDriver(Driver):
    """Teams through `FakeTeams`: base cards, approver views, JWT-signed invokes."""

    name = "teams"
    form_in_card = "the edit form is in the card (Action.ShowCard): Teams opens it itself"
    args_chars = 2500

    def start(self) -> None:
        self.fake = fake_teams.FakeTeams().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return self.fake.settings()

    def user_id(self, person: str) -> str:
        object_id = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{person}.contract.example"))
        self.fake.add_member(object_id)
        return object_id

    # -- delivering invokes --

    def _service_url(self) -> str:
        return f"{self.fake.url}/"

    def _signed(self, activity: dict[str, Any], **claims: Any) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(activity).encode()
        token = self.fake.sign(service_url=activity["serviceUrl"], **claims)
        return body, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def _send(self, gate_url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            return client.post(URL, content=body, headers=headers)

    def _invoke(
        self, person_or_id: str, verb: str, data: dict[str, Any], trigger: str = "manual"
    ) -> dict[str, Any]:
        object_id = person_or_id if _is_guid(person_or_id) else self.user_id(person_or_id)
        return self.fake.invoke(
            verb=verb, data=data, object_id=object_id, service_url=self._service_url(),
            trigger=trigger,
        )  # fmt: skip

    def _gate(self, gate_url: str | None = None) -> str:
        """Gate's messaging endpoint: as handed over with a click, or by the suite."""
        if gate_url:
            self.gate_url = gate_url
        assert self.gate_url, "the suite attaches the gate under test before asking for cards"
        return self.gate_url

    # -- cards --

    def _message(self, request_id: str) -> fake_teams.Message | None:
        for message in self.fake.posted():
            if request_id in json.dumps(message.cards[0]):
                return message
        return None

    def _approver_view(self, base: dict[str, Any], request_id: str) -> dict[str, Any] | None:
        """The view the first approver named in the card's refresh gets (None: nobody)."""
        refresh = base.get("refresh")
        user_ids = refresh.get("userIds") if isinstance(refresh, dict) else None
        if not user_ids:
            return None
        by_member = {member: oid for oid, member in self.fake.members.items()}
        object_id = by_member.get(user_ids[0])
        assert object_id, f"refresh names {user_ids[0]}, who is no member"
        activity = self._invoke(object_id, "refresh", refresh["action"]["data"], "automatic")
        r = self._send(self._gate(), *self._signed(activity))
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["statusCode"] == 200 and answer["type"] == fake_teams.CARD_TYPE, answer
        assert fake_teams.check_card(answer["value"]) == [], fake_teams.check_card(answer["value"])
        view: dict[str, Any] = answer["value"]
        return view

    @staticmethod
    def _offers(view: dict[str, Any] | None) -> frozenset[str]:
        offers = set()
        for el in objects(view or {}):
            if el.get("type") == "Action.Execute" and el.get("verb") in VERB_OFFERS:
                offers.add(VERB_OFFERS[el["verb"]])
            elif el.get("type") == "Input.ChoiceSet" and el.get("id") == "grant":
                offers.add("grant")
        return frozenset(offers)

    def card(self, request_id: str) -> Card:
        message: fake_teams.Message = wait_until(lambda: self._message(request_id))
        base = message.card
        view = self._approver_view(base, request_id)
        raw = {"base": base, "view": view}
        text = json.dumps(raw, ensure_ascii=False)
        return Card(text, len(message.cards) - 1, self._offers(view), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # TextBlocks read markdown, so only gate's own words may be there; TextRuns are shown
        # as typed but a tag-shaped `<` is refused too (Teams reads <at> as a mention). An
        # input's value is an edit box's content (inert), but must hold no invisible
        # characters either. Links may only go to gate's page; buttons only to this request.
        live: list[str] = []
        for el in objects(card.raw):
            kind = el.get("type")
            if kind == "TextBlock":
                text = str(el.get("text", ""))
                live += MD_LINK.findall(text) + TAG_SHAPED.findall(text)
                if "hostile-marker" in text:
                    live.append(f"untrusted text in a TextBlock: {text[:60]}")
            elif kind == "TextRun":
                live += TAG_SHAPED.findall(str(el.get("text", "")))
                if "selectAction" in el:
                    live.append("a TextRun that is a link")
            elif kind == "Action.OpenUrl" and el.get("url") != own_url:
                live.append(f"a link away from gate: {el.get('url')}")
            elif kind == "Action.Execute" and el.get("data", {}).get("request_id") != request_id:
                live.append(f"a button for another request: {el.get('data')}")
            if "msteams" in el:
                live.append("msteams entities (mentions)")
            for key in ("label", "title", "fallbackText", "placeholder"):
                if isinstance(el.get(key), str):
                    live += MD_LINK.findall(el[key]) + TAG_SHAPED.findall(el[key])
        return live + invisible("".join(strings(card.raw)))

    # -- clicks --

    def _data(self, request_id: str, action: str, **inputs: str) -> dict[str, Any]:
        """What the press's Action.Execute carries: the card's data, merged with inputs."""
        data: dict[str, Any] = {"request_id": request_id}
        if action == "extend":
            message = self._message(request_id)
            view = self._approver_view(message.card, request_id) if message else None
            for el in objects(view or {}):
                if el.get("type") == "Action.Execute" and el.get("verb") == "extend":
                    data = dict(el["data"])
        data.update(inputs)
        return data

    def _options(self, request_id: str) -> dict[str, str]:
        """Preset reject reasons on the approver view: title -> choice value."""
        view = self.card(request_id).raw["view"] or {}
        return {
            c["title"]: c["value"]
            for el in objects(view)
            if el.get("type") == "Input.ChoiceSet" and el.get("id") == "reasons"
            for c in el.get("choices", [])
        }

    def _edit_boxes(self, request_id: str) -> list[dict[str, Any]]:
        view = self.card(request_id).raw["view"] or {}
        return [
            el
            for el in objects(view)
            if el.get("type") == "Input.Text" and re.fullmatch(r"f\d+", str(el.get("id")))
        ]

    def _deliver(self, gate_url: str, activity: dict[str, Any]) -> Answer:
        r = self._send(self._gate(gate_url), *self._signed(activity))
        return Answer(r.status_code, self._private(r, activity["from"]["aadObjectId"]))

    @staticmethod
    def _private(r: httpx.Response, to: str) -> Any:
        if r.status_code != 200 or not r.content:
            return no_answer(f"HTTP {r.status_code} {r.text[:200]}")
        answer = r.json()
        if answer.get("type") == "application/vnd.microsoft.activity.message":
            text = str(answer.get("value"))
            return lambda: Private(text, to)
        notices = [
            "".join(i.get("text", "") for i in el.get("inlines", []))
            for el in objects(answer.get("value", {}))
            if el.get("id") == "notice_text"
        ]
        if not notices:
            return no_answer("the answered card carries no notice")
        return lambda: Private(notices[0], to)

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
        self._gate(gate_url)
        inputs: dict[str, str] = {}
        verb = {"edit": "approve_edits"}.get(action, action)
        if action == "approve" and grant is not None:
            inputs["grant"] = f"{grant[0]}:{grant[1]}"
        elif action == "reject":
            inputs["reason"] = reason or ""
            if reasons:
                offered = self._options(request_id)
                inputs["reasons"] = ",".join(offered.get(label, label) for label in reasons)
        elif action == "edit":
            boxes = self._edit_boxes(request_id)
            for box in boxes:
                inputs[box["id"]] = (edits or {}).get(box["label"], box.get("value", ""))
            if not boxes:  # no edit form on the card: a crafted press, as anyone could send
                inputs.update({f"f{i}": v for i, v in enumerate((edits or {}).values())})
            inputs["note"] = reason or ""
        activity = self._invoke(person, verb, self._data(request_id, action, **inputs))
        return self._deliver(gate_url, activity)

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        self._gate(gate_url)
        activity = self._invoke(person, "approve", {"request_id": request_id})
        body = json.dumps(activity).encode()
        service_url = activity["serviceUrl"]
        other = rsa_key("teams", 1)  # never published
        forged = self.fake.sign(service_url=service_url, key=other)  # same kid, wrong key
        stale = self.fake.sign(service_url=service_url, issued_at=time.time() - 7200)
        garbage = b"\xff{not an activity" * 10
        json_type = {"Content-Type": "application/json"}
        return {
            "wrong secret": self._send(
                gate_url, body, {"Authorization": f"Bearer {forged}", **json_type}
            ),
            "garbage under a wrong secret": self._send(
                gate_url, garbage, {"Authorization": f"Bearer {forged}", **json_type}
            ),
            "unsigned": self._send(gate_url, body, json_type),
            "stale": self._send(gate_url, body, {"Authorization": f"Bearer {stale}", **json_type}),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        self._gate(gate_url)
        activity = self._invoke(person, action, self._data(request_id, action))
        body, headers = self._signed(activity)
        answers = []
        for _ in range(2):
            r = self._send(gate_url, body, headers)
            answers.append(Answer(r.status_code, self._private(r, activity["from"]["aadObjectId"])))
        return answers

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        with self.fake.down(503):
            yield

    def platform_calls(self) -> int:
        return len(
            [
                r
                for r in self.fake.recorded(path_prefix="/v3/conversations/")
                if "/activities" in r.path
            ]
        )


def _is_guid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
