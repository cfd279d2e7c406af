"""Jobs survive the server: SIGKILL ``wheelfed server`` during a job over real gateway processes
and mosquitto, start it again, and the job finishes from its last stored round with the model
an uninterrupted job grows -- no round lost, none applied twice. FedSCS-XGB resumes from the
stored model, FedForest from the stored level's state (its gateways, new to the attempt, catch
up on the stored split decisions).

"The same model" is bit for bit: the gateways of the resumed job add the trees grown before the
crash to their margins one boosting round at a time, as an uninterrupted job's do
(``edge_client/algorithms/fedscs_xgb.py``: ``apply``; before, one sum of them all was a few ulp
off)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from shared.model import TreeEnsemble
from tests.e2e.fleet_support import PASSWORDS, start_fleet
from tests.server.server_support import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def assert_same_model(resumed: TreeEnsemble, straight: TreeEnsemble) -> None:
    """The same model bit for bit: trees, splits, thresholds, leaf values and covers."""
    assert (resumed.n_trees, resumed.classes, resumed.tree_output.tolist()) == (
        straight.n_trees,
        straight.classes,
        straight.tree_output.tolist(),
    )
    np.testing.assert_array_equal(resumed.base_score, straight.base_score)
    for a, b in zip(resumed.trees, straight.trees):
        for name in ("feature", "threshold", "left", "right", "default_left", "value", "cover"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


JOBS = {
    "fedscs-xgb": {
        "algorithm": "fedscs-xgb",
        "model_id": "act",
        "config": {"n_rounds": 6, "max_depth": 3, "n_bins": 16, "protocol": "histogram"},
    },
    "fedforest": {
        "algorithm": "fedforest",
        "model_id": "act",
        "config": {"n_trees": 40, "max_depth": 8, "n_bins": 16, "protocol": "histogram"},
    },
}
#: The kill comes once this many rounds are stored (a forest's levels are quick: its first one).
KILL_AFTER = {"fedscs-xgb": 2, "fedforest": 1}


@pytest.mark.parametrize("algorithm", sorted(JOBS))
def test_a_job_killed_mid_way_resumes_and_ends_with_the_uninterrupted_model(tmp_path, algorithm) -> None:
    """FedSCS-XGB resumes from its stored model, FedForest from its stored level's state."""
    JOB = JOBS[algorithm]
    registry = str(tmp_path / "server.db")
    with start_fleet(tmp_path, "--holdout-fraction", "0.2") as fleet:
        fleet.agg.close()  # the server is the aggregator now (one connection per client id)
        server = ServerProcess(registry, fleet.port, PASSWORDS["aggregator"], tmp_path / "server.log")
        try:
            status, job = server.request("POST", "/api/jobs", JOB)
            assert status == 201, job
            at_kill = server.wait_job(job["job_id"], lambda j: j["completed"] >= KILL_AFTER[algorithm])["completed"]
            server.kill()
            killed_at = time.time()
            server = ServerProcess(registry, fleet.port, PASSWORDS["aggregator"], tmp_path / "server.log")
            done = server.wait_job(job["job_id"], lambda j: j["state"] == "completed")
            assert done["attempt"] == 2 and done["completed"] > at_kill
            rounds = done["rounds"]
            assert [r["step"] for r in rounds] == list(range(1, done["completed"] + 1))
            kept = [r["step"] for r in rounds if r["created"] < killed_at]
            assert kept[:at_kill] == list(range(1, at_kill + 1)), (at_kill, kept)  # not grown again
            assert all(r["created"] > killed_at for r in rounds[len(kept) :])

            status, again = server.request("POST", "/api/jobs", JOB)
            assert status == 201, again
            reference = server.wait_job(again["job_id"], lambda j: j["state"] == "completed")
            assert reference["attempt"] == 1 and reference["participants"] == done["participants"]
            assert reference["completed"] == done["completed"]
            resumed_model = server.get(f"/api/models/act/{done['result'].split(':v')[1]}/download")
            straight_model = server.get(f"/api/models/act/{reference['result'].split(':v')[1]}/download")
            assert_same_model(TreeEnsemble.from_cbor(resumed_model), TreeEnsemble.from_cbor(straight_model))
            assert done["evaluation"]["metrics"]["n"] > 0  # federated evaluation after the job
            assert server.terminate() == 143
        finally:
            if server.process.poll() is None:
                server.kill()
