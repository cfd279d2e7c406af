"""One split rule everywhere: a row goes left iff ``float32(x) < threshold``.

Real models -- FedSCS-XGB (private default and histogram protocol), FedForest (default and
private protocol) and FedGA-Tree, trained on float64 features that are no float32 values -- are
asked for probabilities on rows whose value at one feature sits exactly at, one float64 ulp and
one float32 ulp around every threshold of the model (the stored float64 threshold and its
float32 rounding up, as TFLite and the XGBoost export store it). Every path must agree to 1e-6
on float64 and float32 inputs alike: the numpy engine, XGBoost on ``to_xgboost_json`` (boosted
models), the TFLite engine, and the gateway's live path (``model_inputs`` of the float32
features, then the engine ``choose_engine`` picks, numpy or TFLite).

The training side follows the same rule: a FedGA-Tree gateway's reported validation fitness
equals the fitness of its deployed tree evaluated by the numpy engine on its float64 windows.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

import aggregator
from aggregator.algorithms import FedForest, FedGATree, FedSCSXGB
from aggregator.jobs import FederatedJob
from aggregator.simulate import Simulation
from edge_client.algorithms.fedga_tree import LocalGA
from edge_client.engines import choose_engine
from edge_client.training_data import LabelledData
from shared.model import TreeEnsemble, model_inputs
from shared.model import tflite as tfl
from shared.model.xgboost_json import to_xgboost_json
from shared.protocol.messages.fedga_tree import GATask

N_FEATURES = 5


def clients(seed: int, n_clients: int = 4, n: int = 200) -> list[tuple[np.ndarray, np.ndarray]]:
    """Three classes from float64 features (no float32 values, so rounding matters)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_clients):
        X = rng.normal(size=(n, N_FEATURES))
        score = X[:, 0] + np.where(X[:, 1] > 0, X[:, 2], -X[:, 2]) + 0.3 * rng.normal(size=n)
        out.append((X, np.digitize(score, [-0.5, 0.5])))
    return out


def trained(name: str) -> TreeEnsemble:
    data = clients(3)
    if name == "fedscs-private":
        return aggregator.simulate(FedSCSXGB(n_rounds=4, max_depth=3), data)
    if name == "fedscs-histogram":
        return aggregator.simulate(FedSCSXGB(n_rounds=4, max_depth=3, protocol="histogram"), data)
    if name == "fedforest":
        return aggregator.simulate(FedForest(n_trees=6, max_depth=5), data)
    if name == "fedforest-private":
        return aggregator.simulate(FedForest(n_trees=6, max_depth=5, protocol="private"), data)
    if name == "fedga-tree":
        return aggregator.simulate(FedGATree(generations=3, d_max=5, epsilon=None), data)["client-000"]
    raise KeyError(name)


MODELS = ["fedscs-private", "fedscs-histogram", "fedforest", "fedforest-private", "fedga-tree"]


def edge_rows(model: TreeEnsemble, base: np.ndarray) -> np.ndarray:
    """float64 rows: for every split (feature j, threshold t), rows of ``base`` (cycled) whose
    feature j is t, t one float64 ulp down and up, the float32 ``t32`` that TFLite and the
    XGBoost export store (smallest float32 >= t), one float32 ulp around it, and one float64 ulp
    around those."""
    values, features = [], []
    for tree in model.trees:
        split = tree.left >= 0
        for j, t in zip(tree.feature[split], tree.threshold[split]):
            t32 = tfl.float32_threshold(np.array([t]))[0]
            f32 = [t32, np.nextafter(t32, np.float32(-np.inf)), np.nextafter(t32, np.float32(np.inf))]
            near = [t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf)]
            for v in [float(x) for x in f32]:
                near += [v, np.nextafter(v, -np.inf), np.nextafter(v, np.inf)]
            values += near
            features += [int(j)] * len(near)
    assert values, "the model has no split"
    X = base[np.arange(len(values)) % base.shape[0]].copy()
    X[np.arange(len(values)), features] = values
    return X


def probabilities(model: TreeEnsemble, raw: np.ndarray) -> np.ndarray:
    return np.asarray(model.proba_from_raw(raw), dtype=np.float64)


@pytest.mark.parametrize("name", MODELS)
def test_every_path_agrees_at_and_around_every_threshold(name: str) -> None:
    model = trained(name)
    X64 = edge_rows(model, np.concatenate([c[0] for c in clients(3)]))
    X32 = X64.astype(np.float32)
    assert (X32.astype(np.float64) != X64).any()  # float64 values strictly between float32 ones
    reference = probabilities(model, model.predict_raw(X64))
    answers = {"numpy float32": probabilities(model, model.predict_raw(X32))}
    if model.kind == "boosted":
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(bytearray(to_xgboost_json(model, round_thresholds=True)))
        for label, X in (("xgboost float64", X64), ("xgboost float32", X32)):
            p = np.asarray(booster.inplace_predict(X), dtype=np.float64)
            answers[label] = p if p.ndim == 2 else np.column_stack([1 - p, p])
    if tfl.tflite_available():
        engine = tfl.TfliteEngine(tfl.compile_tflite(model))
        answers["tflite float64"] = probabilities(model, engine.raw(X64))
        answers["tflite float32"] = probabilities(model, engine.raw(X32))
    for preference in ("numpy", "tflite") if tfl.tflite_available() else ("numpy",):
        live = choose_engine(model, model.n_features, preference)
        for label, X in (("float64", X64), ("float32", X32)):
            inputs = model_inputs(model, X.astype(np.float32), -1)  # the live path's own conversion
            answers[f"live {preference} {label}"] = probabilities(model, live.raw(inputs))
    for label, answer in answers.items():
        assert answer.shape == reference.shape, label
        gap = float(np.max(np.abs(answer - reference)))
        assert gap <= 1e-6, f"{label}: {gap}"


def test_fedga_tree_training_follows_the_split_rule() -> None:
    """A gateway fits and scores its tree on its windows rounded to float32, so the fitness it
    reports is the deployed tree's, evaluated by the numpy engine on the raw float64 windows --
    here the class hinges on a feature whose values differ only below float32 resolution
    (1 +- 1e-10), which a float64 CART would split on and the deployed tree cannot."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, N_FEATURES))
    side = rng.random(300) < 0.5
    X[:, 0] = np.where(side, 1 + 1e-10, 1 - 1e-10)
    y = side.astype(int) + (X[:, 1] > 0.8)
    data = [(X, y)]
    result = FedGATree(generations=4, d_max=6, epsilon=None).run(
        FederatedJob(Simulation(data).engine, ["client-000"], job_id="rule"), seed=1
    )
    task = GATask("classification", "", seed=1, classes=("0", "1", "2"), d_max=6, epsilon=None)
    held = LocalGA(task, LabelledData(X, y), "client-000").validation_rows
    model = result.models["client-000"]
    engine = f1_score(y[held], model.predict(X[held]), average="macro", zero_division=0)
    assert model.metadata["validation_fitness"] == pytest.approx(engine, abs=1e-12)
