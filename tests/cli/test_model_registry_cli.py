"""``wheelfed model register|list|show|export`` as an operator types them, and every way they fail.

The commands run as separate processes (``cli_support.wheelfed``) on a real recording and on
models trained on it. Deploy and rollback against real gateways are in
``tests/e2e/test_model_cli.py``; here they only fail, before or at the broker.
"""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_support import assert_one_line_failure, files_under, wheelfed

USAGE, RUNTIME = 2, 1
METRICS = {
    "n": 120.0,
    "accuracy": 0.9166666,
    "balanced_accuracy": 0.9,
    "macro_f1": 0.8812,
    "log_loss": 0.31,
    "auc": float("nan"),
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording, a boosted and a forest model trained on it, a registry holding them, keys."""
    from aggregator import simulate
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.registry import Registry
    from edge_client.processing import extract_recording
    from firmware_bridge.importers import seglearn_watch
    from shared.signing import SigningKey

    folder = tmp_path_factory.mktemp("models")
    recording = seglearn_watch.import_all(tmp_path_factory.mktemp("recordings"))[0]
    shutil.copy(recording, folder / "rec.wfrec")
    table, _ = extract_recording(folder / "rec.wfrec")
    labelled = np.array([y is not None for y in table.labels])
    data = [(table.X[labelled], np.array([str(v) for v in table.labels[labelled]]))]
    fsv = table.feature_set_version
    boosted = simulate(
        FedSCSXGB(n_rounds=3, max_depth=3, n_bins=32, secure_aggregation=False, feature_set_version=fsv), data
    )
    forest = simulate(FedForest(n_trees=3, max_depth=4, secure_aggregation=False, feature_set_version=fsv), data)
    (folder / "model.json").write_text(boosted.to_json())
    (folder / "table.csv").write_text("a,b\n1,2\n")
    (folder / "not-a-registry.db").write_bytes(b"not sqlite at all" * 100)
    with Registry(folder / "reg.db") as registry:
        registry.add("activity", boosted, metrics=METRICS)
        registry.add("forest", forest)
        registry.add("personal", boosted, target="gw-2")
    key = SigningKey.generate()
    key.save(folder / "agg.key")
    key.verify_key.save(folder / "agg.pub")
    key.save(folder / "open.key")
    os.chmod(folder / "open.key", 0o644)
    return folder


def _closed_port() -> int:
    from aggregator.broker.mosquitto import find_free_port

    return find_free_port()


def _fresh(scratch: Path, tmp_path: Path, *names: str) -> Path:
    """A working folder with copies of ``names`` from the scratch folder (tests that write)."""
    for name in names:
        shutil.copy(scratch / name, tmp_path / name)
    return tmp_path


def test_register_takes_the_file_as_its_help_says(scratch: Path, tmp_path: Path) -> None:
    work = _fresh(scratch, tmp_path, "model.json")
    run = wheelfed("model", "register", "model.json", "--registry", "reg.db", cwd=work)
    assert run.code == 0 and "registered model:v1 in reg.db (fedscs-xgb, " in run.stdout, run
    assert "registered model:v2" in wheelfed("model", "register", "model.json", "--registry", "reg.db", cwd=work).stdout
    assert (
        "registered activity:v1"
        in wheelfed(
            "model", "register", "model.json", "--model-id", "activity", "--registry", "reg.db", cwd=work
        ).stdout
    )
    assert (
        "registered activity:v2"
        in wheelfed(
            "model", "register", "--file", "model.json", "--model-id", "activity", "--registry", "reg.db", cwd=work
        ).stdout
    )  # the older spelling
    listed = wheelfed("model", "list", "--registry", "reg.db", cwd=work).stdout
    assert [line.split()[0] for line in listed.splitlines()] == [
        "MODEL",
        "activity:v1",
        "activity:v2",
        "model:v1",
        "model:v2",
    ]
    help_text = " ".join(wheelfed("model", "register", "--help", cwd=work).stdout.split())
    assert "default: the file's name without its suffix" in help_text


def test_show_formats_metrics_and_settings(scratch: Path) -> None:
    run = wheelfed("model", "show", "activity", "--registry", "reg.db", cwd=scratch)
    assert run.code == 0, run
    assert (
        "held-out metrics (120 windows): accuracy 0.9167, balanced_accuracy 0.9, macro_f1 0.8812, "
        "log_loss 0.31, auc n/a" in run.stdout
    )
    assert "training settings: algorithm=fedscs_xgb, " in run.stdout and "{" not in run.stdout
    assert "gateways: not deployed" in run.stdout

    run = wheelfed("model", "show", "forest:v1", "--registry", "reg.db", cwd=scratch)
    assert "no metrics (train with --evaluate" in run.stdout and "metrics: {}" not in run.stdout
    run = wheelfed("model", "show", "personal", "--registry", "reg.db", cwd=scratch)
    assert "for gateway gw-2 only" in run.stdout


def test_list_shows_the_headline_metric(scratch: Path) -> None:
    rows = {
        line.split()[0]: line
        for line in wheelfed("model", "list", "--registry", "reg.db", cwd=scratch).stdout.splitlines()
    }
    assert "accuracy 0.9167" in rows["activity:v1"] and "not deployed" in rows["activity:v1"]
    assert rows["forest:v1"].split()[4] == "-"


def _predicted(csv_path: Path) -> list[str]:
    with open(csv_path) as fh:
        return [row["predicted"] for row in csv.DictReader(fh)]


@pytest.mark.parametrize("name", ["exported.cbor", "exported.json"])
def test_exported_model_predicts_what_the_registered_one_does(scratch: Path, tmp_path: Path, name: str) -> None:
    from aggregator.registry import Registry
    from edge_client.processing import extract_recording
    from shared.model import model_inputs

    work = _fresh(scratch, tmp_path, "reg.db", "rec.wfrec")
    run = wheelfed("model", "export", "activity", "--registry", "reg.db", "-o", name, cwd=work)
    assert run.code == 0 and "wrote activity:v1 (fedscs-xgb, " in run.stdout, run
    run = wheelfed("predict", "rec.wfrec", "--model", name, "-o", "p.csv", cwd=work)
    assert run.code == 0 and "accuracy on" in run.stdout, run

    with Registry(work / "reg.db") as registry:
        _record, model = registry.model("activity")
    table, _ = extract_recording(work / "rec.wfrec")
    expected = model.predict(model_inputs(model, table.X.astype(np.float32)))
    assert _predicted(work / "p.csv") == [str(p) for p in expected]


def test_xgboost_export_loads_in_xgboost_with_the_same_probabilities(scratch: Path, tmp_path: Path) -> None:
    xgb = pytest.importorskip("xgboost")
    from aggregator.registry import Registry
    from edge_client.processing import extract_recording
    from shared.model import model_inputs

    work = _fresh(scratch, tmp_path, "reg.db")
    run = wheelfed(
        "model",
        "export",
        "activity:v1",
        "--registry",
        "reg.db",
        "-o",
        "booster.json",
        "--format",
        "xgboost-json",
        cwd=work,
    )
    assert run.code == 0 and "load_model" in run.stdout, run
    booster = xgb.Booster()
    booster.load_model(bytearray((work / "booster.json").read_bytes()))
    with Registry(work / "reg.db") as registry:
        _record, model = registry.model("activity", 1)
    table, _ = extract_recording(scratch / "rec.wfrec")
    X = model_inputs(model, table.X.astype(np.float32))
    np.testing.assert_allclose(booster.inplace_predict(X), model.predict_proba(X), rtol=0, atol=1e-5)


# (arguments, exit code, fragments of the one line); {closed} is a port nothing listens on
MISTAKES: list[tuple[str, int, tuple[str, ...]]] = [
    ("model list --registry nope.db", USAGE, ("no registry at nope.db",)),
    ("model list --registry not-a-registry.db", RUNTIME, ("not-a-registry.db is not a usable registry",)),
    ("model show nope --registry reg.db", RUNTIME, ("no model 'nope'", "activity (v1), forest (v1), personal (v1)")),
    ("model show activity:v9 --registry reg.db", RUNTIME, ("no version 9 of activity", "it has activity:v1")),
    ("model show activity:v --registry reg.db", USAGE, ("MODEL_ID:vN",)),
    ("model export nope --registry reg.db -o x.cbor", RUNTIME, ("no model 'nope'",)),
    ("model export activity --registry reg.db", USAGE, ("-o/--output",)),
    ("model export activity --registry reg.db -o x.txt", USAGE, ("must end in .json or .cbor",)),
    ("model export activity --registry reg.db -o x.cbor --format xgboost-json", USAGE, ("name the file .json",)),
    (
        "model export forest --registry reg.db -o x.json --format xgboost-json",
        RUNTIME,
        ("forest:v1 cannot be written as XGBoost JSON", "only boosted"),
    ),
    ("model register --registry reg.db", USAGE, ("needs a model file",)),
    ("model register nope.json --registry reg.db", USAGE, ("no such file: nope.json",)),
    ("model register table.csv --registry reg.db", USAGE, ("table.csv is not a WheelFed model",)),
    ("model register model.json --file model.json --registry reg.db", USAGE, ("give the model file once",)),
    ("model register model.json --model-id bad:id --registry reg.db", USAGE, ("not a usable model id",)),
    ("model deploy nope --registry reg.db --key agg.key --port {closed}", RUNTIME, ("no model 'nope'",)),
    ("model deploy activity --registry reg.db --key nope.key", USAGE, ("no signing key at nope.key", "keygen")),
    ("model deploy activity --registry reg.db --key open.key", USAGE, ("mode 0644", "chmod 600 open.key")),
    ("model deploy activity --registry reg.db --key agg.pub", USAGE, ("agg.pub is the public key", "agg.key")),
    ("model deploy activity --registry reg.db --key table.csv", USAGE, ("table.csv is not a signing key",)),
    ("model deploy personal --registry reg.db --key agg.key --clients gw-1", USAGE, ("personalised for gw-2",)),
    ("model deploy activity --registry reg.db --key agg.key --port {closed}", RUNTIME, ("connection refused",)),
    ("model rollback --registry reg.db --key agg.key --port {closed}", RUNTIME, ("connection refused",)),
    ("model rollback --registry nope.db --key agg.key", USAGE, ("no registry at nope.db",)),
    ("model rollback --registry reg.db", USAGE, ("no signing key at aggregator.key", "keygen")),
    ("model rollback --registry reg.db --key open.key", USAGE, ("mode 0644", "chmod 600 open.key")),
    ("model rollback --registry reg.db --key agg.pub", USAGE, ("agg.pub is the public key", "agg.key")),
]


@pytest.mark.parametrize("line, code, fragments", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistake_is_one_clear_line(scratch: Path, line: str, code: int, fragments: tuple[str, ...]) -> None:
    before = files_under(scratch)
    run = wheelfed(*line.format(closed=_closed_port()).split(), cwd=scratch)
    assert_one_line_failure(run, code, *fragments)
    assert files_under(scratch) == before, "the command left a file behind"


@pytest.mark.mosquitto
def test_deploy_and_rollback_with_no_gateway_or_a_refused_login(scratch: Path, mosquitto) -> None:
    from tests.conftest import PASSWORDS

    broker = ("--registry", "reg.db", "--port", str(mosquitto.port))
    env = {"WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]}
    for command in (("deploy", "activity", "--key", "agg.key"), ("rollback", "--key", "agg.key")):
        assert_one_line_failure(
            wheelfed("model", *command, *broker, cwd=scratch, env=env), RUNTIME, "no gateway online", "--clients"
        )
        assert_one_line_failure(
            wheelfed("model", *command, *broker, cwd=scratch, env={"WHEELFED_MQTT_PASSWORD": "wrong"}),
            RUNTIME,
            "aggregator",
        )
