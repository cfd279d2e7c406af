"""FedGA-Tree in simulation: the client's CART engine, the server's view, the protocol's rules.

Oracles:
* CART on a fixed structure == scikit-learn: a structure read off scikit-learn's own CART tree,
  refitted by the client, routes every input as scikit-learn's tree does and holds the same
  thresholds (the next float above scikit-learn's, since WheelFed goes left iff x < t); for
  random structures, every node's threshold is that of a scikit-learn stump fitted on the node's
  samples and its feature (recursive reference); regression leaf values to 1e-9.
* Plain CART (unique optimum, no ties) == scikit-learn's tree; macro F1, R² == scikit-learn's.
* The depth chosen by cross-validation == scikit-learn trees scored on the same folds.
* The server's view: only counts with Laplace noise, depths, structures (feature ids), votes and
  fitness vectors before ``finish``; no feature value, threshold or leaf value of any client.
* One client without noise: its FedGA tree is at least as fit on its validation part as
  scikit-learn's CART at its CV-chosen depth fitted on its fitting part.
* The count's noise: a server that knows every job's seed and the gateway's id cannot regenerate
  it, and repeated jobs on the same windows get the same released count.
* Determinism (noise seeded as in tests), partial participation, late joiners, a client lost mid-run, bad input.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from sklearn.metrics import f1_score, r2_score
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import aggregator
from aggregator.algorithms import FedGATree
from aggregator.algorithms.fedga_tree import median_depth, register_models, weighted_fitness
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.registry import Registry
from aggregator.simulate import Simulation
from edge_client.algorithms.fedga_cart import Samples, f1_macro, grow, predict, r2, route, to_ensemble, to_strings
from edge_client.algorithms.fedga_tree import LocalGA
from edge_client.training_data import LabelledData
from shared.model import TreeEnsemble
from shared.protocol.messages.fedga_tree import GATask
from shared.tree_encoding import NIL, decode, encode, layout, string_length


def make_clients(
    n_clients: int, n: int = 240, d: int = 5, *, seed: int = 0, regression: bool = False, shift: float = 0.7
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Clients whose decision rule shares a core and differs by a personal offset (float32 values,
    so that scikit-learn, which works in float32, sees the same numbers)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        X = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
        signal = X[:, 0] + np.where(X[:, 1] > 0, X[:, 2], -X[:, 2]) + shift * rng.normal() * X[:, 3]
        if regression:
            out.append((X, 3 * signal + rng.normal(size=n)))
        else:
            out.append((X, (signal + 0.4 * rng.normal(size=n) > 0).astype(int) + (X[:, 4] > 1.2)))
    return out


# --- the client's CART engine --------------------------------------------------------------------


def reference_fixed_structure(X, y, string, depth, regression):
    """Recursive reference: at each decision slot, the threshold of a scikit-learn stump on the
    slot's feature and the node's samples; a node that cannot split (pure, one sample, constant
    feature) is a leaf. Returns {heap index: (feature, sklearn threshold or None)}."""
    lay = layout(depth)
    out = {}

    def visit(rows, heap, level):
        slot = lay.slot_of_heap[heap] if level < depth else -1
        feature = int(string[slot]) if slot >= 0 else NIL
        values = X[rows, feature] if feature != NIL else None
        pure = np.unique(y[rows]).size == 1
        if feature == NIL or rows.size < 2 or pure or np.unique(values).size < 2:
            out[heap] = (NIL, None)
            return
        model = (DecisionTreeRegressor if regression else DecisionTreeClassifier)(max_depth=1)
        stump = model.fit(values[:, None], y[rows]).tree_
        t = float(stump.threshold[0])
        out[heap] = (feature, t)
        visit(rows[values <= t], 2 * heap, level + 1)
        visit(rows[values > t], 2 * heap + 1, level + 1)

    visit(np.arange(X.shape[0]), 1, 0)
    return out


@pytest.mark.parametrize("regression", [False, True])
def test_fixed_structure_cart_matches_a_scikit_learn_stump_at_every_node(regression: bool) -> None:
    rng = np.random.default_rng(5)
    X, y = make_clients(1, n=300, regression=regression, seed=9)[0]
    X[:, 2] = np.round(X[:, 2], 1).astype(np.float32)  # ties in a feature (float32, as scikit-learn sees it)
    depth = 4
    strings = rng.integers(NIL, X.shape[1], (12, string_length(depth)))
    strings[:, 0] = rng.integers(0, X.shape[1], 12)
    samples = Samples.of(X, y, regression=regression, n_classes=3)
    grown = grow(samples, depth, strings)
    for t, s in enumerate(strings):
        expected = reference_fixed_structure(X, y, s, depth, regression)
        rows = np.flatnonzero(grown.key // grown.stride == t)
        got = {
            int(h): (int(f), thr)
            for h, f, thr in zip(grown.key[rows] % grown.stride, grown.feature[rows], grown.threshold[rows])
        }
        assert sorted(got) == sorted(expected)
        for heap, (feature, threshold) in expected.items():
            assert got[heap][0] == feature
            if feature != NIL:
                assert got[heap][1] == np.nextafter(threshold, np.inf)


@pytest.mark.parametrize("regression", [False, True])
def test_refitting_scikit_learn_s_structure_reproduces_its_tree(regression: bool) -> None:
    for seed in range(6):
        X, y = make_clients(1, n=400, regression=regression, seed=seed)[0]
        X_test = make_clients(1, n=500, seed=seed + 100)[0][0]
        depth = 2 + seed % 4
        sk = (DecisionTreeRegressor if regression else DecisionTreeClassifier)(max_depth=depth, random_state=seed)
        sk.fit(X, y)
        string = encode(sk.tree_.feature, sk.tree_.children_left, sk.tree_.children_right, depth)
        samples = Samples.of(X, y, regression=regression, n_classes=3)
        grown = grow(samples, depth, string[None, :])
        assert to_strings(grown, depth)[0].tolist() == string.tolist()
        model = to_ensemble(grown, 0, feature_names=tuple("abcde"), classes=() if regression else (0, 1, 2))
        inner = sk.tree_.children_left >= 0
        # same nodes in pre-order: thresholds are the next float above scikit-learn's
        assert decode(string, depth).feature.size == sk.tree_.node_count
        ours = np.sort(model.trees[0].threshold[model.trees[0].feature >= 0])
        assert (ours == np.sort(np.nextafter(sk.tree_.threshold[inner], np.inf))).all()
        if regression:
            np.testing.assert_allclose(model.predict(X_test), sk.predict(X_test), rtol=0, atol=1e-9)
        else:
            assert (model.predict(X_test) == sk.predict(X_test)).all()
            np.testing.assert_allclose(model.predict_proba(X_test), sk.predict_proba(X_test), atol=1e-12)


def test_plain_cart_with_a_unique_optimum_is_scikit_learn_s_tree() -> None:
    """Where scikit-learn's tree does not depend on its random feature order (no tied splits),
    plain CART grows the same tree."""
    X, y = make_clients(1, n=500, seed=3)[0]
    compared = 0
    for depth in range(1, 9):
        strings = set()
        for state in range(5):
            sk = DecisionTreeClassifier(max_depth=depth, random_state=state).fit(X, y)
            strings.add(tuple(encode(sk.tree_.feature, sk.tree_.children_left, sk.tree_.children_right, depth)))
        if len(strings) > 1:
            continue  # tied splits: any of them is CART's
        compared += 1
        grown = grow(Samples.of(X, y, regression=False, n_classes=3), depth)
        assert tuple(to_strings(grown, depth)[0].tolist()) == strings.pop()
        assert (predict(grown, route(grown, X), regression=False)[0] == sk.predict(X)).all()
    assert compared >= 3


def test_cart_sends_missing_values_right_and_never_splits_on_them() -> None:
    X = np.array([[0.0], [1.0], [np.nan], [3.0], [np.nan]])
    y = np.array([0, 0, 1, 1, 1])
    grown = grow(Samples.of(X, y, regression=False, n_classes=2), 1)
    root = grown.lookup(np.array([0]), np.array([1]))[0]
    assert grown.feature[root] == 0 and 1.0 < grown.threshold[root] <= 3.0
    assert predict(grown, route(grown, X), regression=False)[0].tolist() == [0, 0, 1, 1, 1]


def test_scores_are_scikit_learn_s() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, 50)
    predicted = rng.integers(0, 4, (6, 50))
    predicted[0] = 2  # a class missing from the prediction, others from nothing
    expected = [f1_score(truth, p, average="macro", zero_division=0) for p in predicted]
    np.testing.assert_allclose(f1_macro(truth, predicted, 5), expected, rtol=0, atol=1e-12)
    y = rng.normal(size=40)
    p = y + rng.normal(size=(3, 40))
    np.testing.assert_allclose(r2(y, p), [r2_score(y, q) for q in p], atol=1e-12)


def test_cross_validated_depth_is_scikit_learn_trees_scored_on_the_same_folds() -> None:
    """Every (fold, depth) score is that of scikit-learn's tree of that depth -- compared where
    scikit-learn's tree does not hinge on its random order among tied splits -- and the one tree
    per fold cut at each depth scores exactly as a tree grown to that depth."""
    X, y = make_clients(1, n=300, seed=4)[0]
    task = GATask("classification", "", seed=7, classes=("0", "1", "2"), d_min=1, d_max=8)
    local = LocalGA(task, LabelledData(X, y), "gw-x")
    folds = np.array_split(np.random.default_rng([*local.seed, 2]).permutation(300), 5)
    compared = 0
    for k, held in enumerate(folds):
        train = np.setdiff1d(np.arange(300), held)
        for j, depth in enumerate(range(1, 9)):
            grown = grow(Samples.of(X[train], y[train], regression=False, n_classes=3), depth)
            mine = f1_score(y[held], predict(grown, route(grown, X[held]), regression=False)[0], average="macro")
            assert local.cv.scores[k, j] == pytest.approx(mine, abs=1e-12)
            scores = {
                f1_score(
                    y[held],
                    DecisionTreeClassifier(max_depth=depth, random_state=state)
                    .fit(X[train], y[train])
                    .predict(X[held]),
                    average="macro",
                )
                for state in range(4)
            }
            if len(scores) == 1:
                compared += 1
                assert local.cv.scores[k, j] == pytest.approx(scores.pop(), abs=1e-12)
    assert compared >= 20
    assert local.cv.depth == 1 + int(np.argmax(local.cv.scores.mean(axis=0)))


# --- the server's maths --------------------------------------------------------------------------


def test_median_and_weighted_fitness() -> None:
    assert median_depth([7, 3, 5]) == 5 and median_depth([2, 9, 4, 6]) == 5  # the median, 5.0
    assert median_depth([2, 3, 5, 9]) == 4 and median_depth([3, 4]) == 4  # 4.0; 3.5: a half rounds up
    assert median_depth([6]) == 6 and median_depth([2, 2, 3, 15]) == 3  # 2.5
    fitness = np.array([[0.5, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(weighted_fitness(fitness, np.array([300.0, 100.0])), [0.625, 0.75])
    np.testing.assert_allclose(weighted_fitness(fitness, np.array([-5.0, 1.0])), [0.75, 0.5])  # floor at 1


# --- the protocol ----------------------------------------------------------------------------------


def floats_in(value) -> list[float]:
    """Every real number in a body, recursively (arrays, fields, tuples)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64).ravel().tolist() if value.dtype.kind == "f" else []
    if isinstance(value, float):
        return [value]
    if hasattr(value, "__dataclass_fields__"):
        return [x for name in value.__dataclass_fields__ for x in floats_in(getattr(value, name))]
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in floats_in(v)]
    return []


