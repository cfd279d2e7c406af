"""Frequency-domain features: FFT coefficient magnitudes and Welch power-density summaries.

FFT: ``|rfft(x)[k]|`` for k = 1..5 (tsfresh ``fft_coefficient(attr="abs")``); at 20 Hz and 80
samples the bins are 0.25 Hz apart, so these describe 0.25-1.25 Hz, where arm and propulsion
cycles live. k = 0 (n * mean) would repeat the mean. A coefficient the series is too short to
have is 0 (tsfresh: NaN).

Welch: what ``scipy.signal.welch(x, fs=fs, nperseg=min(n, 80))`` computes (periodic Hann
window, 50 % overlap, constant detrend per segment, one-sided density, mean over segments): one
segment on an 80-sample window (41 bins, 0.25 Hz). It is written out here in a few vectorised
lines because scipy's general-purpose path costs ~1.5 ms of Python overhead per call, half the
time of a gateway's one-window extraction; tests pin it to scipy to 1e-12.
We pass the real ``fs`` (like TIFEX), so densities are in unit^2/Hz and frequencies in Hz;
tsfresh's ``spkt_welch_density`` calls welch with the default fs = 1, i.e. its densities are
ours times fs and its bin k means k * fs / nperseg Hz. Summaries:

- ``welch_peak_hz``: frequency of the largest density (first one on ties; 0 Hz for a flat
  spectrum, e.g. a constant signal, whose detrended density is 0 everywhere);
- ``welch_power_total``: sum(density) * df, the power of the windowed, detrended signal;
- band powers sum(density[lo <= f < hi]) * df over 0-1, 1-3, 3-5 Hz and 5 Hz up to Nyquist
  (the last band is empty below fs = 10 Hz and then 0).

Both are computed on the deviations from the mean (statistics.centre), which changes nothing
for k >= 1 or after Welch's constant detrend, except that a constant window gives exactly 0:
detrending eighty copies of 0.1 leaves ~1e-34 of rounding "power" whose argmax, the peak
frequency, would be a random bin.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

FFT_COEFFICIENTS = (1, 2, 3, 4, 5)
WELCH_NPERSEG = 80
WELCH_BANDS_HZ = ((0.0, 1.0), (1.0, 3.0), (3.0, 5.0), (5.0, np.inf))


def _band_name(lo: float, hi: float) -> str:
    return f"welch_power_{lo:g}_{hi:g}hz" if np.isfinite(hi) else f"welch_power_{lo:g}hz_up"


FFT_FEATURES = tuple(f"fft_abs_{k}" for k in FFT_COEFFICIENTS)
WELCH_FEATURES = ("welch_peak_hz", "welch_power_total") + tuple(_band_name(lo, hi) for lo, hi in WELCH_BANDS_HZ)


def fft_magnitudes(d: np.ndarray) -> np.ndarray:
    """``|rfft(d)[k]|`` for k in FFT_COEFFICIENTS (d: deviations from the mean), shape ``(..., 5)``;
    0 where k > n // 2."""
    n = d.shape[-1]
    spectrum = np.abs(np.fft.rfft(d, axis=-1)) if n else np.zeros(d.shape[:-1] + (1,))
    return np.stack(
        [spectrum[..., k] if k < spectrum.shape[-1] else np.zeros(d.shape[:-1]) for k in FFT_COEFFICIENTS], axis=-1
    )


@functools.lru_cache(maxsize=8)
def _hann(nperseg: int) -> np.ndarray:
    """Periodic Hann window (scipy.signal.get_window("hann", nperseg)), nperseg >= 2."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(nperseg) / nperseg)


def welch_density(x: np.ndarray, fs: float) -> np.ndarray:
    """One-sided Welch power spectral density along the last axis (n >= 2), unit^2/Hz.

    Bins k = 0 .. nperseg // 2 with nperseg = min(n, 80); segments step nperseg - nperseg // 2;
    trailing samples that do not fill a segment are not used (as scipy with padded=False).
    """
    nperseg = min(x.shape[-1], WELCH_NPERSEG)
    step = nperseg - nperseg // 2
    segments = sliding_window_view(x, nperseg, axis=-1)[..., ::step, :]
    segments = segments - segments.mean(axis=-1, keepdims=True)
    window = _hann(nperseg)
    power = np.abs(np.fft.rfft(segments * window, axis=-1)) ** 2 / (fs * np.sum(window * window))
    power[..., 1 : (nperseg + 1) // 2] *= 2.0  # fold negative frequencies (not DC, not an even Nyquist)
    return power.mean(axis=-2)


def welch_features(d: np.ndarray, fs: float) -> np.ndarray:
    """The WELCH_FEATURES of each series (d: deviations from the mean), shape ``(..., 6)``; all 0 when n < 2."""
    if d.shape[-1] < 2:
        return np.zeros(d.shape[:-1] + (len(WELCH_FEATURES),))
    nperseg = min(d.shape[-1], WELCH_NPERSEG)
    density = welch_density(d, fs)
    # k * fs / nperseg rather than scipy's k / (nperseg / fs): a bin exactly on a band edge
    # (7 * 50 / 70 = 5 Hz) must land in the band it belongs to, not 1 ulp below it
    freqs = np.arange(density.shape[-1]) * fs / nperseg
    df = fs / nperseg
    bands = [density[..., (freqs >= lo) & (freqs < hi)].sum(axis=-1) * df for lo, hi in WELCH_BANDS_HZ]
    return np.stack([freqs[np.argmax(density, axis=-1)], density.sum(axis=-1) * df, *bands], axis=-1)
