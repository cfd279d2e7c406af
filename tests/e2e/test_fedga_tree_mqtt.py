"""FedGA-Tree over mosquitto with real gateway processes: each gateway ends with its own tree,
equal to the simulation's for the same seed, and that tree deploys (signed) to that gateway only."""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedGATree
from aggregator.algorithms.fedga_tree import register_models
from aggregator.deployment import deploy
from aggregator.fleet import train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.registry import Registry
from aggregator.rounds import RoundEngine
from shared.model.bundle import ModelBundle
from shared.protocol.messages.deployment import ModelPush, ModelStatus
from shared.signing import SigningKey
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, PASSWORDS, client_data, fill_store, gateways_on_mosquitto

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def test_each_gateway_gets_the_simulation_s_tree_deployable_to_it_alone(tmp_path) -> None:
    key = SigningKey.generate()
    key.verify_key.save(tmp_path / "aggregator.pub")
    stores = {g: tmp_path / f"{g}.db" for g in GATEWAYS}
    for i, path in enumerate(stores.values()):
        fill_store(path, i)
    with gateways_on_mosquitto(tmp_path, PASSWORDS) as fleet:
        processes, agg, presence = fleet.processes, fleet.agg, fleet.presence
        for g in GATEWAYS:
            processes.start(
                g,
                "--store",
                str(stores[g]),
                "--holdout-fraction",
                "0.2",
                "--trust",
                str(tmp_path / "aggregator.pub"),
                "--model-dir",
                str(tmp_path / f"{g}-models"),
                "--engine",
                "numpy",
            )
        presence.wait(GATEWAYS, online=True, timeout_s=60)
        presence.close()
        engine = RoundEngine(agg)
        # exact counts: a gateway draws its count noise from OS entropy, which no simulation repeats
        config = FedGATree(generations=6, d_max=6, active_fraction=0.5, feature_set_version=FEATURE_SET, epsilon=None)
        models, job = train_on_fleet(
            config, agg, clients=GATEWAYS, seed=3, settings=JobSettings(deadline_s=60), engine=engine
        )
        simulated = aggregator.simulate(config, client_data(stores, 0.2), seed=3)
        assert sorted(models) == GATEWAYS and not job.rejected
        for g in GATEWAYS:
            assert models[g] == simulated[g] and models[g].kind == "single"
        assert len({m.to_cbor() for m in models.values()}) > 1  # personal trees

        registry = Registry(tmp_path / "registry.db")
        records = register_models(registry, "fedga", models)
        assert records["gw-1"].target == "gw-1"
        result = deploy(engine, registry, key, "fedga.gw-1", None, ["gw-1"])
        assert result.active == ["gw-1"]
        with pytest.raises(ValueError, match="goes to that gateway only"):
            deploy(engine, registry, key, "fedga.gw-1", None, ["gw-2"])
        # signed for gw-1 and pushed to gw-2 anyway: gw-2 refuses it
        bundle = ModelBundle.create(models["gw-1"], model_id="fedga.gw-1", version=1, signing_key=key, target="gw-1")
        answer = engine.run_round(
            "push-elsewhere", 1, ModelPush(bundle.to_bytes()), ["gw-2"], deadline_s=20, expect=ModelStatus
        )
        status = answer.replies["gw-2"].body
        assert status.state == "rejected" and "personalised for client 'gw-1'" in status.reason
        X = np.concatenate([c.X for c in client_data(stores, 0.2)])
        assert models["gw-1"].predict(X).shape == (X.shape[0],)
        registry.close()
