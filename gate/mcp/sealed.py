"""The agent token of `gate mcp`, kept out of reach of the programs it starts and sits beside.

`gate mcp proxy` runs someone else's MCP server as its child, and both run as the same user.
Any process can read the environment another process of its user was started with
(`/proc/<pid>/environ` on Linux, `ps eww` elsewhere), and that copy stays as it was whatever
the process later does to its own `os.environ`. Giving the upstream an environment without
`GATE_TOKEN` is not enough: it would read the token from its parent's. So, first thing
(`gate.cli` calls `seal` before it imports `gate.mcp`, whose imports a restart would pay
twice):

* the token is taken from `GATE_TOKEN` and the process re-executes itself (same pid, same
  stdin and stdout) with an environment without it; the token crosses the exec through a pipe
  the new image reads and closes at once, so nothing it starts inherits it;
* on Linux the process then makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`): its
  `/proc` files, its memory included, are then closed to other processes of the same user
  (root with CAP_SYS_PTRACE aside, which can read any memory);
* the upstream is started with an environment without any `GATE_*` setting
  (`gate.mcp.proxy.upstream_env`).

`token()` is the token afterwards. Standard library only: this runs before anything heavy.
Outside the `gate.mcp` package for the same reason: importing a module of it runs the
package's own imports first.
"""

from __future__ import annotations

import os
import stat
import sys

ENV = "GATE_TOKEN"
#: where the re-executed process finds the pipe holding the token (internal to `seal`)
FD_ENV = "GATE_MCP_TOKEN_FD"
#: a gate token is a few dozen characters; a pipe takes this much without a reader (POSIX
#: promises at least 512 bytes, Linux 64 KiB), and more is no token gate issued
MAX_TOKEN_BYTES = 4096
#: prctl(2) option numbers, from <linux/prctl.h>
PR_SET_DUMPABLE = 4

_token: list[str | None] = [None]
_sealed = [False]


class SealError(Exception):
    """The token cannot be kept from other processes as configured (the message says why)."""


def token() -> str | None:
    """The agent token `seal` took from the environment (None when there was none)."""
    return _token[0]


def seal(argv: list[str]) -> str | None:
    """Take the token out of this process's environment for good; returns it.

    Re-executes the process the first time (see the module's docstring), when it was started
    as this command (its arguments end with `argv`, what `gate mcp` was given): call it before
    anything reads stdin. Raises SealError for a token that cannot be passed on.
    """
    if _sealed[0]:
        return _token[0]
    sent = os.environ.get(ENV)
    if sent and _can_reexec(argv):
        _reexec(sent)  # returns only if the exec failed
    held = os.environ.pop(FD_ENV, None)
    if held is not None:
        sent = sent or _read(held)
    os.environ.pop(ENV, None)
    _undumpable()
    _token[0] = sent or None
    _sealed[0] = True
    return _token[0]


def _can_reexec(argv: list[str]) -> bool:
    """A POSIX exec keeps the pid and stdio an MCP client talks to; Windows' does not, a
    frozen executable may not take the interpreter's arguments back, and a program that
    called `gate mcp` itself (not started as it) would be started again as itself."""
    started_as = not argv or sys.orig_argv[-len(argv) :] == argv
    if not started_as or os.name != "posix" or getattr(sys, "frozen", False):
        sys.stderr.write(
            f"gate mcp: cannot restart without ${ENV} in the environment; programs of the "
            "same user can read it from this process's\n"
        )
        return False
    return bool(sys.executable)


def _reexec(sent: str) -> None:
    data = os.fsencode(sent)
    if len(data) > MAX_TOKEN_BYTES:
        raise SealError(f"${ENV} is over {MAX_TOKEN_BYTES} bytes: that is no gate token")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # fits the pipe's buffer: never blocks
    finally:
        os.close(write_end)
    env = {k: v for k, v in os.environ.items() if k not in (ENV, FD_ENV)}
    env[FD_ENV] = str(read_end)
    os.set_inheritable(read_end, True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as exc:
        os.close(read_end)
        sys.stderr.write(
            f"gate mcp: could not restart without ${ENV} in the environment ({exc}); "
            "programs of the same user can read it from this process's\n"
        )


def _read(held: str) -> str | None:
    """The token from the pipe `_reexec` left open (closed once read)."""
    if not (held.isascii() and held.isdigit()) or int(held) < 3:
        return None  # not a descriptor gate opened: stdin and friends are not read
    fd = int(held)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, MAX_TOKEN_BYTES + 1):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return os.fsdecode(b"".join(chunks)) or None


def _undumpable() -> None:
    """Close this process's /proc files and memory to other processes of the same user."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # only here: the Linux-only step

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        failed = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
    except (OSError, AttributeError):
        failed = True
    if failed:
        sys.stderr.write(
            "gate mcp: could not make this process non-dumpable (prctl PR_SET_DUMPABLE); "
            "programs of the same user may read its memory\n"
        )
