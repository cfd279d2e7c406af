"""FedSCS-XGB end to end in simulation: real server and client halves over the memory transport.

Oracles:
* Lemma 1: K clients == one client holding their union, given the same edges (trees identical in
  structure, features, thresholds and directions; leaves within 1e-9).
* With exact pooled weighted-quantile edges, the boosted model equals a brute-force reference
  booster (Eq. 1 by loops, ``reference_tree`` of test_histogram_growth) round after round.
* Continuing from a model (``init_model``) equals the longer run, bit for bit.
* Dropouts and rejoins never apply a tree twice: every client's margins equal the model's.
* XGBoost loads the exported JSON and predicts the same margins.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.algorithms.histogram_growth import GrowthParams
from aggregator.jobs import FederatedJob, JobSettings, TrainingError
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.model import TreeEnsemble
from shared.objectives import Softmax
from shared.protocol.messages.fedscs_xgb import ModelDelta, RoundSplits, XgbAtomReply, XgbHistogramRequest, XgbTask
from shared.sketches import exact_edges
from tests.aggregator.test_histogram_growth import assert_same_tree, nested, reference_tree, structure


def make_clients(seed: int, n_clients: int = 4, n: int = 150, d: int = 5, *, objective: str = "softmax"):
    """Heterogeneous clients (shifted features, different sizes), NaNs, float32-exact values."""
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        m = n + 20 * k
        X = (rng.normal(size=(m, d)) + 0.3 * k).astype(np.float32).astype(np.float64)
        X[rng.random(X.shape) < 0.05] = np.nan
        s = np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) + rng.normal(scale=0.3, size=m)
        if objective == "softmax":
            y = np.digitize(s, [-0.3, 0.6])
        elif objective == "logistic":
            y = (s > 0.2).astype(int)
        else:
            y = s
        clients.append(ClientData(f"gw-{k}", X, y))
    return clients


def pooled(clients):
    return np.concatenate([c.X for c in clients]), np.concatenate([c.y for c in clients])


def trees_of(model: TreeEnsemble):
    return [nested(t) for t in model.trees]


def assert_same_model(got: TreeEnsemble, want: TreeEnsemble, tol: float = 1e-9) -> None:
    assert got.n_trees == want.n_trees
    np.testing.assert_array_equal(got.tree_output, want.tree_output)
    np.testing.assert_allclose(got.base_score, want.base_score, rtol=0, atol=tol)
    for a, b in zip(trees_of(got), trees_of(want)):
        assert_same_tree(a, b, exact=False, tol=tol, keys=("value", "cover"))


def fixed_edges(X: np.ndarray, n_bins: int = 16):
    """Count-quantile edges of the pooled data (any fixed edges will do for Lemma 1)."""
    return tuple(exact_edges(X[:, j], None, n_bins) for j in range(X.shape[1]))


# --- Lemma 1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", ["softmax", "logistic", "squared_error"])
@pytest.mark.parametrize("seed", range(3))
def test_k_clients_equal_one_client_holding_the_union_given_edges(objective: str, seed: int) -> None:
    clients = make_clients(seed, objective=objective)
    X, y = pooled(clients)
    config = FedSCSXGB(protocol="atoms", n_rounds=4, max_depth=3, objective=objective, edges=fixed_edges(X), gamma=0.05)
    federated = aggregator.simulate(config, clients, seed=seed)
    central = aggregator.simulate(config, [ClientData("everyone", X, y)], seed=seed)
    assert_same_model(federated, central)
    assert federated.n_trees == 4 * (3 if objective == "softmax" else 1)
    assert any(t.n_nodes > 1 for t in federated.trees)
    assert federated.classes == central.classes


def test_summary_sketch_edges_k_clients_are_close_to_pooled() -> None:
    """Without fixed edges the sketches differ (K mixtures vs one summary), but barely."""
    clients = make_clients(7)
    X, y = pooled(clients)
    federated = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=5, n_bins=64, summary_size=256), clients)
    central = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=5, n_bins=64, summary_size=256), [(X, y)])
    agree = (federated.predict(X.astype(np.float32)) == central.predict(X.astype(np.float32))).mean()
    assert agree > 0.97


# --- the brute-force reference booster ----------------------------------------------------------


def reference_booster(X, y, edges, params: GrowthParams, n_rounds: int, K: int):
    """Softmax boosting from Eq. 1 by loops: margins from the reference's own leaves."""
    objective = Softmax(K)
    counts = np.bincount(y, minlength=K).astype(float)
    margin = np.tile(objective.base_score(counts, mode="average"), (X.shape[0], 1))
    rounds = []
    for _ in range(n_rounds):
        g, h = objective.gradients(margin, y)
        trees = [reference_tree(X, edges, g[:, k], h[:, k], np.ones(X.shape[0]), params) for k in range(K)]
        for k, tree in enumerate(trees):
            for i in range(X.shape[0]):
                node = tree
                while "feature" in node:
                    x = X[i, node["feature"]]
                    left = node["default_left"] if np.isnan(x) else x < node["threshold"]
                    node = node["left"] if left else node["right"]
                margin[i, k] += node["value"]
        rounds.extend(trees)
    return rounds


