"""The shape of the code: who imports whom, and how big a module or a function may grow.

The import graph is read from the source with `ast` (nothing is imported), so a circle held
together by an import inside a function counts like any other: such an import only hides the
circle until the function first runs. Imports under `if TYPE_CHECKING:` are left out, because
they never run; they name types for the checker, they do not load anything.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gate", "channels")
#: past these a reader must scroll to find where a module's job or a function's steps end
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `line` of the source's file."""

    source: str
    target: str
    line: int
    in_function: bool


@cache
def parsed(source: str, filename: str) -> ast.Module:
    """The syntax tree of a module's source, parsed once for all the checks (read, never
    changed): each check walks every module of gate and the channels."""
    return ast.parse(source, filename=filename)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the checked packages by dotted name (a package is its `__init__`)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, type_only: bool, in_function: bool = False
) -> Iterator[tuple[ast.stmt, bool]]:
    """Import statements that can run (and with `type_only`, those under TYPE_CHECKING too),
    each with whether it sits inside a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            for child in node.orelse:
                yield from _imports_in(child, type_only, in_function)
            continue
        yield from _imports_in(node, type_only, in_function)


def _imports_in(
    node: ast.AST, type_only: bool, in_function: bool
) -> Iterator[tuple[ast.stmt, bool]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, in_function
        return
    inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    yield from _imports(node, type_only, inner)


def _targets(node: ast.stmt, source: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The checked modules an import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name
        return
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        anchor = source.split(".")
        anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            yield f"{base}.{alias.name}"
        elif base in known:
            yield base


def import_graph(root: Path = ROOT, *, type_only: bool = False) -> list[Edge]:
    """Every import between modules of the checked packages that can run; with `type_only`,
    the imports that only name types for the checker as well."""
    found = modules(root)
    known = set(found)
    edges: list[Edge] = []
    for name, path in found.items():
        tree = parsed(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node, in_function in _imports(tree, type_only):
            for target in _targets(node, name, is_package, known):
                if target != name:
                    edges.append(Edge(name, target, node.lineno, in_function))
    return edges


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def describe(group: list[str], edges: list[Edge]) -> str:
    """One circle as the import lines that close it."""
    members = set(group)
    lines = [
        f"  {e.source}:{e.line} imports {e.target}{' (inside a function)' if e.in_function else ''}"
        for e in edges
        if e.source in members and e.target in members
    ]
    return " <-> ".join(group) + "\n" + "\n".join(sorted(set(lines)))


def test_the_walker_sees_circles_hidden_inside_functions(tmp_path: Path) -> None:
    package = tmp_path / "gate"
    (package / "api").mkdir(parents=True)
    (tmp_path / "channels").mkdir()
    (package / "__init__.py").write_text("")
    (package / "app.py").write_text("from gate.api import web\n")
    (package / "api" / "__init__.py").write_text("")
    (package / "api" / "web.py").write_text("def f():\n    from gate.app import State\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gate import app\n"
    )
    edges = import_graph(tmp_path)
    assert cycles(edges) == [["gate.api.web", "gate.app"]]
    hidden = [e for e in edges if e.source == "gate.api.web"]
    assert [(e.target, e.in_function) for e in hidden] == [("gate.app", True)]
    # a type-only import never runs, so it neither loads a module nor closes a circle
    assert not [e for e in edges if e.source == "gate.typed"]
    typed = [e.target for e in import_graph(tmp_path, type_only=True) if e.source == "gate.typed"]
    assert typed == ["gate.app"]


def test_no_import_circles() -> None:
    edges = import_graph()
    found = cycles(edges)
    assert not found, "import circles:\n" + "\n".join(describe(g, edges) for g in found)


def test_the_core_imports_no_channel() -> None:
    edges = import_graph()
    assert any(e.source.startswith("channels") and e.target.startswith("gate") for e in edges)
    wrong = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges
        if e.source.startswith("gate") and e.target.startswith("channels")
    ]
    assert not wrong, "gate must not import channels/ (they find it through entry points):\n" + (
        "\n".join(wrong)
    )


def test_nothing_below_the_composition_root_imports_it() -> None:
    # Not even for a type: what the parts share lives in gate.server.state, so gate.app stays on
    # top and only the command line (above it) may start it.
    edges = import_graph(type_only=True)
    wrong = [
        f"{e.source}:{e.line}"
        for e in edges
        if e.target in ROOTS and e.source != "gate.cli" and e.source.startswith("gate")
    ]
    assert not wrong, "gate.app is the composition root; imported by " + ", ".join(wrong)


def sizes(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """Modules over `MAX_MODULE_LINES` and functions over `MAX_FUNCTION_LINES` (a function's
    lines run from its first decorator to its last line, nested functions included)."""
    long_modules: list[str] = []
    long_functions: list[str] = []
    for path in modules(root).values():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            long_modules.append(f"{where}: {lines} lines")
        for node in ast.walk(parsed(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return long_modules, long_functions


def test_the_size_check_counts_decorators_and_nested_functions(tmp_path: Path) -> None:
    (tmp_path / "gate").mkdir()
    (tmp_path / "channels").mkdir()
    inner = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 3))
    (tmp_path / "gate" / "big.py").write_text(
        "@decorated\ndef outer():\n    def inner():\n"
        + inner
        + "    return inner\n"
        + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES)
    )
    long_modules, long_functions = sizes(tmp_path)
    assert long_modules == [f"gate/big.py: {MAX_MODULE_LINES + 1} lines"]
    assert long_functions == [f"gate/big.py:2 outer: {MAX_FUNCTION_LINES + 1} lines"]


def test_no_module_or_function_too_long_to_read_whole() -> None:
    long_modules, long_functions = sizes()
    assert not long_modules and not long_functions, (
        f"modules over {MAX_MODULE_LINES} lines:\n  "
        + "\n  ".join(long_modules or ["none"])
        + f"\nfunctions over {MAX_FUNCTION_LINES} lines:\n  "
        + "\n  ".join(long_functions or ["none"])
    )


# -- the layering between packages ------------------------------------------------------------

#: the modules at the top, which may import every package (and nothing imports them but cli)
ROOTS = ("gate.app", "gate.cli")
_MAY_IMPORT = re.compile(r"^May import:(.*?)(?:\n\s*\n|\Z)", re.M | re.S)


def package_of(module: str) -> str:
    """`gate.decisions.machine` -> `gate.decisions`; a module at the top is its own."""
    return ".".join(module.split(".")[:2])


def allowed_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Each gate package's "May import:" line, from its `__init__` docstring."""
    allowed: dict[str, set[str]] = {}
    for init in sorted((root / "gate").glob("*/__init__.py")):
        doc = ast.get_docstring(parsed(init.read_text(encoding="utf-8"), str(init))) or ""
        found = _MAY_IMPORT.search(doc)
        if found is not None:
            allowed[f"gate.{init.parent.name}"] = set(re.findall(r"gate\.\w+", found.group(1)))
    return allowed


