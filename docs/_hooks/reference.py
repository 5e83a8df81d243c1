"""MkDocs hook: writes the HTTP API and CLI reference pages from the code at build time.

A page holding `<!-- generated:openapi -->` gets the API reference rendered from
`create_app(settings).openapi()` (an app on a throwaway SQLite file, never started, no network);
one holding `<!-- generated:cli -->` gets every command's `--help`, found by walking
`gate --help` and each command's own listing. Nothing generated is committed, so the reference
cannot drift from the code: `mkdocs build --strict` (tests/test_docs.py) builds it every time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_MARK = "<!-- generated:openapi -->"
CLI_MARK = "<!-- generated:cli -->"
#: the width argparse wraps help to, so the page does not depend on the builder's terminal
HELP_COLUMNS = "100"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the generation marks with the reference they stand for."""
    if OPENAPI_MARK in markdown:
        markdown = markdown.replace(OPENAPI_MARK, api_reference())
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    return markdown


# --- HTTP API ---------------------------------------------------------------------------------


@cache
def openapi_schema() -> dict[str, Any]:
    """The schema the server publishes at /openapi.json, from an app that is never started."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gate.app import create_app
    from gate.config.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        server = {"database_url": f"sqlite:///{tmp}/gate.db", "migrate_on_start": False}
        schema: dict[str, Any] = create_app(Settings(server=server)).openapi()
    return schema


@cache
def api_reference() -> str:
    """Markdown for every operation and schema of the OpenAPI document."""
    schema = openapi_schema()
    out = [f"OpenAPI {schema['openapi']}, `{schema['info']['title']}` {schema['info']['version']}."]
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in schema["paths"].items():
        for method, op in item.items():
            tag = (op.get("tags") or ["other"])[0]
            groups.setdefault(tag, []).append((method.upper(), path, op))
    for tag, ops in groups.items():
        out.append(f"\n## {tag}\n")
        for method, path, op in ops:
            out.append(_operation(method, path, op))
    out.append("\n## Schemas\n")
    for name, body in schema.get("components", {}).get("schemas", {}).items():
        out.append(_schema(name, body))
    return "\n".join(out) + "\n"


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    lines = [f"### `{method} {path}`\n"]
    if op.get("summary"):
        lines.append(f"**{op['summary']}**\n")
    if op.get("description"):
        lines.append(_text(op["description"]) + "\n")
    params = op.get("parameters", [])
    if params:
        lines.append("| parameter | in | type | required | description |")
        lines.append("| --- | --- | --- | --- | --- |")
        for p in params:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        kinds = ", ".join(
            f"`{kind}` {_type(media.get('schema', {}))}" for kind, media in body["content"].items()
        )
        lines.append(f"Body: {kinds}{' (required)' if body.get('required') else ''}.\n")
    responses = op.get("responses", {})
    if responses:
        lines.append("| status | meaning | body |")
        lines.append("| --- | --- | --- |")
        for status, answer in responses.items():
            media = ", ".join(
                f"`{kind}` {_type(m.get('schema', {}))}".rstrip()
                for kind, m in answer.get("content", {}).items()
            )
            lines.append(f"| {status} | {_cell(answer.get('description', ''))} | {media} |")
        lines.append("")
    return "\n".join(lines)


def _schema(name: str, body: dict[str, Any]) -> str:
    lines = [f"### {name} {{: #schema-{name.lower()} }}\n"]
    if body.get("description"):
        lines.append(_text(body["description"]) + "\n")
    if "enum" in body:
        lines.append("One of " + ", ".join(f"`{json.dumps(v)}`" for v in body["enum"]) + ".\n")
    props = body.get("properties", {})
    if props:
        required = set(body.get("required", []))
        lines.append("| field | type | required | description |")
        lines.append("| --- | --- | --- | --- |")
        for field, spec in props.items():
            lines.append(
                f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                f"{_cell(spec.get('description', ''))}{_default(spec)} |"
            )
        lines.append("")
    return "\n".join(lines)


def _type(spec: dict[str, Any]) -> str:
    """A schema's type in a few words, linking named schemas to their section."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in spec:
            return " or ".join(dict.fromkeys(_type(s) for s in spec[key]))
    kind = spec.get("type")
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if kind == "object" and "additionalProperties" in spec:
        extra = spec["additionalProperties"]
        return f"object of {_type(extra)}" if isinstance(extra, dict) and extra else "object"
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    if kind:
        return str(kind) + (f" ({spec['format']})" if "format" in spec else "")
    return "any"


def _default(spec: dict[str, Any]) -> str:
    if "default" not in spec:
        return ""
    return f" (default `{json.dumps(spec['default'])}`)"


def _text(text: str) -> str:
    return text.strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# --- CLI --------------------------------------------------------------------------------------


def _help_pages() -> dict[tuple[str, ...], str]:
    """Every command's --help, from one child process that runs `gate.cli.main` for each (a
    process per command cost about a second of CPU each, some 40 of them)."""
    env = {**os.environ, "COLUMNS": HELP_COLUMNS, "PYTHONPATH": str(ROOT)}
    env.pop("GATE_TOKEN", None)
    done = subprocess.run(
        [sys.executable, __file__, "--cli-help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gate's --help pages failed: {done.stderr.strip()}")
    return {tuple(json.loads(key)): text for key, text in json.loads(done.stdout).items()}


def _help_in_process(command: tuple[str, ...]) -> str:
    """`gate COMMAND --help` as the command prints it, run in this process."""
    from gate.cli import main  # gate's import path is set up by the caller (see the end)

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*command, "--help"])
    if not out.getvalue().startswith("usage: "):
        raise RuntimeError(f"`gate {' '.join(command)} --help` printed no help")
    return out.getvalue()


def _walk_help() -> dict[tuple[str, ...], str]:
    """Every command's help, top-level first (the child's side of `_help_pages`)."""
    pages: dict[tuple[str, ...], str] = {(): _help_in_process(())}
    level: list[tuple[str, ...]] = [()]
    while level:
        level = [(*c, s) for c in level for s in subcommands(pages[c])]
        for command in level:
            pages[command] = _help_in_process(command)
    return pages


def subcommands(help_text: str) -> list[str]:
    """The commands an argparse help lists under its COMMAND or TASK heading."""
    found: list[str] = []
    listing = False
    for line in help_text.splitlines():
        if re.fullmatch(r"  [A-Z]+", line):
            listing = True
            continue
        if listing:
            match = re.match(r"    (\S+)(\s{2,}|$)", line)
            if match:
                found.append(match.group(1))
            elif not line.startswith("      ") or not line.strip():
                listing = False
    return found


@cache
def cli_reference() -> str:
    """Every command's --help, top-level first, each under a heading of its own."""
    pages = _help_pages()
    out = []
    for command in sorted(pages):
        name = " ".join(("gate", *command))
        depth = 3 + len(command)
        out.append(f"{'#' * depth} `{name}`\n\n```text\n{pages[command].rstrip()}\n```\n")
    return "\n".join(out)


if __name__ == "__main__" and sys.argv[1:] == ["--cli-help"]:
    sys.path.insert(0, str(ROOT))
    sys.stdout.write(json.dumps({json.dumps(k): v for k, v in _walk_help().items()}))