@pytest.mark.parametrize("seed", range(2))
def test_equals_reference_booster_with_exact_pooled_weighted_quantile_edges(seed: int) -> None:
    clients = make_clients(seed, n_clients=3, n=40, d=3)
    X, y = pooled(clients)
    K = 3
    # exact pooled quantiles of the round-1 Hessian weights (softmax at the prior margins)
    objective = Softmax(K)
    base = objective.base_score(np.bincount(y, minlength=K).astype(float), mode="average")
    _, h = objective.gradients(np.tile(base, (X.shape[0], 1)), y)
    edges = tuple(exact_edges(X[:, j], h.sum(axis=1), 8) for j in range(X.shape[1]))
    config = FedSCSXGB(protocol="atoms", n_rounds=3, max_depth=3, edges=edges, gamma=0.02, min_child_weight=0.5)
    model = aggregator.simulate(config, clients)
    want = reference_booster(X.astype(np.float32).astype(np.float64), y, edges, config.growth, 3, K)
    got = trees_of(model)
    assert len(got) == len(want) == 9
    assert sum(t.n_nodes for t in model.trees) > 9 * 5  # real trees, not stumps
    for a, b in zip(got, want):
        assert_same_tree(a, b, exact=False, keys=("value", "cover"))


# --- retraining, sampling, determinism ----------------------------------------------------------


def test_continuing_from_a_model_equals_the_longer_run() -> None:
    clients = make_clients(3)
    sim = Simulation(clients)
    first = sim.run(FedSCSXGB(protocol="atoms", n_rounds=3, n_bins=32))
    continued = sim.run(FedSCSXGB(protocol="atoms", n_rounds=3, n_bins=32, init_model=first), job_id="retrain")
    whole = Simulation(clients).run(FedSCSXGB(protocol="atoms", n_rounds=6, n_bins=32))
    assert continued.n_trees == 18 and continued.metadata == whole.metadata
    # the clients' margins add the first 9 trees at once instead of round by round: same trees,
    # leaves equal up to float re-association
    assert_same_model(continued, whole)


def test_init_model_must_fit_the_job() -> None:
    clients = make_clients(3)
    binary = aggregator.simulate(
        FedSCSXGB(protocol="atoms", n_rounds=1, objective="logistic"), make_clients(3, objective="logistic")
    )
    with pytest.raises(TrainingError, match="init_model"):
        aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=1, init_model=binary), clients)


