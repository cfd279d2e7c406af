"""The repository passes ruff's pycodestyle and pyflakes rules and is formatted as ``ruff format``
writes it (``[tool.ruff]`` in pyproject.toml).

Lines up to 120 characters, no unused imports or names, no undefined names; the wire fingerprint
file written by ``python -m shared.protocol.wire`` is exempt from the line length only. Quotes are
kept as written.
"""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_format_changes_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