def test_the_server_sees_no_threshold_leaf_value_feature_value_or_exact_count() -> None:
    clients = make_clients(4, seed=1)
    sim = Simulation(clients, record_bodies=True)
    result = FedGATree(generations=4, d_max=6).run(
        FederatedJob(sim.engine, list(sim.transports), job_id="privacy", settings=JobSettings(deadline_s=30)), seed=2
    )
    secret = set()
    for X, _ in clients:
        secret |= set(X.ravel().tolist())
    for model in result.models.values():
        tree = model.trees[0]
        secret |= set(tree.threshold[tree.feature >= 0].tolist()) | set(tree.value.ravel().tolist()) - {0.0, 1.0}
    view = sim.server_view()
    allowed = {
        "data_shape_reply",
        "fedga_tree.depth_reply",
        "fedga_tree.structure_reply",
        "fedga_tree.generation_reply",
        "fedga_tree.finish_reply",
    }
    for k, (client, received) in enumerate(sorted(view.items())):
        n = clients[k][0].shape[0]
        counts = set()
        assert {m.type for m in received if m.job != "privacy"} <= {"status"}  # presence, not this job
        for message in [m for m in received if m.job == "privacy"]:
            assert message.type in allowed, message.type
            body = message.body
            if message.type == "fedga_tree.finish_reply":
                continue  # the client's own final tree, sent for signing (checked below)
            assert not secret & set(floats_in(body)), message.type
            if message.type == "data_shape_reply":
                assert body.n_features == 5 and set(body.labels) <= {"0", "1", "2"}
            if message.type in ("fedga_tree.depth_reply", "fedga_tree.structure_reply"):
                counts.add(body.noisy_count)
                assert body.noisy_count != n and body.noisy_count != round(body.noisy_count)
            if message.type == "fedga_tree.structure_reply":
                assert body.structure.dtype.kind == "i" and body.structure.min() >= NIL and body.structure.max() < 5
            if message.type == "fedga_tree.generation_reply":
                assert body.fitness.shape == (20,) and ((0 <= body.fitness) & (body.fitness <= 1)).all()
        assert len(counts) == 1  # drawn once per job: asking again gives the same noisy count
        finish = [m for m in received if m.type == "fedga_tree.finish_reply"]
        assert len(finish) == 1 and TreeEnsemble.from_cbor(finish[0].body.model) == result.models[client]
    per_generation = [m for r in view.values() for m in r if m.type == "fedga_tree.generation_reply"]
    assert len(per_generation) == 4 * 4  # one message per client per generation, never per candidate


