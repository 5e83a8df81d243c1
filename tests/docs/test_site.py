"""The docs site builds with `mkdocs build --strict` (broken links, pages left out of the nav and
unknown anchors fail it), its API and CLI references cover every route and command, and every
picture and link it and the README name exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.app import create_app
from gate.config.settings import Settings
from tests.support import docs
from tests.support.docs import DOCS, README, ROOT

SCREENSHOTS = DOCS / "images" / "screenshots"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield out


def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").exists()
    assert (site / "channels" / "feishu" / "index.html").exists()


def test_the_api_reference_has_every_route(site: Path, tmp_path: Path) -> None:
    server = {"database_url": f"sqlite:///{tmp_path}/gate.db", "migrate_on_start": False}
    schema = create_app(Settings(server=server)).openapi()
    page = (site / "reference" / "api" / "index.html").read_text()
    for path, item in schema["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in page, (method, path)
    assert "generated:openapi" not in page


def test_the_cli_reference_has_every_command(site: Path) -> None:
    """Every command's help is on the page, and the summary table names every command."""
    page = (site / "reference" / "cli" / "index.html").read_text()
    generated = re.findall(r'<h[3-6] id="[^"]*"><code>(gate[^<]*)</code>', page)
    for command in generated:
        assert f"usage: {command}" in page, command
    assert {"gate init claude-code", "gate mcp proxy", "gate requests reject"} <= set(generated)
    summary = (DOCS / "reference" / "cli.md").read_text()
    listed = set(re.findall(r"^\| `gate ([a-z-]+)", summary, re.M))
    assert listed == {c.split()[1] for c in generated if c != "gate"}


def test_every_screenshot_is_shown_and_every_picture_exists() -> None:
    shown: set[Path] = set()
    for page in docs.pages():
        for ref in re.findall(r"(?:!\[[^\]]*\]\(|<img src=\")([^)\"]+)", page.read_text()):
            picture = (page.parent / ref).resolve()
            assert picture.exists(), f"{page.relative_to(ROOT)}: {ref}"
            shown.add(picture)
    assert set(SCREENSHOTS.glob("*.png")) <= shown


def test_the_readmes_links_into_the_docs_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links
    for link in links:
        assert (ROOT / link).exists(), link


@pytest.mark.parametrize(
    "channel", ["slack", "feishu", "telegram", "discord", "wecom", "teams", "email"]
)
def test_each_channel_page_says_what_it_refuses_in_the_codes_it_answers(channel: str) -> None:
    page = (DOCS / "channels" / f"{channel}.md").read_text()
    assert "## What it refuses, and why" in page
    refusals = page.split("## What it refuses, and why", 1)[1]
    codes = re.findall(r"`4\d\d ([a-z_]+)`", refusals)
    assert codes
    # the channel's own code, and the same-origin guard every state-changing request passes
    sources = [*(ROOT / "channels" / channel).rglob("*.py"), ROOT / "gate" / "api" / "guard.py"]
    source = "".join(path.read_text() for path in sources)
    for code in codes:
        assert f'"{code}"' in source, code


def test_what_every_channel_refuses_is_the_pipelines_refusals() -> None:
    from gate.decisions.acting import Refusal

    page = (DOCS / "channels" / "index.md").read_text()
    for refusal in Refusal:
        assert f'| `{refusal.value}` | "Not recorded: {refusal.sentence()[:30]}' in page, refusal


def _documented(key: str, text: str) -> bool:
    return f"`{key}`" in text or re.search(rf"^\s*#?\s*{key}\s*=", text, re.M) is not None


def test_every_rule_approver_and_token_key_is_documented() -> None:
    from gate.config.settings import ApproverSettings, RuleSettings, TokenSettings

    text = "".join(
        (DOCS / page).read_text() for page in ("policy.md", "beyond.md", "configuration.md")
    )
    for model in (RuleSettings, ApproverSettings, TokenSettings):
        missing = [key for key in model.model_fields if not _documented(key, text)]
        assert missing == [], model.__name__


def test_every_channel_setting_is_on_its_page() -> None:
    from importlib.metadata import entry_points

    for entry in entry_points(group="gate.channels"):
        if entry.name == "log":  # no settings, nothing to set up: channels/index.md names it
            continue
        page = (DOCS / "channels" / f"{entry.name}.md").read_text()
        model = entry.load().settings_model
        missing = [key for key in model.model_fields if not _documented(key, page)]
        assert missing == [], entry.name
