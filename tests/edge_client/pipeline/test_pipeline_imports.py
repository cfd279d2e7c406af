"""The pipeline runs on the gateway: importing it must not pull in training or server libraries."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ["pandas", "sklearn", "xgboost", "tsfresh", "seglearn", "amqtt", "fastapi", "aggregator"]


def test_pipeline_imports_no_training_or_server_libraries() -> None:
    code = (
        "import sys\n"
        "import edge_client.pipeline\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"edge_client.pipeline pulled in {out.stdout.strip()}"
