"""``wheelfed train --algorithm fedga-tree`` over real mosquitto and four real gateway processes:
one personal tree per gateway, each equal to the simulation's tree for that gateway, written to
its own file, registered for that gateway only, scored on its own held-out windows, and
deployable (signed) to that gateway alone."""

from __future__ import annotations

import pytest

import aggregator
from aggregator.algorithms import FedGATree
from aggregator.registry import Registry
from shared.model import TreeEnsemble
from shared.signing import SigningKey
from tests.cli.cli_support import assert_one_line_failure, wheelfed
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, PASSWORDS, client_data, start_fleet

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def test_fedga_tree_saves_registers_and_deploys_one_tree_per_gateway(tmp_path, monkeypatch) -> None:
    key = SigningKey.generate()
    key.save(tmp_path / "aggregator.key")
    key.verify_key.save(tmp_path / "aggregator.pub")
    monkeypatch.chdir(tmp_path)  # the gateways keep their models in ./ID-models/
    with start_fleet(tmp_path, "--holdout-fraction", "0.2", "--trust", str(tmp_path / "aggregator.pub")) as fleet:
        fleet.agg.close()  # the command connects as the aggregator

        def cli(*args: str):
            return wheelfed(
                *args,
                "--port",
                str(fleet.port),
                cwd=tmp_path,
                env={"WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]},
                timeout=120,
            )

        run = cli(
            "train",
            "--algorithm",
            "fedga-tree",
            "--generations",
            "4",
            "--max-depth",
            "5",
            "--client-fraction",
            "0.5",
            "--seed",
            "3",
            # the gateways draw their count noise from the OS (the simulation from its seed): a
            # budget this large makes the noise (Laplace scale 1e-9) too small to change a ranking
            "--epsilon",
            "1e9",
            "-o",
            "trees.cbor",
            "--registry",
            "reg.db",
            "--evaluate",
        )
        assert run.code == 0, run.stderr
        lines = run.stdout.splitlines()
        assert [line.split(":")[0] for line in lines if line.startswith("fedga_tree ")] == [
            f"fedga_tree {g}/4" for g in range(1, 5)
        ], run.stdout
        assert (
            "registered fedga_tree.gw-1:v1, fedga_tree.gw-2:v1, fedga_tree.gw-3:v1, fedga_tree.gw-4:v1 in reg.db, "
            "each for its gateway only"
        ) in lines
        simulated = aggregator.simulate(
            FedGATree(generations=4, d_max=5, active_fraction=0.5, epsilon=1e9, feature_set_version=FEATURE_SET),
            client_data(fleet.stores, 0.2),
            seed=3,
        )
        with Registry(tmp_path / "reg.db") as registry:
            for gateway in GATEWAYS:
                saved = TreeEnsemble.from_cbor((tmp_path / f"trees.{gateway}.cbor").read_bytes())
                assert saved == simulated[gateway], gateway
                record, registered = registry.model(f"fedga_tree.{gateway}")
                assert registered == saved and record.target == gateway
                held_out = next(line for line in lines if line.startswith(f"held-out {gateway} (its own tree): "))
                assert record.metrics and f"accuracy={record.metrics['accuracy']:.4g}" in held_out
                assert (
                    f"{gateway}: its own tree (single, feature set {FEATURE_SET}) -> trees.{gateway}.cbor and "
                    f"fedga_tree.{gateway}:v1 in reg.db" in lines
                )
        assert len({(tmp_path / f"trees.{g}.cbor").read_bytes() for g in GATEWAYS}) > 1  # personal trees

        deployed = cli("model", "deploy", "fedga_tree.gw-2", "--registry", "reg.db", "--key", "aggregator.key")
        assert deployed.code == 0, deployed.stderr
        assert deployed.stdout.splitlines()[0] == "fedga_tree.gw-2:v1: active on gw-2"
        assert_one_line_failure(
            cli(
                "model",
                "deploy",
                "fedga_tree.gw-2",
                "--registry",
                "reg.db",
                "--key",
                "aggregator.key",
                "--clients",
                "gw-3",
            ),
            2,
            "personalised for gw-2",
        )
        assert_one_line_failure(
            cli("train", "--algorithm", "fedga-tree", "-o", "x.cbor", "--paper-protocol"),
            2,
            "--paper-protocol does not apply to fedga-tree",
        )
