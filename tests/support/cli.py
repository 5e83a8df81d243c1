"""The `gate` command, for tests of what a user types and reads: as a child process
(`run_gate`), or in this process (`gate_in_process`, `serve_refused`) where the process itself is
not what is under test.

A child process costs about half a second of CPU before it does anything (the interpreter,
gate's imports, pydantic's models); in this process those imports are already paid for, so a
test of a command's words and exit status runs in a few milliseconds. What only a process shows
(the console script, a signal, stdio, the exit status the shell sees) keeps a `run_gate` test
per command family.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def run_gate(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    unset: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `gate ARGS` (this checkout's, by `python -m gate.cli`) to the end; `env` is added to
    the test's environment, the variables named in `unset` left out. A minute at most: a
    command that hangs fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=cwd,
        env={k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset},
    )


#: commands `gate_in_process` refuses: `serve` would start a server (`serve_refused` runs the
#: ones a test expects to fail), `hook` catches stop signals and `mcp` may re-exec itself
#: (`gate.mcp.sealed`), both process-wide acts
NOT_IN_PROCESS = frozenset({"serve", "hook", "mcp"})


def gate_in_process(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    unset: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`run_gate`'s result, from `gate.cli.main(ARGS)` called in this process.

    stdout and stderr are captured, stdin is `stdin` (else empty, as a pipe would be), `env`
    is added to os.environ (`unset` taken out) and `cwd` made current for the call only; an
    uncaught exception is printed as the interpreter would (a traceback, exit 1), SystemExit
    gives the exit status. Logging, signal handlers, os.environ and the current directory
    are as they were after.
    """
    argv = [str(arg) for arg in args]
    if argv[:1] and argv[0] in NOT_IN_PROCESS:
        raise ValueError(f"`gate {argv[0]}` is not run in-process (see NOT_IN_PROCESS)")
    return _call(argv, env, cwd, stdin, unset)


class WouldServeError(AssertionError):
    """`serve_refused` reached the point where `gate serve` starts serving."""


def serve_refused(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    unset: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`gate serve ARGS` in this process, for a test that expects it to refuse its
    configuration (exit 2, one line): everything up to the server's start runs as in the
    real command (settings, the exposure check, the port taken, the app built, the database
    reached).

    It cannot start serving: `gate serve` builds the server's configuration
    (`gate.server.serve.server_config`, which also raises the process's open-file limit)
    just before it serves, and for this call that raises WouldServeError, which fails the
    test naming the configuration that was accepted (the port it took is closed and the
    app's database let go first, so nothing leaks into the tests after it).
    """
    import gate.server.serve as serving

    argv = ["serve", *map(str, args)]
    real_listen, real_config = serving.listen, serving.server_config
    taken: list[socket.socket] = []

    def listen(host: str, port: int) -> socket.socket:
        taken.append(real_listen(host, port))  # the real socket, kept to close it after
        return taken[-1]

    def tripwire(app: Any, settings: Any, **_: Any) -> Any:
        app.state.gate.db.dispose()
        raise WouldServeError(f"`gate {' '.join(argv)}` accepted its configuration and would serve")

    serving.listen, serving.server_config = listen, tripwire
    try:
        return _call(argv, env, cwd, None, unset)
    finally:
        serving.listen, serving.server_config = real_listen, real_config
        for sock in taken:
            sock.close()  # closed by `gate serve` itself unless the tripwire fired


def _call(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: Path | None,
    stdin: str | None,
    unset: Sequence[str],
) -> subprocess.CompletedProcess[str]:
    from gate.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env or {}, unset),
        _directory(cwd),
        _logging_kept(),
        _signals_kept(),
        _stdin(stdin or ""),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code: int | str | None = main(argv)
        except SystemExit as exc:
            code = exc.code
        except WouldServeError:
            raise
        except BaseException:
            traceback.print_exc()
            code = 1
        if isinstance(code, str):  # SystemExit("message"): printed, exit 1
            print(code, file=sys.stderr)  # noqa: T201
            code = 1
    return subprocess.CompletedProcess(
        ["gate", *argv], code or 0, stdout=out.getvalue(), stderr=err.getvalue()
    )


@contextlib.contextmanager
def _environment(env: dict[str, str], unset: Sequence[str]) -> Iterator[None]:
    """os.environ with `env` added and `unset` taken out, restored after. COLUMNS is pinned
    to what a child whose stdout is a pipe sees (80 unless set), so argparse wraps help the
    same way."""
    saved = dict(os.environ)
    os.environ.update({"COLUMNS": os.environ.get("COLUMNS", "80"), **env})
    for name in unset:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _directory(cwd: Path | None) -> Iterator[None]:
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    before = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = before


#: module-level switches `gate.base.logs.configure_logging` turns off (`gate serve`)
_LOGGING_SWITCHES = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """Every logger's level, handlers, propagation and the logging module's switches as
    they were (`gate serve` configures logging before it builds the app)."""
    loggers = {
        name: logger
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    kept = [
        (logger, logger.level, list(logger.handlers), logger.propagate, logger.disabled)
        for logger in [logging.root, *loggers.values()]
    ]
    switches = {name: getattr(logging, name) for name in _LOGGING_SWITCHES}
    try:
        yield
    finally:
        for name, value in switches.items():
            setattr(logging, name, value)
        for logger, level, handlers, propagate, disabled in kept:
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate, logger.disabled = propagate, disabled
        # a logger first named during the call is left to inherit its level, as one named
        # after it would
        for name, named in list(logging.root.manager.loggerDict.items()):
            if name not in loggers and isinstance(named, logging.Logger):
                named.setLevel(logging.NOTSET)


#: the signals a command could take over (`gate hook` catches the stops)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE)


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    handlers = {number: signal.getsignal(number) for number in _SIGNALS}
    try:
        yield
    finally:
        for number, handler in handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)