def seeded_simulation(clients, *, record_bodies: bool = False) -> Simulation:
    """A simulation whose gateways draw their count noise from seeds (a gateway uses OS entropy)."""
    sim = Simulation(clients, record_bodies=record_bodies)
    for i, participant in enumerate(sim.participants.values()):
        participant.seed_noise(100 + i)
    return sim


def test_a_server_that_knows_the_seed_cannot_regenerate_or_average_the_count_noise() -> None:
    """The regeneration attack: the server draws Laplace noise as a gateway would from the job's
    seed and the gateway's id and subtracts it. It does not give back the window count, and a
    second job on the same windows (another seed) returns the very same noisy count, so there is
    no fresh draw to average."""
    clients = make_clients(3, n=120, seed=5)
    sim = Simulation(clients, record_bodies=True)
    config = FedGATree(generations=2, d_max=4)
    for job_id, seed in (("first", 2), ("second", 3)):
        config.run(FederatedJob(sim.engine, list(sim.transports), job_id=job_id), seed=seed)
    view = sim.server_view()
    for k, (client, received) in enumerate(sorted(view.items())):
        n = clients[k][0].shape[0]
        released = {}
        for message in received:
            if message.type == "fedga_tree.depth_reply":
                released[message.job] = message.body.noisy_count
        for job_id, seed in (("first", 2), ("second", 3)):
            regenerated = np.random.default_rng([seed, zlib.crc32(client.encode()), 1]).laplace(0.0, 1.0)
            assert abs(released[job_id] - regenerated - n) > 1e-6
        assert released["first"] == released["second"]


