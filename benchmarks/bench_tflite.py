"""TFLite engine latency: one window (1 row) and a batch (1,000 rows), against the numpy engine,
XGBoost's ``Booster.inplace_predict`` and scikit-learn's ``predict_proba``.

    .venv/bin/python benchmarks/bench_tflite.py [--quick]

(`deploy/run tests` installs everything it needs: ai-edge-litert, tflite, flatbuffers,
xgboost, scikit-learn. Under the Pi profile, `.venv-pi/bin/python benchmarks/bench_tflite.py
--no-peers` times the numpy and TFLite engines with tflite-runtime, without the peers.)

Models, trained on the same synthetic 7-class data (6 clients x 1,000 rows x 40 features):

* boosted: ``FedSCSXGB(n_rounds=10, max_depth=4)`` (70 trees), exported with
  ``to_xgboost_json`` and loaded by ``xgboost.Booster`` -- the same model, so the XGBoost column
  is the same trees; scikit-learn peer: ``GradientBoostingClassifier(n_estimators=10,
  max_depth=4)`` on the pooled data (also 70 trees).
* forest: ``FedForest(n_trees=50, max_depth=8)``; scikit-learn peer: ``RandomForestClassifier(
  n_estimators=50, max_depth=8)`` on the pooled data; XGBoost peer: a random forest booster
  (``num_parallel_tree=50, max_depth=8``, one round -- XGBoost grows one tree per class, so
  350 trees).

Every engine returns class probabilities (numpy: ``TreeEnsemble.predict_proba``; TFLite:
``TfliteEngine.predict_proba`` = TFLite leaves + the numpy engine's sums + link), one thread
(OMP_NUM_THREADS=1, xgboost nthread=1, LiteRT num_threads=1), float32 input rows. Timing: the
engines take turns, ``--repeats`` rounds of >= 0.2 s loops each (0.05 s with --quick); the
table shows the median per-call latency and the ratio to XGBoost's (< 1: faster). Checks
first: numpy vs XGBoost probabilities (<= 1e-6), TFLite vs numpy leaves and raw (exact).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import _common  # noqa: E402,F401  (puts the repo root on sys.path)
import numpy as np  # noqa: E402
from _common import description, markdown_table, median, print_machine  # noqa: E402

N_CLASSES, N_FEATURES, N_CLIENTS, ROWS_PER_CLIENT = 7, 40, 6, 1000


def make_clients(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(N_FEATURES, N_CLASSES))
    clients = []
    for k in range(N_CLIENTS):
        X = rng.normal(size=(ROWS_PER_CLIENT, N_FEATURES)) + 0.3 * k / N_CLIENTS
        logits = X @ w + 1.5 * np.sin(3 * X[:, :N_CLASSES]) + rng.gumbel(size=(ROWS_PER_CLIENT, N_CLASSES))
        clients.append((X.astype(np.float32).astype(np.float64), logits.argmax(axis=1)))
    return clients


def latencies(fns: dict[str, object], repeats: int, min_time: float) -> dict[str, float]:
    """Median seconds per call for each function; the functions take turns in every round."""
    for fn in fns.values():
        fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            calls, start = 0, time.perf_counter()
            while True:
                fn()
                calls += 1
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
            samples[name].append(elapsed / calls)
    return {name: median(values) for name, values in samples.items()}


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="short timing loops (smoke check)")
    parser.add_argument("--repeats", type=int, default=None, help="timing rounds (default 9; 3 with --quick)")
    parser.add_argument("--no-peers", action="store_true", help="only the numpy and TFLite engines")
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 9)
    min_time = 0.05 if args.quick else 0.2

    import aggregator
    from aggregator.algorithms import FedForest, FedSCSXGB
    from shared.model.tflite import TfliteEngine, compile_tflite, load_interpreter

    interpreter = load_interpreter()
    versions = {
        "interpreter": f"{interpreter.__module__} "
        + _common._version("ai-edge-litert" if "litert" in interpreter.__module__ else "tflite-runtime"),
        "threads": "1",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    if not args.no_peers:
        import sklearn
        import xgboost as xgb

        versions.update({"xgboost": xgb.__version__, "scikit-learn": sklearn.__version__})
    command = (
        "python benchmarks/bench_tflite.py"
        + (" --quick" if args.quick else "")
        + (" --no-peers" if args.no_peers else "")
    )
    print_machine("TFLite engine latency vs numpy engine, XGBoost and scikit-learn", command, versions)

    clients = make_clients()
    X_all = np.concatenate([X for X, _ in clients])
    y_all = np.concatenate([y for _, y in clients])
    X_eval = make_clients(seed=1)[0][0].astype(np.float32)  # 1,000 unseen rows
    started = time.perf_counter()
    boosted = aggregator.simulate(FedSCSXGB(protocol="atoms", n_rounds=10, max_depth=4), clients)
    forest = aggregator.simulate(FedForest(protocol="sketches", n_trees=50, max_depth=8), clients)
    print(
        f"- trained in {time.perf_counter() - started:.1f} s: boosted {boosted.n_trees} trees "
        f"(depth {max(t.depth for t in boosted.trees)}), forest {forest.n_trees} trees "
        f"(depth {max(t.depth for t in forest.trees)})"
    )

    engines = {}
    for name, model in (("boosted", boosted), ("forest", forest)):
        started = time.perf_counter()
        data = compile_tflite(model)
        engines[name] = TfliteEngine(data)
        print(f"- {name}: compiled to {len(data) / 1024:,.0f} KiB .tflite in {time.perf_counter() - started:.2f} s")

    ok = True
    for name, model in (("boosted", boosted), ("forest", forest)):
        engine = engines[name]
        same = np.array_equal(engine.leaves(X_eval), model.leaves(X_eval)) and np.array_equal(
            engine.raw(X_eval), model.predict_raw(X_eval)
        )
        print(f"- {name}: TFLite leaves and raw == numpy engine on 1,000 rows: {same}")
        ok &= same

    peers: dict[str, dict[str, object]] = {"boosted": {}, "forest": {}}
    if not args.no_peers:
        from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

        booster = xgb.Booster()
        booster.load_model(bytearray(boosted.to_xgboost_json()))
        booster.set_param({"nthread": 1})
        diff = float(np.max(np.abs(booster.inplace_predict(X_eval) - boosted.predict_proba(X_eval))))
        print(f"- boosted: max |numpy engine - xgboost| probability on 1,000 rows: {diff:.1e}")
        ok &= diff <= 1e-6
        xgb_forest = xgb.train(
            {
                "objective": "multi:softprob",
                "num_class": N_CLASSES,
                "num_parallel_tree": 50,
                "max_depth": 8,
                "subsample": 0.632,
                "colsample_bynode": 0.16,
                "eta": 1.0,
                "nthread": 1,
                "tree_method": "hist",
            },
            xgb.DMatrix(X_all, y_all),
            num_boost_round=1,
        )
        gbc = GradientBoostingClassifier(n_estimators=10, max_depth=4, random_state=0).fit(X_all, y_all)
        rfc = RandomForestClassifier(n_estimators=50, max_depth=8, n_jobs=1, random_state=0).fit(X_all, y_all)
        peers["boosted"] = {"xgboost": booster.inplace_predict, "sklearn": gbc.predict_proba}
        peers["forest"] = {"xgboost": xgb_forest.inplace_predict, "sklearn": rfc.predict_proba}
        labels = {
            "boosted": ("same model (70 trees)", "GradientBoostingClassifier 10x7 trees d4"),
            "forest": ("RF booster 50x7 trees d8", "RandomForestClassifier 50 trees d8"),
        }
        for name in peers:
            print(f"- {name} peers: xgboost = {labels[name][0]}; scikit-learn = {labels[name][1]}")
    print()

    headers = [
        "model",
        "rows",
        "numpy engine",
        "TFLite engine",
        "xgboost",
        "scikit-learn",
        "numpy / xgb",
        "TFLite / xgb",
    ]
    table = []
    for name, model in (("boosted 10x7 d4", boosted), ("forest 50 d8", forest)):
        key = name.split()[0]
        engine = engines[key]
        for n in (1, 1000):
            X = np.ascontiguousarray(X_eval[:n])
            fns = {"numpy": lambda X=X, m=model: m.predict_proba(X), "tflite": lambda X=X, e=engine: e.predict_proba(X)}
            for peer, fn in peers[key].items():
                fns[peer] = lambda X=X, fn=fn: fn(X)
            t = latencies(fns, repeats, min_time)
            xg = t.get("xgboost")
            table.append(
                [
                    name,
                    f"{n:,}",
                    fmt(t["numpy"]),
                    fmt(t["tflite"]),
                    fmt(xg) if xg else "-",
                    fmt(t["sklearn"]) if "sklearn" in t else "-",
                    f"{t['numpy'] / xg:.2f}" if xg else "-",
                    f"{t['tflite'] / xg:.2f}" if xg else "-",
                ]
            )
    print(markdown_table(headers, table))
    if not ok:
        print("\nFAILED: engines disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
