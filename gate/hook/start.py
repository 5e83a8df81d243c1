"""The first thing `gate hook` does: hold on to a stop signal that arrives while it starts.

A hook stopped (SIGTERM, SIGINT, SIGHUP) before it has handlers for them dies by the signal
with no answer, and Codex runs a call whose hook failed. The hook's imports take tens of
milliseconds (over 100 on a loaded machine), so `gate.cli` calls `catch()` before importing
anything else, when its command is `hook`. A signal caught here is only remembered;
`gate.hook.command` takes the handlers over once loaded, and answers with a deny as soon as it reads
`caught()`. What remains uncovered is the interpreter's own start, before any of gate's code
runs.

The handlers come from the interpreter's builtin `_signal`: the `signal` module imports
enum, which costs more than everything else here.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: typing costs milliseconds here. `_signal` has the same functions
# and constants as `signal` (which wraps them in enums), but no type stubs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as signals
else:
    try:
        import _signal as signals
    except ImportError:  # an interpreter without the builtin: the module, slower to import
        import signal as signals

#: the signals that mean "stop": a runtime's timeout or cancel, Ctrl-C, a closed terminal
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
_caught: list[int] = []


def catch() -> None:
    """Remember the first stop signal from now on, instead of dying of it."""
    for name in STOP_SIGNALS:
        number = getattr(signals, name, None)
        if number is None:
            continue
        try:
            signals.signal(number, _remember)
        except ValueError:  # not the main thread: nothing to catch signals with
            return


def _remember(signum: int, frame: object) -> None:
    if not _caught:
        _caught.append(signum)


def caught() -> int | None:
    """The stop signal `catch()` remembered, if one arrived."""
    return _caught[0] if _caught else None
