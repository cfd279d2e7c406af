"""Real recordings for the feature tests, loaded straight from the packages that bundle them.

- seglearn's smartwatch set (50 Hz, ax ay az [g], wx wy wz) brought to the pipeline's form the
  way edge_client.pipeline does it: resampled to 20 Hz (``resample_poly`` 2/5, edge-padded like the
  pipeline's resampler), then the causal 5th-order Butterworth low-pass at 5 Hz on the 20 Hz
  samples (steady-state start), cut into 80-sample windows with a 40-sample step.
- ECG: pyhrv SampleECG.txt (1000 Hz, BITalino ADC, column 6) and pyphysio medical.txt.bz2
  (2048 Hz, column 0 = ECG of "ecg, eda, bvp, resp"; ``np.loadtxt`` gives the same array as
  ``np.genfromtxt`` three times faster).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import signal

WATCH_RATE_HZ = 50.0
RATE_HZ = 20.0
WINDOW = 80
STEP = 40


def _package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"{package} is not installed: `pip install --no-deps {package}` (dev setup) brings the file")
    return Path(spec.submodule_search_locations[0]) / relative


@functools.lru_cache(maxsize=1)
def watch_series() -> tuple[np.ndarray, ...]:
    data = np.load(_package_file("seglearn", "data/watch_dataset.npy"), allow_pickle=True).item()
    return tuple(np.asarray(x, dtype=np.float64) for x in data["X"])


def to_pipeline_rate(series: np.ndarray) -> np.ndarray:
    resampled = signal.resample_poly(series, 2, 5, axis=0, padtype="edge")
    sos = signal.butter(5, 5.0, fs=RATE_HZ, output="sos")
    zi = signal.sosfilt_zi(sos)[:, :, None] * resampled[0]
    low, _ = signal.sosfilt(sos, resampled, axis=0, zi=zi)
    return low


def watch_windows(series_indices: tuple[int, ...] = (0, 17, 63, 101)) -> np.ndarray:
    """(n_windows, 80, 6) float64 windows at 20 Hz from the chosen watch series."""
    windows = []
    for index in series_indices:
        x = to_pipeline_rate(watch_series()[index])
        starts = range(0, len(x) - WINDOW + 1, STEP)
        windows.extend(x[s : s + WINDOW] for s in starts)
    return np.stack(windows)


@functools.lru_cache(maxsize=1)
def pyhrv_ecg() -> tuple[np.ndarray, float]:
    table = np.loadtxt(_package_file("pyhrv", "files/SampleECG.txt"), comments="#")
    return table[:, 5].copy(), 1000.0


@functools.lru_cache(maxsize=1)
def medical_ecg() -> tuple[np.ndarray, float]:
    table = np.loadtxt(_package_file("pyphysio", "test_data/medical.txt.bz2"), delimiter="\t")
    return table[:, 0].copy(), 2048.0
