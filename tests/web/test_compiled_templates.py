"""The console's templates compile once per process for every app (gate.web.console)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jinja2

from gate.web import console


def _now() -> datetime:
    return datetime(2026, 11, 27, tzinfo=UTC)


def test_a_second_app_gets_the_templates_the_first_compiled() -> None:
    first, second = console.environment(_now), console.environment(_now)
    assert first.get_template("login.html") is not None
    source, filename, _ = second.loader.get_source(second, "login.html")
    cache = second.bytecode_cache
    assert cache is not None and cache is first.bytecode_cache
    # what the second environment would load instead of compiling
    assert cache.get_bucket(second, "login.html", filename, source).code is not None
    assert cache.get_bucket(second, "never-rendered.html", None, "x").code is None


def test_an_edited_template_compiles_again(tmp_path: Path) -> None:
    """The shared cache is keyed by template and checked against the source's checksum."""
    template = tmp_path / "page.html"

    def render() -> str:
        env = jinja2.Environment(
            bytecode_cache=console.environment(_now).bytecode_cache,
            loader=jinja2.FileSystemLoader(tmp_path),
        )
        return env.get_template("page.html").render(n=1)

    template.write_text("before {{ n }}")
    assert render() == "before 1"
    template.write_text("after {{ n }}")
    assert render() == "after 1"