def test_client_sampling_is_seeded() -> None:
    clients = make_clients(4, n_clients=6)
    seen = []
    config = FedSCSXGB(protocol="atoms", n_rounds=4, n_bins=32, client_fraction=0.5)
    a = aggregator.simulate(config, clients, seed=1, progress=seen.append)
    b = aggregator.simulate(config, clients, seed=1)
    c = aggregator.simulate(config, clients, seed=2)
    assert [p.selected for p in seen] == [3] * 4 and [p.answered for p in seen] == [3] * 4
    assert a == b and a != c


def test_progress_reports_every_round_with_a_falling_loss() -> None:
    seen = []
    aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=5), make_clients(5), progress=seen.append)
    assert [p.step for p in seen] == [1, 2, 3, 4, 5] and all(p.total == 5 for p in seen)
    losses = [p.metrics["train_loss"] for p in seen]
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert "4/4 clients" in seen[0].line()


def test_accepts_plain_arrays_and_integer_or_string_labels() -> None:
    clients = make_clients(6)
    as_pairs = [(c.X, c.y) for c in clients]
    ints = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=2), as_pairs)
    assert ints.classes == (0, 1, 2)
    names = np.array(["sit", "push", "lie"])
    strs = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=2), [(X, names[y]) for X, y in as_pairs])
    assert strs.classes == ("lie", "push", "sit")
    X, _ = pooled(clients)
    np.testing.assert_array_equal(names[ints.predict(X)], strs.predict(X))


def test_regression_and_binary_objectives_learn() -> None:
    reg = make_clients(8, objective="squared_error")
    X, y = pooled(reg)
    with pytest.raises(TrainingError, match="regression objective"):
        aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=1), reg)  # continuous targets as class labels
    model = aggregator.simulate(
        FedSCSXGB(protocol="atoms", n_rounds=20, learning_rate=0.3, objective="squared_error"), reg
    )
    assert np.sqrt(np.mean((model.predict(X) - y) ** 2)) < 0.6 * y.std()
    binary = make_clients(8, objective="logistic")
    X, y = pooled(binary)
    model = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=10, objective="logistic"), binary)
    assert model.predict_proba(X).shape == (X.shape[0], 2) and (model.predict(X) == y).mean() > 0.85


def test_ddsketch_variant_trains_as_well() -> None:
    clients = make_clients(9)
    X, y = pooled(clients)
    for sketch in ("summary", "ddsketch"):
        model = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=8, sketch=sketch), clients)
        assert (model.predict(X) == y).mean() > 0.8, sketch


# --- partial participation -------------------------------------------------------------------------


def client_margins(sim: Simulation, client: str, job: str) -> tuple[np.ndarray, np.ndarray, int]:
    state = sim.participants[client].halves["fedscs_xgb"]._jobs[job]
    return state.X, state.margins, state.n_trees


def test_dropped_client_misses_rounds_and_rejoins_without_applying_a_tree_twice() -> None:
    clients = make_clients(10, n_clients=4)
    sim = Simulation(clients)
    events = {2: "drop", 4: "rejoin"}

    def on_round(progress) -> None:
        action = events.get(progress.step)
        if action == "drop":
            sim.transports["gw-1"].drop()
        elif action == "rejoin":
            sim.transports["gw-1"].reconnect()  # its queued old requests arrive now: answered late, ignored

    seen = []
    model = sim.run(
        FedSCSXGB(protocol="atoms", n_rounds=6, n_bins=32),
        job_id="job-drop",
        settings=JobSettings(deadline_s=0.3, min_fraction=0.5),
        progress=lambda p: (seen.append(p.answered), on_round(p)),
    )
    assert seen == [4, 4, 3, 3, 4, 4]
    for client in sim.transports:
        X, margins, n_trees = client_margins(sim, client, "job-drop")
        # margins are updated with the trees of the last round when the next request arrives
        partial = TreeEnsemble(
            trees=model.trees[:n_trees],
            kind="boosted",
            link="softmax",
            n_outputs=3,
            feature_names=model.feature_names,
            tree_output=model.tree_output[:n_trees],
            base_score=model.base_score,
            classes=model.classes,
        )
        np.testing.assert_allclose(margins, partial.predict_margin(X), rtol=0, atol=1e-12)
        assert n_trees == model.n_trees - 3


