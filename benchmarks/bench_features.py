"""Window feature extraction throughput: WheelFed's vectorised numpy features vs tsfresh.

Real windows: the seglearn smartwatch set (6 channels: ax ay az wx wy wz), low-passed and
resampled to 20 Hz like the pipeline, cut into 80-sample windows every 40 samples (2,231 windows).
WheelFed computes its 34 features per channel (edge_client.features.extract); tsfresh runs
``extract_features`` with the same calculators (mean ... sample_entropy, cid_ce, 5 FFT magnitudes,
the 41 Welch densities our summaries are built from, 5 autocorrelation lags, number_peaks(3),
number_crossing_m(0)), single process (n_jobs=0) like our single thread, and with one worker per
core. Before timing, both outputs are compared on the same windows (they must agree to 1e-9).

    python benchmarks/bench_features.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np

from _common import description, markdown_table, median, print_machine

os.environ.setdefault("OMP_NUM_THREADS", "1")

FS = 20.0
LAGS = (1, 2, 5, 10, 20)
FC_PARAMETERS = {
    "mean": None,
    "standard_deviation": None,
    "variance": None,
    "median": None,
    "minimum": None,
    "maximum": None,
    "skewness": None,
    "kurtosis": None,
    "absolute_sum_of_changes": None,
    "mean_change": None,
    "mean_abs_change": None,
    "longest_strike_above_mean": None,
    "longest_strike_below_mean": None,
    "sample_entropy": None,
    "cid_ce": [{"normalize": True}],
    "fft_coefficient": [{"coeff": k, "attr": "abs"} for k in range(1, 6)],
    "spkt_welch_density": [{"coeff": k} for k in range(41)],
    "autocorrelation": [{"lag": lag} for lag in LAGS],
    "number_peaks": [{"n": 3}],
    "number_crossing_m": [{"m": 0}],
}
_DIRECT = {
    "mean": "mean",
    "std": "standard_deviation",
    "var": "variance",
    "median": "median",
    "min": "minimum",
    "max": "maximum",
    "skewness": "skewness",
    "kurtosis": "kurtosis",
    "abs_sum_of_changes": "absolute_sum_of_changes",
    "mean_change": "mean_change",
    "mean_abs_change": "mean_abs_change",
    "longest_strike_above_mean": "longest_strike_above_mean",
    "longest_strike_below_mean": "longest_strike_below_mean",
    "sample_entropy": "sample_entropy",
    "cid_ce": "cid_ce__normalize_True",
    **{f"fft_abs_{k}": f'fft_coefficient__attr_"abs"__coeff_{k}' for k in range(1, 6)},
    **{f"autocorr_lag_{lag}": f"autocorrelation__lag_{lag}" for lag in LAGS},
    "n_peaks_support_3": "number_peaks__n_3",
}


def long_format(windows: np.ndarray):
    import pandas as pd

    n, t, c = windows.shape
    frame = pd.DataFrame({"id": np.repeat(np.arange(n), t), "time": np.tile(np.arange(t), n)})
    for channel in range(c):
        frame[f"c{channel}"] = windows[:, :, channel].reshape(-1)
    return frame


def run_tsfresh(frame, n_jobs: int):
    from tsfresh import extract_features

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return extract_features(
            frame,
            column_id="id",
            column_sort="time",
            default_fc_parameters=FC_PARAMETERS,
            n_jobs=n_jobs,
            disable_progressbar=True,
        )


def tsfresh_as_ours(table, n_channels: int, n_samples: int) -> np.ndarray:
    """tsfresh's columns rearranged (and Welch summaries derived) into extract()'s layout."""
    from edge_client.features import channel_feature_names

    freqs = np.arange(41) * FS / 80
    bands = [(0, 1), (1, 3), (3, 5), (5, np.inf)]
    blocks = []
    for channel in range(n_channels):
        col = lambda name: table[f"c{channel}__{name}"].to_numpy(dtype=float)  # noqa: E731
        density = np.column_stack([col(f"spkt_welch_density__coeff_{k}") for k in range(41)]) / FS
        derived = {
            "welch_peak_hz": freqs[np.argmax(density, axis=1)],
            "welch_power_total": density.sum(axis=1) * FS / 80,
            **{
                name: density[:, (freqs >= lo) & (freqs < hi)].sum(axis=1) * FS / 80
                for name, (lo, hi) in zip(
                    ["welch_power_0_1hz", "welch_power_1_3hz", "welch_power_3_5hz", "welch_power_5hz_up"], bands
                )
            },
            "zero_crossing_rate": col("number_crossing_m__m_0") / n_samples,
            "missing_fraction": np.zeros(len(table)),
        }
        blocks.append(
            np.column_stack([col(_DIRECT[n]) if n in _DIRECT else derived[n] for n in channel_feature_names()])
        )
    return np.hstack(blocks)


def rate(fn, n_windows: int, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return n_windows / median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="fewer tsfresh windows and repeats (smoke check)")
    args = parser.parse_args()
    logging.getLogger("tsfresh").setLevel(logging.ERROR)
    import scipy
    import tsfresh

    from edge_client.features import FEATURE_SET_VERSION, extract
    from tests.edge_client.features.features_real_data import watch_series, watch_windows

    windows = watch_windows(tuple(range(len(watch_series()))))
    n_tsfresh = 60 if args.quick else 300
    repeats = 2 if args.quick else 5
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    print_machine(
        "Window features: WheelFed numpy vs tsfresh extract_features (6 channels x 80 samples)",
        "python benchmarks/bench_features.py" + (" --quick" if args.quick else ""),
        {
            "scipy": scipy.__version__,
            "tsfresh": tsfresh.__version__,
            "feature set": FEATURE_SET_VERSION,
            "threads": "1 (OMP_NUM_THREADS=1)",
        },
    )

    subset = windows[:n_tsfresh]
    frame = long_format(subset)
    ours_subset = extract(subset, FS)
    theirs = tsfresh_as_ours(run_tsfresh(frame, 0), subset.shape[2], subset.shape[1])
    scale = np.maximum(1.0, np.abs(theirs).max(axis=0))
    worst = float(np.max(np.abs(ours_subset - theirs) / (np.abs(theirs) + 1e-12 * scale)))
    print(f"- windows: {len(windows):,} real (seglearn watch, 20 Hz); tsfresh timed on the first {n_tsfresh}")
    print(f"- agreement on those {n_tsfresh} windows x 204 features: max relative difference {worst:.1e}")
    print()

    single = windows[: min(500, len(windows))]
    results = [
        (
            "WheelFed extract, one batch of all windows",
            len(windows),
            rate(lambda: extract(windows, FS), len(windows), repeats),
        ),
        (
            "WheelFed extract, one window per call (gateway)",
            len(single),
            rate(lambda: [extract(w[None], FS) for w in single], len(single), repeats),
        ),
        ("tsfresh extract_features, n_jobs=0", n_tsfresh, rate(lambda: run_tsfresh(frame, 0), n_tsfresh, 1)),
        (f"tsfresh extract_features, n_jobs={cores}", n_tsfresh, rate(lambda: run_tsfresh(frame, cores), n_tsfresh, 1)),
    ]
    baseline = results[2][2]
    rows = [[name, f"{n:,}", f"{r:,.0f}", f"{1000 / r:.3f}", f"{r / baseline:,.1f}"] for name, n, r in results]
    print(markdown_table(["implementation", "windows", "windows/s", "ms/window", "x tsfresh (n_jobs=0)"], rows))
    print()
    goal = results[0][2] / baseline
    print(
        f"goal >= 50x tsfresh: {'met' if goal >= 50 else 'NOT met'} ({goal:,.0f}x batch, "
        f"{results[1][2] / baseline:,.0f}x one window per call)"
    )
    return 0 if worst <= 1e-9 and goal >= 50 else 1


if __name__ == "__main__":
    raise SystemExit(main())
