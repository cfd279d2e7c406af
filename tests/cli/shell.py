"""A small stand-in for the user's shell: runs README lines such as
``WHEELFED_MQTT_PASSWORD=PW1 wheelfed gateway --client-id gw-1 ...`` as written, in one folder.

Long-running commands (a broker, a gateway, ``replay --pty``, ``record`` without a duration)
start in the background and count as started once they print their first line; ``stop_all``
sends them Ctrl-C and checks they end cleanly. Everything else must finish with exit 0.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cli.cli_support import REPO, CliRun

_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=.*")


@dataclass
class Background:
    """A command left running: its process and every stdout/stderr line so far."""

    line: str
    process: subprocess.Popen
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for text in list(self.out):
                match = re.search(pattern, text)
                if match:
                    return match
            if self.process.poll() is not None:
                time.sleep(0.2)  # let the reader threads catch the last lines
                raise AssertionError(f"{self.line!r} exited with {self.process.returncode}: {''.join(self.err)}")
            time.sleep(0.05)
        raise AssertionError(f"{self.line!r} did not print {pattern!r} within {timeout_s} s: {''.join(self.out)}")


def is_daemon(argv: list[str]) -> bool:
    """Commands that run until stopped (``--check`` makes the services one-shot)."""
    command = argv[0] if argv else ""
    return (
        (command in ("broker", "gateway", "server") and "--check" not in argv)
        or (command == "replay" and "--pty" in argv)
        or (command == "record" and "--duration" not in argv)
    )


def _pump(stream, sink: list[str]) -> None:
    for text in iter(stream.readline, ""):
        sink.append(text)


class Shell:
    """Runs ``wheelfed`` lines in ``cwd`` with ``export``ed variables and textual substitutions."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.cwd = cwd
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.env.pop("WHEELFED_MQTT_PASSWORD", None)  # only what the README exports
        self.env.update(env or {})
        self.substitutions: dict[str, str] = {}
        self.background: list[Background] = []

    def _parse(self, line: str) -> tuple[dict[str, str], list[str]]:
        for old, new in self.substitutions.items():
            line = line.replace(old, new)
        words = shlex.split(line, comments=True)
        env: dict[str, str] = {}
        while words and _ASSIGNMENT.fullmatch(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if words[:1] == ["export"]:
            for word in words[1:]:
                name, _, value = word.partition("=")
                self.env[name] = value
            return env, []
        assert words[:1] == ["wheelfed"], f"not a wheelfed command: {line!r}"
        return env, words[1:]

    def run(self, line: str, timeout_s: float = 300.0) -> CliRun | Background | None:
        """Run ``line``: a CliRun when it finished, a Background when it keeps running, None for ``export``."""
        env, argv = self._parse(line)
        if not argv:
            return None
        command = [sys.executable, "-m", "edge_client.cli", *argv]
        if is_daemon(argv):
            process = subprocess.Popen(
                command,
                cwd=self.cwd,
                env={**self.env, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            job = Background(line, process)
            for stream, sink in ((process.stdout, job.out), (process.stderr, job.err)):
                threading.Thread(target=_pump, args=(stream, sink), daemon=True).start()
            self.background.append(job)
            return job
        proc = subprocess.run(
            command, cwd=self.cwd, env={**self.env, **env}, capture_output=True, text=True, timeout=timeout_s
        )
        return CliRun(proc.returncode, proc.stdout, proc.stderr)

    def stop(self, job: Background, timeout_s: float = 20.0) -> int:
        """Ctrl-C, as a user would; returns the exit code."""
        if job.process.poll() is None:
            job.process.send_signal(signal.SIGINT)
        try:
            return job.process.wait(timeout_s)
        finally:
            if job.process.poll() is None:
                os.killpg(job.process.pid, signal.SIGKILL)

    def stop_all(self) -> dict[str, tuple[int, str]]:
        """Stop every background command (newest first); line -> (exit code, stderr)."""
        results = {}
        for job in reversed(self.background):
            code = self.stop(job)
            time.sleep(0.1)
            results[job.line] = (code, "".join(job.err))
        self.background.clear()
        return results
