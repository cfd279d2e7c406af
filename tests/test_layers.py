"""The layering the import-linter contracts in ``.importlinter`` enforce, checked on every run.

shared <- firmware_bridge <- edge_client <- aggregator: nothing imports upward, the gateway
packages never import the aggregator nor xgboost, scikit-learn, pandas, FastAPI or SQLAlchemy.
"""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint_imports = pathlib.Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_aggregator_package_loads_no_gateway_code():
    # Estimators and simulation (above both sides) load only when first asked for.
    code = (
        "import sys, aggregator, aggregator.registry; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'edge_client'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_aggregator_names_stay_importable():
    import aggregator
    import aggregator.simulate  # noqa: F401 -- binding the submodule must not hide the function

    assert callable(aggregator.simulate) and aggregator.simulate.__name__ == "simulate"
    from aggregator import FedSCSXGBClassifier, Simulation  # noqa: F401
