"""The CEL engine is loaded without the package's command line (`gate.policy.cel_engine`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gate.policy import cel_engine


def test_a_compiled_rule_runs_and_bad_text_is_the_engines_error() -> None:
    program = cel_engine.compile_expression("args.amount > 100 && tool_name == 'pay'")
    assert program.execute({"args": {"amount": 150}, "tool_name": "pay"}) is True
    assert program.execute({"args": {"amount": 50}, "tool_name": "pay"}) is False
    with pytest.raises(ValueError):
        cel_engine.compile_expression("args.amount >")


@pytest.mark.parametrize("first", ["", "import cel; "])
def test_rules_load_without_the_cel_command_line(first: str) -> None:
    # the command line costs ~0.3 s of CPU per process (typer, prompt_toolkit, rich); with
    # `cel` already imported whole, that import is used as it is
    code = (
        f"{first}import sys; import gate.policy.rules; from gate.policy import cel_engine; "
        "p = cel_engine.compile_expression('1 + 1 == 2'); assert p.execute({}) is True; "
        "print(','.join(m for m in ('cel.cli', 'typer', 'prompt_toolkit') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = out.stdout.strip()
    assert loaded == ("" if not first else "cel.cli,typer,prompt_toolkit"), out.stderr