def test_a_client_that_restarts_sits_out_one_round_then_gets_the_whole_model() -> None:
    clients = make_clients(11, n_clients=3)
    sim = Simulation(clients)
    answered = []

    def forget(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 2:
            sim.participants["gw-2"].halves["fedscs_xgb"]._jobs.clear()  # a gateway restart loses its margins

    job = FederatedJob(
        sim.engine,
        list(sim.transports),
        job_id="job-restart",
        settings=JobSettings(deadline_s=1.0, min_fraction=0.5),
        progress=forget,
    )
    model = FedSCSXGB(protocol="atoms", n_rounds=4, n_bins=32).fit(job)
    assert answered == [3, 3, 2, 3]
    # round 3's sketch request assumed 6 trees: gw-2 (a fresh snapshot, 0 trees) refused to guess
    assert job.results[5].errors["gw-2"].code == "resync"
    X, margins, n_trees = client_margins(sim, "gw-2", "job-restart")
    assert n_trees == model.n_trees - 3  # round 4 sent it all 9 trees
    partial = TreeEnsemble(
        trees=model.trees[:n_trees],
        kind="boosted",
        link="softmax",
        n_outputs=3,
        feature_names=model.feature_names,
        tree_output=model.tree_output[:n_trees],
        base_score=model.base_score,
        classes=model.classes,
    )
    np.testing.assert_allclose(margins, partial.predict_margin(X), rtol=0, atol=1e-12)


class RogueAtoms:
    """Replaces a client's atom handler with one that returns a tampered reply."""

    def __init__(self, tamper) -> None:
        self.tamper = tamper

    def install(self, sim: Simulation, client: str) -> None:
        half = sim.participants[client].halves["fedscs_xgb"]
        original = half.on_atoms
        half_dispatcher = sim.participants[client].dispatcher
        half_dispatcher._handlers = {**half_dispatcher._handlers}

        def on_atoms(message):
            return self.tamper(original(message))

        from shared.protocol.messages.fedscs_xgb import XgbAtomRequest

        half_dispatcher._handlers[XgbAtomRequest] = on_atoms


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: XgbAtomReply(r.n_trees, r.n_samples, r.loss_sum, r.keys[:, :-1], r.counts, r.grad, r.hess),
        lambda r: XgbAtomReply(r.n_trees, r.n_samples, r.loss_sum, r.keys, r.counts, r.grad[:, :2], r.hess[:, :2]),
        lambda r: XgbAtomReply(r.n_trees, r.n_samples, r.loss_sum, np.full_like(r.keys, 250), r.counts, r.grad, r.hess),
        lambda r: XgbAtomReply(r.n_trees, r.n_samples, r.loss_sum, r.keys.astype(np.uint16), r.counts, r.grad, r.hess),
        lambda r: XgbAtomReply(r.n_trees + 1, r.n_samples, r.loss_sum, r.keys, r.counts, r.grad, r.hess),
    ],
    ids=["fewer-features", "fewer-classes", "bin-out-of-range", "wrong-id-dtype", "wrong-tree-count"],
)
def test_unusable_atom_replies_are_rejected_and_the_round_goes_on(tamper) -> None:
    clients = make_clients(12)
    X, _ = pooled(clients)
    # base_score="zero": the prior would count gw-3
    config = FedSCSXGB(protocol="atoms", n_rounds=3, edges=fixed_edges(X), base_score="zero")
    sim = Simulation(clients)
    RogueAtoms(tamper).install(sim, "gw-3")
    job = FederatedJob(sim.engine, list(sim.transports), job_id="rogue", settings=JobSettings(deadline_s=5))
    model = config.fit(job)
    assert job.rejected == {"gw-3": 3}
    honest = aggregator.simulate(config, clients[:3])
    assert_same_model(model, honest)