def test_models_are_personal_single_trees_and_deterministic() -> None:
    clients = make_clients(5, seed=2)
    config = FedGATree(generations=5, d_max=6)
    first = seeded_simulation(clients).run(config, seed=11)
    again = seeded_simulation(clients).run(config, seed=11)
    assert sorted(first) == [f"client-{k:03d}" for k in range(5)]
    for client, model in first.items():
        assert model.kind == "single" and model.classes == (0, 1, 2) and model.metadata["gateway"] == client
        assert model.to_cbor() == again[client].to_cbor()
    other = seeded_simulation(clients).run(config, seed=12)
    assert any(other[c].to_cbor() != first[c].to_cbor() for c in first)


def test_one_client_without_noise_is_at_least_as_fit_as_its_own_cv_cart_tree() -> None:
    for seed in range(3):
        X, y = make_clients(1, n=400, seed=20 + seed)[0]
        result = FedGATree(generations=8, d_max=8, epsilon=None).run(
            FederatedJob(Simulation([(X, y)]).engine, ["client-000"], job_id="solo"), seed=seed
        )
        task = GATask("classification", "", seed=seed, classes=("0", "1", "2"), d_max=8, epsilon=None)
        local = LocalGA(task, LabelledData(X, y), "client-000")
        fit, held = local.train_rows, local.validation_rows
        cart = DecisionTreeClassifier(max_depth=local.cv.depth, random_state=0).fit(X[fit], y[fit])
        baseline = f1_score(y[held], cart.predict(X[held]), average="macro", zero_division=0)
        ours = f1_score(y[held], result.models["client-000"].predict(X[held]), average="macro", zero_division=0)
        assert ours >= baseline - 1e-12
        assert result.models["client-000"].metadata["validation_fitness"] == pytest.approx(ours, abs=1e-12)


def test_partial_participation_and_late_joiners() -> None:
    clients = make_clients(8, n=200, seed=3)
    sim = Simulation(clients, record_bodies=True)
    result = FedGATree(generations=6, d_max=5, active_fraction=0.25).run(
        FederatedJob(sim.engine, list(sim.transports), job_id="partial"), seed=4
    )
    assert all(len(a) == 2 for a in result.answered)
    assert len(set().union(*result.answered)) > 2  # others joined later
    view = sim.server_view()
    opened = {c for c, r in view.items() if any(m.type == "fedga_tree.depth_reply" for m in r)}
    assert len(opened) == 2
    for client, received in view.items():
        gens = [m.body for m in received if m.type == "fedga_tree.generation_reply"]
        if client in opened or not gens:
            assert all(g.structure.size == 0 for g in gens)
        else:  # a late joiner sends its structure and noisy count once, with its first fitness vector
            assert gens[0].structure.size == string_length(result.depth) and gens[0].noisy_count != 0
            assert all(g.structure.size == 0 for g in gens[1:])
    assert sorted(result.models) == sorted(sim.transports)  # every client gets its tree at the end