def test_every_package_says_what_it_owns_and_may_import() -> None:
    packages = {f"gate.{p.parent.name}" for p in (ROOT / "gate").glob("*/__init__.py")}
    allowed = allowed_imports()
    assert packages - set(allowed) == set(), "packages whose __init__ has no 'May import:' line"
    for package, targets in allowed.items():
        unknown = targets - packages
        assert not unknown, f"{package} may import {unknown}, which are not gate packages"


def layering_violations(root: Path = ROOT) -> list[str]:
    """Imports across gate packages that the importer's "May import:" line does not allow
    (type-only imports count: a type names a dependency as surely as a call does)."""
    allowed = allowed_imports(root)
    return sorted(
        f"{e.source}:{e.line} imports {e.target}"
        for e in import_graph(root, type_only=True)
        if e.source.startswith("gate.")
        and e.target.startswith("gate.")
        and package_of(e.source) not in ROOTS
        and package_of(e.source) != package_of(e.target)
        and package_of(e.target) not in allowed.get(package_of(e.source), set())
    )


def test_packages_import_only_what_their_docstring_allows() -> None:
    wrong = layering_violations()
    assert not wrong, "imports across packages that their 'May import:' lines do not allow:\n" + (
        "\n".join(wrong)
    )


def test_the_allowed_imports_are_layers() -> None:
    # no two packages may ever import each other, even where neither does yet
    edges = [
        Edge(source, target, 0, False)
        for source, targets in allowed_imports().items()
        for target in targets
    ]
    assert cycles(edges) == [], "the 'May import:' lines allow a circle"


def test_the_layering_check_sees_a_type_only_import(tmp_path: Path) -> None:
    docs = {"low": "May import: nothing in gate.", "high": "May import: gate.low."}
    for package, doc in docs.items():
        (tmp_path / "gate" / package).mkdir(parents=True)
        (tmp_path / "gate" / package / "__init__.py").write_text(f'"""{package}.\n\n{doc}\n"""\n')
    (tmp_path / "gate" / "__init__.py").write_text("")
    (tmp_path / "channels").mkdir()
    (tmp_path / "gate" / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gate.high import b\n"
    )
    (tmp_path / "gate" / "high" / "b.py").write_text("from gate.low import a\n")
    assert allowed_imports(tmp_path) == {"gate.low": set(), "gate.high": {"gate.low"}}
    assert layering_violations(tmp_path) == ["gate.low.a:3 imports gate.high.b"]


def test_no_import_circles_even_for_types() -> None:
    edges = import_graph(type_only=True)
    found = cycles(edges)
    assert not found, "type-only import circles:\n" + "\n".join(describe(g, edges) for g in found)


def channel_surface(root: Path = ROOT) -> set[str]:
    """The gate modules `channels/README.md` lists under "What a channel may import"."""
    text = (root / "channels" / "README.md").read_text(encoding="utf-8")
    section = text.split("## What a channel may import", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\* `(gate[\w.]*)`", section, re.M))


def test_channels_import_only_their_documented_surface() -> None:
    surface = channel_surface()
    assert "gate.delivery.channel" in surface
    wrong = sorted(
        f"{e.source}:{e.line} imports {e.target}"
        for e in import_graph(type_only=True)
        if e.source.startswith("channels")
        and e.target.startswith("gate")
        and e.target not in surface
    )
    assert not wrong, "channels import beyond channels/README.md's list:\n" + "\n".join(wrong)
