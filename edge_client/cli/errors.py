"""The CLI's one error path: an expected failure is one line on stderr and an exit code.

Commands raise :class:`CliError` (a runtime failure: the broker is down, a file is not a
recording; exit 1) or :class:`UsageError` (the command line itself is wrong; exit 2) with a
message that names the problem and, where there is one, the fix. ``main`` prints
``wheelfed COMMAND: MESSAGE`` and returns the code; ``--debug`` shows the traceback instead.
Anything else that escapes a command is a genuine bug and keeps its traceback.
"""

from __future__ import annotations

USAGE = 2
RUNTIME = 1
INTERRUPTED = 130


class CliError(Exception):
    """An expected runtime failure, reported as one line (exit 1)."""

    exit_code = RUNTIME


class UsageError(CliError):
    """A wrong command line: a bad value, a missing file, options that do not go together (exit 2)."""

    exit_code = USAGE


def describe_os_error(exc: OSError) -> str:
    """``[Errno 2] No such file or directory: 'x'`` as ``no such file or directory: x``."""
    what = (exc.strerror or str(exc)).rstrip(".")
    what = what[:1].lower() + what[1:]
    return f"{what}: {exc.filename}" if exc.filename else what
