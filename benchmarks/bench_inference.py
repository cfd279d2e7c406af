"""numpy inference engine throughput: 100 trees of depth 6, against XGBoost and scikit-learn.

Trains an XGBoost booster (binary:logistic, 100 rounds, max_depth 6) and a scikit-learn
RandomForest (100 trees, max_depth 6), converts both into WheelFed's TreeEnsemble, checks the
predictions agree (1e-6), then measures rows/s of WheelFed's numpy engine and of the library's
own predict on the same rows, single-threaded, for batch sizes a gateway sees (1 row: one
window) and for bulk scoring.

    python benchmarks/bench_inference.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np

from _common import description, median, print_machine

os.environ.setdefault("OMP_NUM_THREADS", "1")


def timed_rate(fn, n_rows: int, min_time_s: float) -> float:
    """Rows per second: median over repeats, each repeat running ``fn`` for >= min_time_s/5."""
    fn()  # warm-up (compilation, caches)
    rates = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s / 5:
                break
        rates.append(calls * n_rows / elapsed)
    return median(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="shorter timing (smoke check)")
    args = parser.parse_args()
    import sklearn
    import xgboost as xgb
    from sklearn.ensemble import RandomForestClassifier

    from tests.shared.model.test_model_oracles import sklearn_to_ensemble
    from tests.shared.model.xgboost_json import booster_to_ensemble

    print_machine(
        "Numpy inference engine vs XGBoost / scikit-learn (100 trees, depth 6)",
        "python benchmarks/bench_inference.py" + (" --quick" if args.quick else ""),
        {"xgboost": xgb.__version__, "scikit-learn": sklearn.__version__, "threads": "1"},
    )
    rng = np.random.default_rng(0)
    n_features = 60  # roughly one sensor's TIFEX-style feature vector
    X = rng.normal(size=(20_000, n_features)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=len(X)) > 0).astype(int)
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 6, "eta": 0.3, "nthread": 1, "tree_method": "hist"},
        xgb.DMatrix(X, y),
        num_boost_round=100,
    )
    boosted = booster_to_ensemble(booster)
    forest_model = RandomForestClassifier(n_estimators=100, max_depth=6, n_jobs=1, random_state=0).fit(X, y)
    forest = sklearn_to_ensemble(forest_model, "forest")

    ok = True
    for name, ours, theirs in (
        ("xgboost", boosted.predict_proba(X[:2000])[:, 1], booster.inplace_predict(X[:2000])),
        ("sklearn", forest.predict_proba(X[:2000]), forest_model.predict_proba(X[:2000])),
    ):
        diff = float(np.max(np.abs(ours - theirs)))
        print(f"- max |ours - {name}| on 2,000 rows: {diff:.2e}")
        ok &= diff <= 1e-6
    print()

    min_time = 0.5 if args.quick else 2.5
    rows = "| model | batch | WheelFed numpy rows/s | library rows/s | ratio (ours / library) |"
    print(rows)
    print("|---|---|---|---|---|")
    for label, ours, theirs in (
        ("xgboost 100x d6", boosted.predict_proba, booster.inplace_predict),
        ("sklearn RF 100x d6", forest.predict_proba, forest_model.predict_proba),
    ):
        for batch in (1, 100, 10_000):
            Xb = X[:batch]
            r_ours = timed_rate(lambda: ours(Xb), batch, min_time)
            r_lib = timed_rate(lambda: theirs(Xb), batch, min_time)
            print(f"| {label} | {batch:,} | {r_ours:,.0f} | {r_lib:,.0f} | {r_ours / r_lib:.2f} |")
    if not ok:
        print("\nFAILED: predictions differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
