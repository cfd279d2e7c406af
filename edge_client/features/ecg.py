"""R-peak detection and heart-rate / RR features from the raw ECG of one window.

Why a detector of our own: the gateway may import only numpy (SciPy's ~108 MB of RSS does not
fit its 80 MB budget; test_features_imports checks that no scipy module is loaded), and the
window is short (4 s, 3-8 beats), so the classic Pan-Tompkins (1985) learning phase over the
first 2 s of a recording does not exist. The detector keeps Pan-Tompkins' signal chain and decision rules
and replaces the learning phase by levels estimated from the window itself:

1. non-finite samples repaired (cleaning.fill_missing);
2. band-pass 5-15 Hz (2nd-order Butterworth, zero phase: the whole window is available, and zero
   phase keeps the QRS where it is) - keeps the QRS, removes baseline wander and mains/EMG noise
   above 15 Hz, attenuates the slower P and T waves. Applied in the frequency domain: one FFT of
   the window, multiplied by the squared magnitude ``1 / (1 + r**4)`` of the digital Butterworth
   band-pass (``r = (t**2 - t1 t2) / (t (t2 - t1))``, ``t = tan(pi f / fs)``, ``t1``, ``t2`` the
   band edges' ``t``) - the steady-state response of SciPy's forward-backward ``sosfiltfilt``
   with ``butter(2, band, 'bandpass')``, without a per-sample recursion (a Python loop at 2048 Hz
   would not fit the gateway's CPU budget; both bands of a 4 s window cost ~0.15 ms at 250 Hz,
   ~0.6 ms at 2048 Hz). The window is mean-removed and extended on both sides by 1 s of odd reflection
   (as ``sosfiltfilt``'s padding, longer), and the FFT's circular wrap is bridged by a straight
   line (the band-pass removes ramps); the 1-40 Hz band of step 7 comes from the same FFT;
3. five-point derivative, squared, moving-window integration over 150 ms (one QRS width);
4. candidates: local maxima of the integrated signal at least 200 ms apart (refractory period:
   no heart beats faster than 300 bpm) - ``scipy.signal.find_peaks(distance=...)``'s rule in
   numpy: a flat top counts once, at its middle; the higher of two close maxima wins (on equal
   heights the later one), suppressing all others within the distance;
5. adaptive threshold, candidate by candidate (a loop over the few candidates, not over
   samples): SPKI/NPKI running signal/noise peak levels (update weight 1/8), threshold
   NPKI + (SPKI - NPKI) / 4; initial levels SPKI = half the 90th percentile and NPKI = half the
   median of the window's candidate heights (robust to one artefact spike, which is what
   Pan-Tompkins' "1/3 of the maximum" is not), and never below 5 % of the largest candidate
   (a window with one or two beats has only noise at its 90th percentile); a candidate within
   360 ms of the previous beat whose maximum slope is under half that beat's is a T wave;
6. search-back: in an RR gap longer than 1.66 x the median RR (Pan-Tompkins: the mean of the
   last 8 RR; with 2-7 RR per window, the median is not dragged up by the gap itself), the
   highest candidate above half the threshold is taken as a missed beat;
7. each beat is placed on the R apex: the extremum of the 1-40 Hz band-passed ECG within
   +-75 ms, with the polarity (R up or QS down) chosen once per window by which deflection
   dominates over all beats; an extremum on the border of that search span is no apex (the
   real one is outside, e.g. a QRS cut by the window edge) and the beat is dropped;
8. edge guard: a beat whose apex lies within 50 ms of the window's start or end is dropped:
   its QRS is cut by the edge, so neither its detection nor its position is reliable. The
   overlapping neighbour window (2 s step) sees that beat in full.

Features (``ecg_feature_names``), from the beats of the window and RR = their differences:
number of beats; mean HR = 60 / mean(RR) in bpm; min and max HR (60 / max RR, 60 / min RR);
mean RR in ms; SDNN = sample standard deviation (ddof = 1, as pyhrv) of RR in ms; RMSSD =
sqrt(mean(diff(RR)^2)) in ms. Values that need more beats than found are 0 (HR needs 2 beats,
SDNN and RMSSD 3), never NaN: ``ecg_n_beats`` tells the model which case it is.
"""

from __future__ import annotations

import functools

import numpy as np

from edge_client.features.cleaning import fill_missing

MIN_SAMPLE_RATE_HZ = 100.0
QRS_BAND_HZ = (5.0, 15.0)
LOCATE_BAND_HZ = (1.0, 40.0)
INTEGRATION_S = 0.150
REFRACTORY_S = 0.200
T_WAVE_S = 0.360
APEX_SEARCH_S = 0.075
EDGE_GUARD_S = 0.050
SEARCHBACK_RR = 1.66
FLOOR_OF_LARGEST = 0.05
MIN_DURATION_S = 0.5
BAND_PASS_ORDER = 2
FILTER_PAD_S = 1.0