def test_no_usable_replies_is_a_clear_training_error() -> None:
    clients = make_clients(13, n_clients=2)
    sim = Simulation(clients)
    for client in sim.transports:
        RogueAtoms(
            lambda r: XgbAtomReply(r.n_trees + 5, r.n_samples, r.loss_sum, r.keys, r.counts, r.grad, r.hess)
        ).install(sim, client)
    with pytest.raises(TrainingError, match="no usable atom replies"):
        sim.run(FedSCSXGB(protocol="atoms", n_rounds=1))


def test_clients_without_data_are_left_out_with_their_reason() -> None:
    clients = make_clients(14, n_clients=3)
    empty = ClientData("gw-empty", np.zeros((0, 5)), np.zeros(0, int))
    sim = Simulation([*clients, empty])
    job = FederatedJob(
        sim.engine, list(sim.transports), job_id="j", settings=JobSettings(deadline_s=5, min_fraction=0.5)
    )
    model = FedSCSXGB(protocol="atoms", n_rounds=2).fit(job)
    assert job.results[0].errors["gw-empty"].code == "no_labelled_windows"
    assert model == aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=2), clients)


def test_clients_with_another_feature_count_are_rejected_at_setup() -> None:
    clients = make_clients(15, n_clients=3)
    odd = ClientData("gw-odd", np.zeros((10, 4)), np.zeros(10, int))
    sim = Simulation([*clients, odd])
    job = FederatedJob(sim.engine, list(sim.transports), job_id="j", settings=JobSettings(deadline_s=5))
    model = FedSCSXGB(protocol="atoms", n_rounds=2).fit(job)
    assert job.rejected == {"gw-odd": 1}
    assert model == aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=2), clients)


# --- export ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objective", "strategy"),
    [
        ("softmax", "one_output_per_tree"),
        ("softmax", "multi_output_tree"),
        ("logistic", "one_output_per_tree"),
        ("squared_error", "one_output_per_tree"),
    ],
)
def test_xgboost_loads_the_export_and_predicts_the_same_margins(objective: str, strategy: str) -> None:
    xgb = pytest.importorskip("xgboost")
    clients = make_clients(16, objective=objective)
    X, _ = pooled(clients)
    model = aggregator.simulate(
        FedSCSXGB(protocol="atoms", n_rounds=6, objective=objective, max_depth=4, multi_strategy=strategy), clients
    )
    booster = xgb.Booster()
    booster.load_model(bytearray(model.to_xgboost_json()))
    X32 = X.astype(np.float32)
    theirs = booster.predict(xgb.DMatrix(X32, missing=np.nan), output_margin=True)
    ours = model.predict_margin(X32)
    np.testing.assert_allclose(theirs.reshape(ours.shape), ours, rtol=0, atol=1e-6)
    assert json.loads(model.to_xgboost_json())["learner"]["gradient_booster"]["name"] == "gbtree"


# --- gamma is XGBoost's ------------------------------------------------------------------------------


def xgboost_cuts(X: np.ndarray, y: np.ndarray, n_bins: int = 32):
    """XGBoost's own cuts of ``X`` as FedSCS-XGB's fixed edges (the one thing left to differ)."""
    xgb = pytest.importorskip("xgboost")
    dtrain = xgb.QuantileDMatrix(X.astype(np.float32), label=y, max_bin=n_bins)
    ptr, values = dtrain.get_quantile_cut()
    return tuple(values[ptr[j] : ptr[j + 1]].astype(np.float32) for j in range(X.shape[1]))


