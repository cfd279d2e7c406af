"""``wheelfed keygen``, ``wheelfed model register|list|show|deploy|rollback`` and ``wheelfed
predict`` as an operator runs them, against a real gateway process behind mosquitto: what
``model list`` and ``model show`` say each gateway runs follows deploys and rollbacks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.broker import BrokerUser, MosquittoBroker
from aggregator.fleet import PASSWORD_ENV, GatewayProcesses
from edge_client.processing import extract_recording
from edge_client.store import WindowRecord, WindowStore
from firmware_bridge.importers import seglearn_watch

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def cli(*args: str, env: dict | None = None, ok: bool | None = True) -> str:
    """Run ``wheelfed``; ``ok``: must succeed / must fail / either (None)."""
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )
    if ok is not None:
        assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_operator_workflow(tmp_path: Path) -> None:
    recording = seglearn_watch.import_all(tmp_path / "rec")[0]
    table, _ = extract_recording(recording)
    labelled = np.array([y is not None for y in table.labels])
    data = [(table.X[labelled], np.array([str(v) for v in table.labels[labelled]]))]
    model, more = (
        aggregator.simulate(
            FedForest(n_trees=n, max_depth=4, secure_aggregation=False, feature_set_version=table.feature_set_version),
            data,
        )
        for n in (5, 7)
    )
    (tmp_path / "model.json").write_text(model.to_json())

    out = cli("predict", str(recording), "--model", str(tmp_path / "model.json"), "-o", str(tmp_path / "p.csv"))
    assert "accuracy on" in out and "recall" in out
    assert len((tmp_path / "p.csv").read_text().splitlines()) == len(table.X) + 1

    key = str(tmp_path / "agg.key")
    assert "key id" in cli("keygen", "-o", key)
    assert "refusing to overwrite" in cli("keygen", "-o", key, ok=False)
    registry = str(tmp_path / "reg.db")
    assert "registered act:v1" in cli(
        "model", "register", str(tmp_path / "model.json"), "--registry", registry, "--model-id", "act"
    )
    (tmp_path / "act.json").write_text(more.to_json())
    assert "registered act:v2" in cli("model", "register", str(tmp_path / "act.json"), "--registry", registry)
    listed = cli("model", "list", "--registry", registry)
    assert "act:v1" in listed and "act:v2" in listed and "not deployed" in listed

    passwords = {"aggregator": secrets.token_hex(6), "gw-1": secrets.token_hex(6)}
    with WindowStore(tmp_path / "gw-1.db") as store:
        store.add(WindowRecord("s", 0, 1, table.X[0], table.feature_set_version))
    with MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
        processes = GatewayProcesses(broker.port, 5, passwords, tmp_path)
        try:
            processes.start("gw-1", "--store", str(tmp_path / "gw-1.db"), "--trust", str(tmp_path / "agg.pub"))
            env = dict(os.environ, **{PASSWORD_ENV: passwords["aggregator"]})
            broker_args = ("--registry", registry, "--port", str(broker.port), "--clients", "gw-1")
            deadline = time.monotonic() + 60
            out = ""
            while time.monotonic() < deadline:  # the gateway may still be starting: its inbox queues it anyway
                out = cli("model", "deploy", "act:v1", *broker_args, "--key", key, "--deadline", "10", env=env, ok=None)
                if "active on gw-1" in out:
                    break
            assert "active on gw-1" in out, out
            assert "no previous model" in cli("model", "rollback", *broker_args, "--key", key, env=env)
            assert "active on gw-1" in cli("model", "deploy", "act", *broker_args, "--key", key, env=env)
            assert rows_of(cli("model", "list", "--registry", registry)) == {
                "act:v1": "not deployed",
                "act:v2": "gw-1=active",
            }

            # the operator names no model: the rollback is signed per gateway from what the registry
            # recorded (act:v2 -> act:v1), and the registry learns where gw-1 ended up from its answer
            out = cli("model", "rollback", *broker_args, "--reason", "misses transfers", "--key", key, env=env)
            assert "rolled back gw-1" in out and "running act:v1" in out, out
            assert rows_of(cli("model", "list", "--registry", registry)) == {
                "act:v1": "gw-1=active",
                "act:v2": "not deployed",
            }
            assert "gw-1: active (rolled back: misses transfers)" in cli(
                "model", "show", "act:v1", "--registry", registry
            )
            assert "gw-1: replaced (now runs act:v1)" in cli("model", "show", "act:v2", "--registry", registry)
            # v2 again is a replay of a replaced release: refused with the way out
            out = cli("model", "deploy", "act:v2", *broker_args, "--key", key, env=env, ok=False)
            assert "downgrade: act:v2 was already accepted" in out and "signed rollback" in out, out
        finally:
            processes.stop_all()


def rows_of(listing: str) -> dict[str, str]:
    """``wheelfed model list`` as {MODEL: GATEWAYS}."""
    lines = listing.strip().splitlines()
    start = lines[0].index("GATEWAYS")
    return {line.split()[0]: line[start:].strip() for line in lines[1:]}
