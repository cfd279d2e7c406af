"""The feature package runs on the gateway: numpy and the stdlib only (tsfresh and scipy are test oracles).

SciPy is excluded too: ``import scipy.signal`` alone costs ~108 MB of RSS on a gateway with an
80 MB budget (the ECG detector's band-pass and peak search are numpy; see ecg.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

FORBIDDEN = ["pandas", "tsfresh", "sklearn", "xgboost", "statsmodels", "numba", "scipy", "edge_client.pipeline"]


def test_features_import_no_training_or_oracle_libraries() -> None:
    code = f"import sys, edge_client.features\nprint(','.join(sorted(m for m in {FORBIDDEN!r} if m in sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "", f"edge_client.features pulled in {out.stdout.strip()}"
