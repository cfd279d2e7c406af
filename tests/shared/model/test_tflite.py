"""The TFLite engine (shared/model/tflite.py) against the numpy engine.

Per-tree leaves must be bit-identical and raw outputs equal (the engine sums with the numpy
engine's own code, so they are exact; the contract is <= 1e-6) on boosted (softmax 7 classes,
sigmoid, identity), forest (classification, regression; categorical and client-indicator
splits) and single-tree models, random and trained, for float32 inputs including NaN, ±inf,
-0.0, subnormals and values exactly at, just below and just above every threshold.

Runs in two environments (both installed by the test commands, so nothing is skipped in CI):
the main venv (numpy >= 2 + ai-edge-litert; `deploy/run tests`) and the Pi profile (numpy 1.26
+ tflite-runtime 2.14; `deploy/tflite-pi-profile`). Only numpy, pytest and WheelFed are used
here, so the Pi profile needs no test extras.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from shared.model import Tree, TreeEnsemble, model_inputs, uses_client_index
from shared.model import tflite as tfl

if not tfl.tflite_available():
    pytest.skip(
        "no TFLite interpreter: pip install ai-edge-litert (numpy >= 2) or tflite-runtime==2.14.* "
        "(numpy 1.26) — `deploy/run tests` and `deploy/tflite-pi-profile` install them",
        allow_module_level=True,
    )
pytest.importorskip("flatbuffers", reason="compiling needs `flatbuffers` (extra tflite-compile)")
pytest.importorskip("tflite", reason="compiling needs the `tflite` schema package (extra tflite-compile)")

ROOT = Path(__file__).resolve().parents[3]
N_FEATURES = 6
CAT_FEATURE = 4  # codes; feature 5 numeric; the client column (when present) is appended
F32_MAX = float(np.finfo(np.float32).max)
THRESHOLDS = np.array(
    [0.0, -1.5, 0.25, 1.0, 0.1, -0.7, 1 / 3, 2.0000001, 1e39, -1e39, F32_MAX, 1e-46, 3e-45, -1e-40, 1e-30],
    dtype=np.float64,
)  # float32-exact ones, float64-only ones, beyond the float32 range, subnormal
CODES = [0, 1, 2, 3, 5, 7, 2**24, 2**24 + 1, 2**31 - 128, 2**31 - 1]


# --- models ------------------------------------------------------------------------------------
def random_tree(
    rng: np.random.Generator,
    width: int,
    max_depth: int,
    n_features: int = N_FEATURES,
    client_feature: int | None = None,
    n_clients: int = 4,
) -> Tree:
    """An unbalanced random tree; categorical splits on CAT_FEATURE and the client feature."""
    nodes: list[dict] = []

    def grow(depth: int) -> int:
        i = len(nodes)
        nodes.append({})
        if depth == max_depth or (depth > 0 and rng.random() < 0.3):
            nodes[i] = {"feature": -1, "threshold": 0.0, "categories": None}
            return i
        choices = n_features + (1 if client_feature is not None else 0)
        f = int(rng.integers(choices))
        cats = None
        threshold = float(rng.choice(THRESHOLDS))
        if f == CAT_FEATURE:
            cats = sorted(rng.choice(CODES, size=int(rng.integers(0, 5)), replace=False).tolist())
            threshold = 0.0
        elif client_feature is not None and f == n_features:
            f = client_feature
            cats = sorted(rng.choice(n_clients, size=int(rng.integers(1, n_clients)), replace=False).tolist())
            threshold = 0.0
        node = {"feature": f, "threshold": threshold, "categories": cats, "default_left": bool(rng.random() < 0.5)}
        node["left"] = grow(depth + 1)
        node["right"] = grow(depth + 1)
        nodes[i] = node
        return i

    grow(0)
    n = len(nodes)
    return Tree.from_arrays(
        feature=[nd["feature"] for nd in nodes],
        threshold=[nd["threshold"] for nd in nodes],
        left=[nd.get("left", -1) for nd in nodes],
        right=[nd.get("right", -1) for nd in nodes],
        value=rng.normal(size=(n, width)),
        default_left=[nd.get("default_left", False) for nd in nodes],
        categories=[nd["categories"] for nd in nodes],
    )


def random_model(
    kind: str,
    *,
    link: str = "identity",
    n_outputs: int = 1,
    n_trees: int = 12,
    max_depth: int = 5,
    classes: tuple = (),
    client: bool = False,
    vector_trees: int = 0,
    seed: int = 0,
) -> TreeEnsemble:
    rng = np.random.default_rng(seed)
    names = tuple(f"f{i}" for i in range(N_FEATURES)) + (("client",) if client else ())
    client_feature = N_FEATURES if client else None
    if kind == "boosted":
        outputs = [t % n_outputs for t in range(n_trees)] + [-1] * vector_trees
        trees = [
            random_tree(rng, 1 if o >= 0 else n_outputs, max_depth, client_feature=client_feature) for o in outputs
        ]
        return TreeEnsemble(
            trees=tuple(trees),
            kind=kind,
            link=link,
            n_outputs=n_outputs,
            feature_names=names,
            tree_output=np.array(outputs, dtype=np.int32),
            base_score=rng.normal(size=n_outputs),
            classes=classes,
        )
    metadata = {"client_splits": 1, "clients": "gw-0,gw-1,gw-2,gw-3"} if client else {}
    trees = []
    for _ in range(n_trees):
        tree = random_tree(rng, n_outputs, max_depth, client_feature=client_feature)
        if classes:  # leaf vectors as class distributions
            value = np.abs(tree.value) + 1e-3
            tree = Tree.from_arrays(
                tree.feature,
                tree.threshold,
                tree.left,
                tree.right,
                value / value.sum(axis=1, keepdims=True),
                default_left=tree.default_left,
                categories=[tree.categories(i) if tree.is_categorical[i] else None for i in range(tree.n_nodes)],
            )
        trees.append(tree)
    return TreeEnsemble(
        trees=tuple(trees),
        kind=kind,
        link="identity",
        n_outputs=n_outputs,
        feature_names=names,
        classes=classes,
        metadata=metadata,
    )


RANDOM_MODELS = {
    "boosted-softmax7": lambda: random_model(
        "boosted", link="softmax", n_outputs=7, n_trees=35, classes=tuple(range(7))
    ),
    "boosted-softmax7-vector-leaves": lambda: random_model(
        "boosted", link="softmax", n_outputs=7, n_trees=14, vector_trees=3, classes=tuple("abcdefg"), seed=1
    ),
    "boosted-sigmoid": lambda: random_model("boosted", link="sigmoid", n_trees=20, classes=(0, 1), seed=2),
    "boosted-identity": lambda: random_model("boosted", n_trees=20, max_depth=7, seed=3),
    "forest-classification": lambda: random_model("forest", n_outputs=3, n_trees=25, classes=("a", "b", "c"), seed=4),
    "forest-classification-client": lambda: random_model(
        "forest", n_outputs=3, n_trees=25, classes=(0, 1, 2), client=True, seed=5
    ),
    "forest-regression": lambda: random_model("forest", n_trees=25, max_depth=8, seed=6),
    "forest-regression-client": lambda: random_model("forest", n_trees=15, client=True, seed=7),
    "single": lambda: random_model("single", n_outputs=2, n_trees=1, max_depth=9, seed=8),
    "single-leaf": lambda: TreeEnsemble(
        trees=(Tree.leaf([1.5, -2.0]),),
        kind="single",
        link="identity",
        n_outputs=2,
        feature_names=tuple(f"f{i}" for i in range(N_FEATURES)),
    ),
}


def _clients(seed: int, n_classes: int, n: int = 250) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(4):
        X = rng.normal(size=(n, N_FEATURES))
        X[:, CAT_FEATURE] = rng.integers(0, 6, size=n)
        X[rng.random(X.shape) < 0.05] = np.nan
        score = np.nan_to_num(X[:, 0] + (k % 2) * X[:, 1] + (X[:, CAT_FEATURE] % 3 == 0) + 0.3 * rng.normal(size=n))
        y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])) if n_classes else score
        out.append((X, y))
    return out


def trained_model(name: str) -> TreeEnsemble:
    import aggregator
    from aggregator.algorithms import FedForest, FedSCSXGB

    if name == "fedscs-softmax7":
        return aggregator.simulate(FedSCSXGB(n_rounds=4, max_depth=4, protocol="histogram"), _clients(10, 7))
    if name == "fedscs-logistic":
        return aggregator.simulate(
            FedSCSXGB(n_rounds=5, max_depth=3, objective="logistic", protocol="histogram"), _clients(11, 2)
        )
    if name == "fedscs-squared-error":
        return aggregator.simulate(
            FedSCSXGB(n_rounds=5, max_depth=3, objective="squared_error", protocol="histogram"), _clients(12, 0)
        )
    if name == "fedforest-client-categorical":
        return aggregator.simulate(
            FedForest(
                n_trees=8,
                max_depth=6,
                client_splits=True,
                protocol="sketches",
                categorical_features=(CAT_FEATURE,),
                n_categories=6,
            ),
            _clients(13, 3),
        )
    if name == "fedforest-regression":
        return aggregator.simulate(
            FedForest(n_trees=8, max_depth=6, task="regression", protocol="histogram"), _clients(14, 0)
        )
    raise KeyError(name)


TRAINED = [
    "fedscs-softmax7",
    "fedscs-logistic",
    "fedscs-squared-error",
    "fedforest-client-categorical",
    "fedforest-regression",
]


# --- inputs ----------------------------------------------------------------------------------------
def edge_values() -> np.ndarray:
    """float32 values at, just below and just above every threshold, plus the special values."""
    t32 = tfl.float32_threshold(THRESHOLDS)
    with np.errstate(over="ignore"):
        near = np.concatenate(
            [
                THRESHOLDS.astype(np.float32),
                t32,
                np.nextafter(t32, np.float32(-np.inf)),
                np.nextafter(t32, np.float32(np.inf)),
            ]
        )
    special = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.2e-38, F32_MAX, -F32_MAX], dtype=np.float32
    )
    return np.concatenate([near, special]).astype(np.float32)


def code_values() -> np.ndarray:
    codes = np.array(CODES, dtype=np.float64)
    extra = [-1.0, -0.0, 2.5, 4.0, 6.0, 2.0**31, 2.0**32, 1e30, np.inf, -np.inf, np.nan]
    return np.concatenate([codes, codes + 1, codes - 1, extra]).astype(np.float32)


def make_inputs(model: TreeEnsemble, n_rows: int = 600, seed: int = 0) -> np.ndarray:
    """float32 rows mixing normal values, threshold edges, codes and specials, column by column."""
    rng = np.random.default_rng(seed)
    d = model.n_features
    X = rng.normal(size=(n_rows, d)).astype(np.float32)
    thresholds = np.concatenate([t.threshold[t.left >= 0] for t in model.trees] + [np.zeros(0)])
    t32 = tfl.float32_threshold(thresholds)
    with np.errstate(over="ignore"):
        model_edges = np.concatenate(
            [
                thresholds.astype(np.float32),
                t32,
                np.nextafter(t32, np.float32(-np.inf)),
                np.nextafter(t32, np.float32(np.inf)),
            ]
        )
    pools = [edge_values(), code_values(), model_edges]
    for j in range(d):
        pool = np.concatenate([p for p in pools if p.size])
        pick = rng.random(n_rows) < 0.6
        X[pick, j] = rng.choice(pool, size=int(pick.sum()))
    if model.feature_names[-1] == "client":
        X[:, -1] = rng.choice(np.array([0, 1, 2, 3, -1, 4, 1.5, np.nan], dtype=np.float32), size=n_rows)
    X[:8] = np.nan
    X[8:16] = np.inf
    X[16:24] = -np.inf
    return X


def assert_engines_agree(model: TreeEnsemble, engine: tfl.TfliteEngine, X: np.ndarray) -> None:
    expected_leaves = model.leaves(X)
    leaves = engine.leaves(X)
    assert leaves.dtype == np.int32 and leaves.shape == (len(X), model.n_trees)
    np.testing.assert_array_equal(leaves, expected_leaves)
    expected = model.predict_raw(X)
    raw = engine.raw(X)
    assert raw.shape == expected.shape and raw.dtype == np.float64
    assert np.max(np.abs(raw - expected), initial=0.0) <= 1e-6
    np.testing.assert_array_equal(raw, expected)  # same summation code and order: exact


# --- equality ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RANDOM_MODELS))
def test_random_models_match_numpy_engine(name: str) -> None:
    model = RANDOM_MODELS[name]()
    engine = tfl.TfliteEngine(tfl.compile_tflite(model))
    X = make_inputs(model)
    assert_engines_agree(model, engine, X)
    for i in range(0, 40, 7):  # the batch-1 interpreter
        np.testing.assert_array_equal(engine.leaves(X[i]), model.leaves(X[i]))
        np.testing.assert_array_equal(engine.raw(X[i]), model.predict_raw(X[i]))


@pytest.mark.parametrize("name", TRAINED)
def test_trained_models_match_numpy_engine(name: str) -> None:
    model = trained_model(name)
    engine = tfl.TfliteEngine(tfl.compile_tflite(model))
    X = make_inputs(model, seed=1)
    assert_engines_agree(model, engine, X)
    clean = model_inputs(model, np.concatenate([c[0] for c in _clients(99, 3)]), 1)
    assert_engines_agree(model, engine, clean.astype(np.float32))


def test_threshold_rounding_is_exact_for_float32() -> None:
    t = np.array([0.1, -0.1, 1 / 3, 1e39, -1e39, F32_MAX, 1e-46, -1e-46, 0.0, 2.5], dtype=np.float64)
    t32 = tfl.float32_threshold(t)
    assert t32.dtype == np.float32
    assert (t32.astype(np.float64) >= t).all()
    with np.errstate(over="ignore"):
        below = np.nextafter(t32, np.float32(-np.inf))
    assert (below.astype(np.float64) < t).all()  # nothing float32 lies in [t, t32)
    assert np.isposinf(t32[3]) and t32[4] == -F32_MAX and t32[5] == F32_MAX and t32[6] == np.float32(1e-45)


def test_client_specialisation() -> None:
    for model in (RANDOM_MODELS["forest-classification-client"](), trained_model("fedforest-client-categorical")):
        assert uses_client_index(model)
        general = tfl.TfliteEngine(tfl.compile_tflite(model))
        rng = np.random.default_rng(3)
        base = make_inputs(model, n_rows=300, seed=4)[:, :-1]
        for k in (-1, 0, 1, 2, 3):
            full = model_inputs(model, base, k).astype(np.float32)
            engine = tfl.TfliteEngine(tfl.compile_tflite(model, client_index=k))
            assert engine.n_inputs == model.n_features - 1
            assert engine.info["depth"] <= general.info["depth"]
            assert_engines_agree(model, engine, full)  # full width: client column checked, dropped
            np.testing.assert_array_equal(engine.leaves(base), model.leaves(full))  # features only
            np.testing.assert_array_equal(engine.raw(base[5]), model.predict_raw(full[5]))
            assert_engines_agree(model, general, full)
            wrong = full.copy()
            wrong[rng.integers(len(wrong)), -1] = k + 1
            with pytest.raises(ValueError, match="compiled for client index"):
                engine.leaves(wrong)
    with pytest.raises(ValueError, match="client-indicator"):
        tfl.compile_tflite(RANDOM_MODELS["forest-regression"](), client_index=0)


# --- batches, shapes, errors -------------------------------------------------------------------
def test_batch_sizes_and_resizing() -> None:
    model = RANDOM_MODELS["boosted-softmax7"]()
    engine = tfl.TfliteEngine(tfl.compile_tflite(model))
    X = make_inputs(model, n_rows=tfl.BATCH_CHUNK + 300, seed=5)
    for n in (3, 1, 17, 3, 0, 2, len(X)):  # alternating sizes re-allocate the batch interpreter
        assert_engines_agree(model, engine, X[:n])
    assert engine.leaves(X[:0]).shape == (0, model.n_trees)
    np.testing.assert_array_equal(engine.leaves(X.astype(np.float64)[:50]), model.leaves(X[:50]))
    with pytest.raises(ValueError, match="features per row"):
        engine.leaves(X[:, :-1])
    with pytest.raises(TypeError):
        engine.leaves(np.array([["a"] * model.n_features]))


def test_flatbuffer_layout() -> None:
    model = RANDOM_MODELS["forest-classification-client"]()
    data = tfl.compile_tflite(model)
    assert data[4:8] == b"TFL3"
    meta = tfl.read_metadata(data)
    assert TreeEnsemble.from_cbor(meta[tfl.METADATA_ENSEMBLE]) == model
    interpreter = tfl.load_interpreter()(model_content=data)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert inp["name"] == tfl.INPUT_NAME and list(inp["shape_signature"]) == [-1, model.n_features]
    assert inp["dtype"] == np.float32
    assert out["name"] == tfl.OUTPUT_NAME and list(out["shape_signature"]) == [-1, model.n_trees]
    assert out["dtype"] == np.int32
    with pytest.raises(ValueError, match="TFL3"):
        tfl.read_metadata(b"not a model at all")
    with pytest.raises(ValueError, match="compile_tflite"):
        tfl.TfliteEngine(_strip_metadata(data))


def _strip_metadata(data: bytes) -> bytes:
    """The same flatbuffer with the metadata names changed (so the engine does not find them)."""
    return data.replace(tfl.METADATA_INFO.encode(), b"x" * len(tfl.METADATA_INFO))


def test_too_deep_is_refused() -> None:
    depth = 25  # one chain: 2**25 slots > MAX_SLOTS
    n = 2 * depth + 1
    # nodes 0..depth-1 split; node i's left child is leaf depth+1+i, its right child node i+1
    # (the last one's: leaf depth)
    feature = [0] * depth + [-1] * (depth + 1)
    left = [depth + 1 + i for i in range(depth)] + [-1] * (depth + 1)
    right = [i + 1 for i in range(depth)] + [-1] * (depth + 1)
    tree = Tree.from_arrays(feature, np.zeros(n), left, right, np.zeros(n))
    model = TreeEnsemble(trees=(tree,), kind="single", link="identity", n_outputs=1, feature_names=("a",))
    assert tree.depth == depth
    with pytest.raises(ValueError, match="numpy engine"):
        tfl.compile_tflite(model)


# --- the gateway path stays light --------------------------------------------------------------
def test_runtime_needs_no_compiler_packages(tmp_path: Path) -> None:
    model = RANDOM_MODELS["forest-classification-client"]()
    path = tmp_path / "model.tflite"
    path.write_bytes(tfl.compile_tflite(model))
    X = make_inputs(model, n_rows=50)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "leaves.npy", model.leaves(X))
    script = textwrap.dedent(
        f"""
        import sys
        for name in ("flatbuffers", "tflite", "tensorflow", "xgboost", "sklearn", "pandas"):
            sys.modules[name] = None  # importing any of them now fails
        import numpy as np
        from shared.model.tflite import TfliteEngine
        engine = TfliteEngine(open({str(path)!r}, "rb").read())
        X = np.load({str(tmp_path / "X.npy")!r})
        assert (engine.leaves(X) == np.load({str(tmp_path / "leaves.npy")!r})).all()
        engine.raw(X)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_load_interpreter_reports_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ai_edge_litert", "ai_edge_litert.interpreter", "tflite_runtime", "tflite_runtime.interpreter"):
        monkeypatch.setitem(sys.modules, name, None)
    assert not tfl.tflite_available()
    with pytest.raises(ImportError, match="ai-edge-litert"):
        tfl.load_interpreter()
