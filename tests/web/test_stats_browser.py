"""The Stats page's fatigue charts in a real Chromium: readable on a laptop and on a phone.

Readable is measured, not eyeballed: each visible chart's text is drawn at 11 CSS px or more
(font size times the SVG's rendered scale), no table is wider than the box it sits in, and
the page never scrolls sideways. Screenshots at both widths go to test-artifacts/ (and, copied,
to docs/images/screenshots/ for docs/stats.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS
from tests.support.traffic import week_of_traffic
from tests.web.conftest import OpenPage, shot

pytestmark = BROWSER_TESTS

#: the smallest chart text a person can read on a phone without zooming, in CSS px
MIN_TEXT_PX = 11.0

#: per visible chart: the smallest rendered font size of its text, and whether any text
#: spills out of the chart's box; per table region: how much wider the table is than the box
_MEASURE = """() => {
  const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).display !== 'none';
  const charts = [...document.querySelectorAll('svg.chart')].filter(shown).map(svg => {
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')];
    const sizes = texts.map(t => parseFloat(getComputedStyle(t).fontSize) * scale);
    const spill = texts.filter(t => {
      const r = t.getBoundingClientRect();
      return r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1);
    }).map(t => t.textContent);
    return {title: svg.getAttribute('aria-label'), min: Math.min(...sizes), spill};
  });
  const tables = [...document.querySelectorAll('.table-scroll')].map(box => ({
    caption: box.getAttribute('aria-label'),
    over: box.scrollWidth - box.clientWidth,
  }));
  return {charts, tables, pageOver: document.documentElement.scrollWidth - innerWidth};
}"""


@pytest.fixture
def busy_gate(web_gate: Gate) -> Gate:
    """A console gate with a week of synthetic traffic in its database."""
    week_of_traffic(web_gate.state.db, now=datetime.now(UTC), per_day=40)
    return web_gate


@pytest.mark.parametrize(
    ("viewport", "name"), [((1280, 900), "stats-laptop.png"), ((390, 844), "stats-phone.png")]
)
def test_fatigue_charts_are_readable(
    busy_gate: Gate, open_page: OpenPage, viewport: tuple[int, int], name: str
) -> None:
    watched = open_page(busy_gate, "alice", viewport=viewport)
    page = watched.page
    page.goto(f"{busy_gate.url}/stats?days=7")
    page.get_by_role("heading", name="Approval fatigue").wait_for()
    found: dict[str, Any] = page.evaluate(_MEASURE)

    visible = {c["title"] for c in found["charts"]}
    for title in (
        "Asks per day by rule",
        "Time to decision per day, p50 and p90",
        "Card shown to vote per approver, p50 and p90",
        "Approvals at a glance by approver",
        "Asks by weekday and hour (UTC)",
        "Expiries by rule",
        "Asks the current suggestions would remove, by rule",
    ):
        assert title in visible, f"{title} is not shown at {viewport}"
    # one drawing per chart at each width: the other width's copy is hidden
    assert len(found["charts"]) == 12, found["charts"]
    small = [(c["title"], round(c["min"], 1)) for c in found["charts"] if c["min"] < MIN_TEXT_PX]
    assert small == [], f"chart text under {MIN_TEXT_PX}px at {viewport}: {small}"
    spilled = [(c["title"], c["spill"]) for c in found["charts"] if c["spill"]]
    assert spilled == [], spilled
    assert found["pageOver"] <= 0, "the page scrolls sideways"
    if viewport[0] >= 1280:
        clipped = [t for t in found["tables"] if t["over"] > 0]
        assert clipped == [], f"tables wider than their box at {viewport}: {clipped}"
    shot(page, name, full_page=True)
    # for docs/stats.md: the fatigue section as a screen shows it
    page.evaluate("document.getElementById('fatigue').scrollIntoView()")
    shot(page, name.replace("stats-", "stats-fatigue-"))
    assert watched.errors == []


def test_the_page_says_what_shown_means_and_names_the_suggestions(
    busy_gate: Gate, open_page: OpenPage
) -> None:
    page = open_page(busy_gate, "alice").page
    page.goto(f"{busy_gate.url}/stats?days=7")
    text = page.locator("main").inner_text()
    assert "when the card was first posted on the channel the vote came from" in text
    assert "gate does not record page views" in text
    removed = page.get_by_role("region", name="Asks of each rule that the current suggestions")
    # git pushes and `npm test` are always approved by two people: agent-tools loses most
    assert "agent-tools" in removed.inner_text()
    glances = page.get_by_role("region", name="Approvals within 5 s")
    assert "bob" in glances.inner_text()