@pytest.mark.parametrize("protocol", ["histogram", "atoms"])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0, 6.0])
def test_gamma_means_xgboost_s_gamma(protocol: str, gamma: float) -> None:
    """The same ``gamma`` number gives FedSCS-XGB and xgboost ``hist`` the same trees (given
    xgboost's cuts as edges); round 1, where both start from the class priors."""
    xgb = pytest.importorskip("xgboost")
    from tests.shared.model.xgboost_json import booster_to_ensemble

    clients = make_clients(21, n=300)
    X, y = pooled(clients)
    edges = xgboost_cuts(X, y)
    config = FedSCSXGB(
        protocol=protocol,
        n_rounds=1,
        max_depth=4,
        edges=edges,
        gamma=gamma,
        min_crowd=0,
        secure_aggregation=False,
        learning_rate=0.3,
    )
    ours = aggregator.simulate(config, clients)
    booster = xgb.train(
        {
            "objective": "multi:softprob",
            "num_class": 3,
            "tree_method": "hist",
            "max_bin": 32,
            "max_depth": 4,
            "eta": 0.3,
            "gamma": gamma,
            "nthread": 1,
        },
        xgb.QuantileDMatrix(X.astype(np.float32), label=y, max_bin=32),
        num_boost_round=1,
    )
    theirs = booster_to_ensemble(booster)
    assert ours.n_trees == theirs.n_trees == 3
    for a, b in zip(ours.trees, theirs.trees):
        assert structure(nested(a)) == structure(nested(b))
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), rtol=0, atol=1e-5)
    if gamma == 6.0:
        assert sum(t.n_nodes for t in ours.trees) < sum(
            t.n_nodes
            for t in aggregator.simulate(
                FedSCSXGB(
                    protocol=protocol,
                    n_rounds=1,
                    max_depth=4,
                    edges=edges,
                    gamma=gamma / 2,
                    min_crowd=0,
                    secure_aggregation=False,
                    learning_rate=0.3,
                ),
                clients,
            ).trees
        )


# --- multiclass strategies ------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["histogram", "atoms"])
@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_multi_strategy_equals_xgboost_hist_given_its_cuts(protocol: str, strategy: str) -> None:
    """Both multiclass strategies, both protocols: xgboost ``hist`` with the same
    ``multi_strategy`` and its cuts as our edges grows the same trees for 3 rounds (same
    features, thresholds, directions) and predicts the same probabilities to float32 precision."""
    xgb = pytest.importorskip("xgboost")
    from tests.shared.model.xgboost_json import booster_to_ensemble

    clients = make_clients(22, n=300)
    X, y = pooled(clients)
    edges = xgboost_cuts(X, y)
    config = FedSCSXGB(
        protocol=protocol,
        n_rounds=3,
        max_depth=4,
        edges=edges,
        gamma=0.1,
        min_crowd=0,
        secure_aggregation=False,
        learning_rate=0.3,
        multi_strategy=strategy,
    )
    ours = aggregator.simulate(config, clients)
    booster = xgb.train(
        {
            "objective": "multi:softprob",
            "num_class": 3,
            "tree_method": "hist",
            "max_bin": 32,
            "max_depth": 4,
            "eta": 0.3,
            "gamma": 0.1,
            "nthread": 1,
            "multi_strategy": strategy,
        },
        xgb.QuantileDMatrix(X.astype(np.float32), label=y, max_bin=32),
        num_boost_round=3,
    )
    theirs = booster_to_ensemble(booster)
    assert ours.n_trees == theirs.n_trees == (3 if strategy == "multi_output_tree" else 9)
    np.testing.assert_array_equal(ours.tree_output, theirs.tree_output)
    for a, b in zip(ours.trees, theirs.trees):
        assert structure(nested(a)) == structure(nested(b))
    X32 = X.astype(np.float32)
    np.testing.assert_allclose(ours.predict_proba(X32), theirs.predict_proba(X32), rtol=0, atol=1e-5)
    assert ours.metadata["n_rounds"] == 3 and ours.metadata["multi_strategy"] == strategy