def test_a_client_lost_mid_run_does_not_stop_it() -> None:
    clients = make_clients(4, n=200, seed=5)
    sim = Simulation(clients)

    def drop(progress) -> None:
        if progress.step == 2:
            sim.transports["client-001"].drop()

    job = FederatedJob(
        sim.engine,
        list(sim.transports),
        job_id="lost",
        settings=JobSettings(deadline_s=1.0, min_fraction=0.5),
        progress=drop,
    )
    result = FedGATree(generations=5, d_max=5).run(job, seed=1)
    assert [len(a) for a in result.answered] == [4, 4, 3, 3, 3]
    assert sorted(result.models) == ["client-000", "client-002", "client-003"]


def test_regression_votes_elitism_for_continuous_targets_and_returns_regressors() -> None:
    clients = make_clients(3, n=200, seed=6, regression=True)
    result = FedGATree(task="regression", generations=3, d_max=5, population_size=10).run(
        FederatedJob(Simulation(clients).engine, ["client-000", "client-001", "client-002"], job_id="reg"), seed=0
    )
    assert result.elitism  # 100 % distinct targets > mu* = 80 %
    assert (np.isin(result.population[:, 0], np.arange(5))).any()
    for k, model in enumerate(result.models.values()):
        assert not model.is_classifier and model.kind == "single"
        X, y = clients[k]
        assert np.mean((model.predict(X) - y) ** 2) < np.var(y)


def test_each_tree_is_registered_for_its_own_gateway(tmp_path) -> None:
    models = aggregator.simulate(FedGATree(generations=2, d_max=4), make_clients(3, n=150), seed=0)
    with Registry(tmp_path / "registry.sqlite") as registry:
        records = register_models(registry, "fedga-job", models)
        assert {c: r.target for c, r in records.items()} == {c: c for c in models}
        assert {r.model_id for r in registry.list()} == {f"fedga-job.{c}" for c in models}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"population_size": 1}, "population_size"),
        ({"task": "ranking"}, "task"),
        ({"active_fraction": 0}, "active_fraction"),
        ({"d_min": 5, "d_max": 3}, "d_min"),
        ({"epsilon": 0}, "epsilon"),
        ({"mutation_rates": (0.1,)}, "mutation_rates"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        FedGATree(**kwargs)


# --- the IBM DP tree baseline ------------------------------------------------------------------


def test_dp_tree_without_noise_splits_where_exact_counts_say_and_is_deterministic() -> None:
    from aggregator.baselines import DPTree
    from aggregator.baselines.dp_tree import quantile_edges

    clients = make_clients(3, n=300, seed=8)
    X = np.concatenate([x for x, _ in clients])
    y = np.concatenate([t for _, t in clients])
    edges = quantile_edges(X, 5)
    assert all(e.size == 4 for e in edges)
    exact = DPTree(max_depth=1, epsilon=1e12).fit(clients, edges=edges, classes=(0, 1, 2), seed=0)
    # brute force: the candidate with the best Gini proxy on the pooled data
    best, where = -np.inf, None
    for j, column in enumerate(edges):
        for e in column:
            left = X[:, j] < e
            proxy = sum(
                np.bincount(y[side], minlength=3).astype(float) @ np.bincount(y[side], minlength=3) / max(side.sum(), 1)
                for side in (left, ~left)
            )
            if proxy > best + 1e-9:
                best, where = proxy, (j, e)
    root = exact.trees[0]
    assert (int(root.feature[0]), float(root.threshold[0])) == where
    np.testing.assert_allclose(
        root.value[1],
        np.bincount(y[X[:, where[0]] < where[1]], minlength=3) / (X[:, where[0]] < where[1]).sum(),
        atol=1e-6,
    )
    noisy = DPTree().fit(clients, edges=edges, classes=(0, 1, 2), seed=4)
    assert noisy == DPTree().fit(clients, edges=edges, classes=(0, 1, 2), seed=4)
    assert noisy.trees[0].depth <= 6
    with pytest.raises(ValueError, match="epsilon"):
        DPTree(epsilon=0)
