"""The CEL engine (the `common-expression-language` package), loaded without its command line.

The package's `__init__` imports `cel.cli` (typer, prompt_toolkit and rich) before the Rust
extension that does the work: about 0.3 s of CPU, a third of `gate serve`'s imports, in every
process that compiles a rule (`gate serve`, every `gate policy` command), for a command line
gate never runs. So the package is created from its spec without running that `__init__`, and
only the extension, `cel.cel`, is loaded into it.

This relies on the package's layout: the extension at `cel.cel` with `compile`. The public
alternative, `import cel`, was measured at 0.32 s of user CPU against 0.01 s for this on the
same machine; the version is pinned below the next minor release in `pyproject.toml`, and
`tests/core/test_library_privates.py` fails naming this module if a release moves the extension.
If `cel` was already imported whole (a test, a plugin), that import is used as it is; imported
after this, it finds the extension's names on the package, as its `__init__` would have put them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

#: what gate calls the package by, and its extension
PACKAGE, EXTENSION = "cel", "cel.cel"


def _extension() -> Any:
    loaded = sys.modules.get(EXTENSION)
    if loaded is not None:
        return loaded
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError("the CEL engine (common-expression-language) is not installed")
        # the package module, its __init__ left unrun: `import cel.cel` then finds the
        # extension through its search path
        sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
    extension = importlib.import_module(EXTENSION)
    # what the package's `from .cel import *` gives, so a later `import cel` (a test, a plugin)
    # finds `cel.compile` and the rest where it expects them
    package = sys.modules[PACKAGE]
    for name in getattr(extension, "__all__", None) or dir(extension):
        if not name.startswith("_") and not hasattr(package, name):
            setattr(package, name, getattr(extension, name))
    return extension


_engine = _extension()


def compile_expression(text: str) -> Any:
    """`text` compiled to a CEL program (`program.execute(activation)` runs it); raises the
    engine's own error for text that is not CEL."""
    return _engine.compile(text)


def context(variables: dict[str, Any], functions: dict[str, Any]) -> Any:
    """What `program.execute` runs on when a condition calls functions gate supplies (the
    history terms, `gate.policy.history`): `variables` and those Python functions."""
    return _engine.Context(variables=variables, functions=functions)
