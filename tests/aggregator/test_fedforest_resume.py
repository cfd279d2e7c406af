"""FedForest resumes from the state it reports with each level (``ForestState``).

Oracle: for every completed level k, a job started with level k's state on a fresh fleet (new
gateways that know nothing of the job) grows levels k+1.. only and ends with the forest an
uninterrupted run grows, bit for bit -- the histogram and paper's protocols, classification and
regression, AvgImp (open nodes without summaries) and client-indicator splits (categorical
decisions). A state that is no forest state, or was grown on other data, starts over.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.algorithms.fedforest import ForestState
from aggregator.simulate import Simulation
from tests.server.fleet_memory import fleet_data
from tests.server.test_resume import assert_same_model
from tests.server.test_resume_state import forest_states

BASE = {"n_trees": 3, "max_depth": 3, "n_bins": 8, "protocol": "histogram"}
CONFIGS = {
    "histogram": {},
    "histogram-regression": {"task": "regression"},
    "plain-avgimp": {"protocol": "sketches", "evaluation": "avgimp"},
    "plain-client-splits": {"protocol": "sketches", "client_splits": True, "bootstrap": False},
}


def clients_for(config: dict, seed: int = 0):
    # a gateway that labels by other features: the client indicator H is worth splitting on
    clients = fleet_data(n_clients=3, seed=seed, flipped=("gw-2",) if config.get("client_splits") else ())
    if config.get("task") == "regression":  # targets with an offset: the node shifts matter
        rng = np.random.default_rng(seed)
        clients = [dataclasses.replace(c, y=1000.0 + c.X[:, 0] + 0.1 * rng.normal(size=c.X.shape[0])) for c in clients]
    return clients


def resumed(config: dict, clients, state: bytes) -> tuple[object, list[int]]:
    """The model a job started with ``state`` grows on a fresh fleet, and the steps it reported."""
    steps: list[int] = []
    sim = Simulation(clients)
    model = sim.run(FedForest(**config, resume_state=state), progress=lambda p: steps.append(p.step))
    return model, steps


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_level_resumes_to_the_uninterrupted_forest(name) -> None:
    config = {**BASE, **CONFIGS[name]}
    clients = clients_for(config)
    straight = aggregator.simulate(FedForest(**config), clients)
    states = forest_states(config, clients)
    assert len(states) >= 2
    last = ForestState.from_cbor(states[max(states)])
    if config.get("client_splits"):  # categorical decisions (H) are replayed too
        assert sum(int(d.categorical.sum()) for d in last.decisions) > 0
    if config.get("evaluation") == "avgimp":  # open nodes whose summaries come with the next level
        assert not ForestState.from_cbor(states[1]).frontier_known.all()
    for k, state in sorted(states.items()):
        model, steps = resumed(config, clients, state)
        assert_same_model(model, straight)
        assert steps == list(range(k + 1, max(states) + 1)), k  # no level grown twice


def test_a_state_that_does_not_fit_starts_over(caplog) -> None:
    clients = clients_for({})
    straight = aggregator.simulate(FedForest(**BASE), clients)
    other = forest_states(BASE, clients_for({}, seed=5))[2]
    for state in (b"\x00not cbor", other):
        model, steps = resumed(BASE, clients, state)
        assert_same_model(model, straight)
        assert steps[0] == 1
    reasons = [getattr(r, "reason", "") for r in caplog.records if "starting over" in r.getMessage()]
    assert len(reasons) == 2 and "not a forest state" in reasons[0] and "fleet changed" in reasons[1]
    with pytest.raises(ValueError, match="forest state"):
        ForestState.from_cbor(b"\xa1\x61a\x01")  # a CBOR map, not a state
