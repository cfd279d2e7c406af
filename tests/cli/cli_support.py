"""Running ``wheelfed`` as a user would: a real process, its exit code, its stderr, its files."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliRun:
    code: int
    stdout: str
    stderr: str


def wheelfed(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60.0, stdin: str | None = None
) -> CliRun:
    """``python -m edge_client.cli ARGS`` in ``cwd`` (the repository on the path, no installed script needed)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO)}
    full_env.pop("WHEELFED_MQTT_PASSWORD", None)  # only what the test gives
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_failure(run: CliRun, code: int, *fragments: str) -> None:
    """Exit ``code``, no traceback, and stderr's last line names the problem (all ``fragments``).

    Warnings printed before the failure are allowed on stderr; the failure itself is one line
    that starts with ``wheelfed``.
    """
    assert "Traceback" not in run.stderr, run.stderr
    assert run.code == code, f"exit {run.code}, expected {code}; stderr: {run.stderr!r}"
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert last.startswith("wheelfed"), last
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