ECG_FEATURES = (
    "ecg_n_beats",
    "ecg_hr_mean_bpm",
    "ecg_hr_min_bpm",
    "ecg_hr_max_bpm",
    "ecg_rr_mean_ms",
    "ecg_sdnn_ms",
    "ecg_rmssd_ms",
)


def ecg_feature_names() -> list[str]:
    """ECG feature suffixes, in ``ecg_features`` order (full names ``sensor.channel.suffix``)."""
    return list(ECG_FEATURES)


def _fft_size(m: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c) >= m: a fast FFT length close to m."""
    best = 1 << max(0, m - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = p35
            while q < m:
                q *= 2
            best = min(best, q)
            p35 *= 3
        p5 *= 5
    return best


@functools.lru_cache(maxsize=32)
def _zero_phase_gain(n_fft: int, fs: float, low_hz: float, high_hz: float) -> np.ndarray:
    """|H(f)|^2 of the digital Butterworth band-pass of order ``BAND_PASS_ORDER`` on the rfft bins.

    The bilinear design maps the analog band-pass ``s -> (s^2 + w1 w2) / (s (w2 - w1))`` of a
    Butterworth prototype ``1 / (1 + W^(2N))`` with pre-warped edges ``w = tan(pi f_edge / fs)``
    (any common scale cancels); squared because the filter is applied forward and backward.
    """
    high_hz = min(high_hz, 0.45 * fs)
    t = np.tan(np.pi * np.fft.rfftfreq(n_fft, 1.0 / fs) / fs)
    t1, t2 = np.tan(np.pi * low_hz / fs), np.tan(np.pi * high_hz / fs)
    gain = np.zeros_like(t)
    inside = t > 0  # DC: the band-pass's zero
    ratio = (t[inside] ** 2 - t1 * t2) / (t[inside] * (t2 - t1))
    gain[inside] = 1.0 / (1.0 + ratio ** (2 * BAND_PASS_ORDER))
    gain.flags.writeable = False
    return gain


def _band_passed(x: np.ndarray, fs: float, bands: tuple[tuple[float, float], ...]) -> list[np.ndarray]:
    """``x`` through each zero-phase band-pass in ``bands`` (step 2 of the module docstring), one FFT for all."""
    n = x.size
    pad = min(n - 1, round(FILTER_PAD_S * fs))
    centred = x - x.mean()
    extended = np.concatenate(
        (2 * centred[0] - centred[pad:0:-1], centred, 2 * centred[-1] - centred[-2 : -pad - 2 : -1])
    )
    n_fft = _fft_size(extended.size)
    buffer = np.empty(n_fft)
    buffer[: extended.size] = extended
    gap = n_fft - extended.size
    buffer[extended.size :] = extended[-1] + (extended[0] - extended[-1]) * np.arange(1, gap + 1) / (gap + 1)
    spectrum = np.fft.rfft(buffer)
    return [
        np.fft.irfft(spectrum * _zero_phase_gain(n_fft, fs, low, high), n_fft)[pad : pad + n] for low, high in bands
    ]


def _local_maxima(x: np.ndarray, distance: int) -> np.ndarray:
    """Indices of the local maxima of ``x`` at least ``distance`` samples apart (step 4).

    A maximum is a sample (or the middle of a flat run, rounded down) with a lower neighbour on
    each side; the first and last samples never are. Then, highest first (on equal heights the
    later one), each kept maximum removes the others closer than ``distance``.
    """
    step = np.diff(x)
    changes = np.flatnonzero(step)
    if changes.size < 2:
        return np.zeros(0, dtype=np.int64)
    rising = step[changes[:-1]] > 0
    falling = step[changes[1:]] < 0
    j = np.flatnonzero(rising & falling)
    peaks = ((changes[j] + 1 + changes[j + 1]) // 2).astype(np.int64)
    if distance <= 1 or peaks.size < 2:
        return peaks
    keep = np.ones(peaks.size, dtype=bool)
    lower = np.searchsorted(peaks, peaks - distance, side="right")
    upper = np.searchsorted(peaks, peaks + distance, side="left")
    for i in np.argsort(x[peaks], kind="stable")[::-1].tolist():
        if keep[i]:
            keep[lower[i] : i] = False
            keep[i + 1 : upper[i]] = False
    return peaks[keep]


def _check_rate(fs: float) -> float:
    fs = float(fs)
    if not fs >= MIN_SAMPLE_RATE_HZ:
        raise ValueError(
            f"ECG sampled at {fs} Hz is too slow to locate R peaks: the QRS band reaches 15 Hz and "
            f"the apex needs ms resolution; record the ECG at >= {MIN_SAMPLE_RATE_HZ:g} Hz"
        )
    return fs


def _as_series(ecg: np.ndarray) -> np.ndarray:
    ecg = np.asarray(ecg)
    if ecg.ndim != 1 or ecg.dtype.kind not in "biuf":
        raise ValueError(
            f"expected one ECG channel as a 1-D real array, got shape {ecg.shape} dtype {ecg.dtype}; "
            f"pass raw[:, channel] for a multi-channel sensor"
        )
    return fill_missing(ecg)[0]


def _thresholded_beats(
    heights: np.ndarray, positions: np.ndarray, slopes: np.ndarray, fs: float
) -> tuple[list[int], np.ndarray]:
    """Pan-Tompkins decisions over the candidates; returns accepted candidate indices and the
    threshold in force at every candidate (for search-back)."""
    signal_level = 0.5 * np.percentile(heights, 90)
    noise_level = 0.5 * np.median(heights)
    floor = FLOOR_OF_LARGEST * heights.max()
    thresholds = np.empty(len(heights))
    beats: list[int] = []
    for i, height in enumerate(heights):
        threshold = max(noise_level + 0.25 * (signal_level - noise_level), floor)
        thresholds[i] = threshold
        is_t_wave = (
            bool(beats) and positions[i] - positions[beats[-1]] < T_WAVE_S * fs and slopes[i] < 0.5 * slopes[beats[-1]]
        )
        if height > threshold and not is_t_wave:
            beats.append(i)
            signal_level = 0.125 * height + 0.875 * signal_level
        else:
            noise_level = 0.125 * height + 0.875 * noise_level
    return beats, thresholds


def _search_back(beats: list[int], positions: np.ndarray, heights: np.ndarray, thresholds: np.ndarray) -> list[int]:
    """Add, in every RR gap > SEARCHBACK_RR x median RR, the highest candidate above half the threshold."""
    if len(beats) < 2:
        return beats
    limit = SEARCHBACK_RR * np.median(np.diff(positions[beats]))
    found = list(beats)
    for left, right in zip(beats[:-1], beats[1:]):
        if positions[right] - positions[left] <= limit:
            continue
        inside = np.arange(left + 1, right)
        inside = inside[heights[inside] > 0.5 * thresholds[inside]]
        if inside.size:
            found.append(int(inside[np.argmax(heights[inside])]))
    return sorted(found)


def detect_r_peaks(signal: np.ndarray, fs: float) -> np.ndarray:
    """Sample indices (int64, ascending) of the R apexes in one ECG channel sampled at ``fs`` Hz.

    Never raises on content: a flat, missing or too short (< 0.5 s) signal has no beats.
    Raises ValueError for fs < 100 Hz or a non-1-D input (configuration errors).
    """
    fs = _check_rate(fs)
    x = _as_series(signal)
    n = x.size
    if n < MIN_DURATION_S * fs or x.max() == x.min():
        return np.zeros(0, dtype=np.int64)
    qrs, located = _band_passed(x, fs, (QRS_BAND_HZ, LOCATE_BAND_HZ))
    slope = np.convolve(qrs, np.array([1.0, 2.0, 0.0, -2.0, -1.0]) * (fs / 8.0), mode="same")
    energy = slope * slope
    width = max(1, int(round(INTEGRATION_S * fs)))
    cumulative = np.concatenate(([0.0], np.cumsum(energy)))
    index = np.arange(n)
    upper = np.clip(index - width // 2 + width, 0, n)
    lower = np.clip(index - width // 2, 0, n)
    integrated = (cumulative[upper] - cumulative[lower]) / width
    positions = _local_maxima(integrated, max(1, int(round(REFRACTORY_S * fs))))
    if positions.size == 0:
        return np.zeros(0, dtype=np.int64)
    heights = integrated[positions]
    slopes = np.abs(slope)[np.clip(positions[:, None] + np.arange(-(width // 2), width // 2 + 1), 0, n - 1)].max(axis=1)
    beats, thresholds = _thresholded_beats(heights, positions, slopes, fs)
    beats = _search_back(beats, positions, heights, thresholds)
    if not beats:
        return np.zeros(0, dtype=np.int64)
    reach = int(round(APEX_SEARCH_S * fs))
    around = np.clip(positions[beats][:, None] + np.arange(-reach, reach + 1), 0, n - 1)
    segments = located[around]
    polarity = 1.0 if segments.max(axis=1).sum() >= -segments.min(axis=1).sum() else -1.0
    offset = np.argmax(polarity * segments, axis=1)
    apexes = around[np.arange(len(beats)), offset]
    guard = int(round(EDGE_GUARD_S * fs))
    keep = (offset > 0) & (offset < 2 * reach) & (apexes >= guard) & (apexes < n - guard)
    return np.unique(apexes[keep]).astype(np.int64)


def ecg_features(raw: np.ndarray, fs: float) -> np.ndarray:
    """``ecg_feature_names()`` values (float64) of one raw ECG channel ``(n,)`` at ``fs`` Hz."""
    beats = detect_r_peaks(raw, fs)
    rr = np.diff(beats) / float(fs)
    out = np.zeros(len(ECG_FEATURES))
    out[0] = beats.size
    if rr.size >= 1:
        out[1:5] = 60.0 / rr.mean(), 60.0 / rr.max(), 60.0 / rr.min(), 1000.0 * rr.mean()
    if rr.size >= 2:
        out[5] = 1000.0 * rr.std(ddof=1)
        out[6] = 1000.0 * np.sqrt(np.mean(np.diff(rr) ** 2))
    return out
