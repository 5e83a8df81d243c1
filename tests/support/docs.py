"""The docs site's pages (docs/, built by MkDocs), for the tests that keep them true.

A page marks what a test reads with `<!-- section:NAME -->` ... `<!-- /section:NAME -->`;
`section(NAME)` is every such part of every page, in path order (the agent pages share one,
`wire`), so a test does not depend on which page a paragraph moved to.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def pages() -> list[Path]:
    """Every Markdown page of the site, in path order."""
    return sorted(DOCS.rglob("*.md"))


def section(name: str) -> str:
    """The text of every `section:NAME` part of the docs pages, joined in path order."""
    pattern = re.compile(rf"<!-- section:{name} -->(.*?)<!-- /section:{name} -->", re.S)
    found = [m.group(1) for page in pages() for m in pattern.finditer(page.read_text())]
    assert found, f"no docs page has a section {name!r}"
    return "\n".join(found)