@pytest.mark.parametrize("protocol", ["histogram", "atoms"])
def test_multi_output_tree_k_clients_equal_one_client_holding_the_union(protocol: str) -> None:
    """Lemma 1 with vector leaves: the fleet's model == one client holding the union's (the
    histogram protocol bit for bit: integer sums), and each round adds one tree with one weight
    per class."""
    clients = make_clients(23)
    X, y = pooled(clients)
    config = FedSCSXGB(
        protocol=protocol,
        n_rounds=3,
        max_depth=3,
        edges=fixed_edges(X),
        gamma=0.1,
        min_crowd=0,
        secure_aggregation=False,
        multi_strategy="multi_output_tree",
    )
    federated = aggregator.simulate(config, clients)
    central = aggregator.simulate(config, [ClientData("everyone", X, y)])
    assert federated.n_trees == 3 and (federated.tree_output == -1).all()
    assert all(t.n_outputs == 3 and t.n_nodes > 3 for t in federated.trees)
    if protocol == "histogram":
        assert federated.trees == central.trees
    assert_same_model(federated, central)
    per_class = aggregator.simulate(
        FedSCSXGB(
            protocol=protocol,
            n_rounds=3,
            max_depth=3,
            edges=fixed_edges(X),
            gamma=0.1,
            min_crowd=0,
            secure_aggregation=False,
        ),
        clients,
    )
    with pytest.raises(TrainingError, match="multi_strategy"):
        aggregator.simulate(
            FedSCSXGB(
                protocol=protocol,
                n_rounds=1,
                init_model=per_class,
                multi_strategy="multi_output_tree",
                secure_aggregation=False,
            ),
            clients,
        )


def test_multi_output_tree_under_secure_aggregation_and_minimum_crowd() -> None:
    """Masked sums change nothing (the same trees as unmasked), and no leaf holds fewer windows
    than the minimum crowd."""
    clients = make_clients(24, n_clients=4)
    X, _ = pooled(clients)
    base = dict(n_rounds=2, max_depth=6, min_crowd=30, multi_strategy="multi_output_tree", protocol="histogram")
    masked = aggregator.simulate(FedSCSXGB(**base), clients)
    plain = aggregator.simulate(FedSCSXGB(**base, secure_aggregation=False), clients)
    assert masked.trees == plain.trees
    leaves = masked.leaves(X.astype(np.float32))
    for t in range(masked.n_trees):
        assert np.bincount(leaves[:, t])[masked.trees[t].left < 0].min(initial=30) >= 30


def test_histogram_requests_size_their_vector_by_strategy() -> None:
    """A node's histogram holds 3 statistics per bin with one tree per class, 2K + 1 with vector
    leaves (every class's G and H, one count); a vector-leaf round has one tree, number 0."""
    edges = np.arange(4, dtype=np.float32)

    def request(strategy: str, node_tree: list[int]) -> XgbHistogramRequest:
        task = XgbTask("softmax", "", 2, np.zeros(3), ("a", "b", "c"), strategy)
        return XgbHistogramRequest(
            task,
            ModelDelta(),
            np.concatenate([edges, edges]),
            np.array([0, 4, 8]),
            RoundSplits.empty(),
            np.array(node_tree),
            np.zeros(len(node_tree), np.int64),
            20,
            1.0,
        )

    per_class = request("one_output_per_tree", [0, 1, 2])
    assert per_class.task.trees_per_round == 3 and per_class.length == 3 * 3 * 2 * 6
    vector = request("multi_output_tree", [0])
    assert vector.task.trees_per_round == 1 and vector.length == 1 * 7 * 2 * 6
    with pytest.raises(ValueError, match="node_tree"):
        request("multi_output_tree", [1])
    binary = XgbTask("logistic", "", 2, np.zeros(1), ("a", "b"), "multi_output_tree")
    assert not binary.vector_leaves and binary.node_columns == 1  # one output: nothing to share
