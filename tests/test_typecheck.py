"""The type-checked packages pass mypy (``[tool.mypy]`` in pyproject.toml names them and the options).

mypy runs from the repository root with that configuration only, so a local run of
``python -m mypy`` checks the same thing; third-party modules without type hints are listed
there one by one rather than ignored wholesale. No cache: the result does not depend on an
earlier run's state, and concurrent runs share nothing.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", os.devnull], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
