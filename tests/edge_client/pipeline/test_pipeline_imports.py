"""The pipeline runs on the gateway: importing it must not pull in training or server libraries,
and the gateway's runtime path must not load SciPy at all (numpy only)."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ["pandas", "sklearn", "xgboost", "tsfresh", "seglearn", "amqtt", "fastapi", "aggregator"]

#: Everything `wheelfed gateway` imports to run: serial link, frame processing, pipeline, features, store.
GATEWAY_RUNTIME = ["edge_client.pipeline", "edge_client.features", "edge_client.processing", "edge_client.gateway"]


def test_pipeline_imports_no_training_or_server_libraries() -> None:
    code = (
        "import sys\n"
        "import edge_client.pipeline\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"edge_client.pipeline pulled in {out.stdout.strip()}"


def test_gateway_runtime_path_imports_no_scipy() -> None:
    """``import scipy.signal`` alone costs ~108 MB of RSS against the gateway's 80 MB budget: the
    resampler, the low-pass and the ECG detector are numpy-only, and nothing on the path may load
    any scipy module (a fresh interpreter: the test process itself has scipy loaded)."""
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in GATEWAY_RUNTIME)
        + "print(','.join(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"the gateway's runtime path loaded {out.stdout.strip()[:500]}"
