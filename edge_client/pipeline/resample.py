"""Stateful polyphase resampling onto the absolute output grid.

What it computes
    Output ``k`` is the band-limited value of the input at the grid instant ``k * period_us`` of the
    common clock (``k * 50 000 us`` at 20 Hz). The input sample ``n`` of a segment sits at the
    instant its sensor's timebase gives it (first sample at ``t0``, then every ``1/fs``), so the
    output instant falls at a fractional input position ``pos_k``; the output is
    ``sum_n w(pos_k - n) * x[n]`` over the ``2 * reach + 1`` samples around it.

The anti-aliasing FIR is ``scipy.signal.resample_poly``'s, computed with numpy alone
    With ``fs_out / fs_in = up / down`` in lowest terms (exact, via ``fractions``), resample_poly
    designs ``firwin(2 * half_len + 1, 1 / max(up, down), window=('kaiser', 5.0))`` at the
    up-sampled rate, ``half_len = 10 * max(up, down)``: a Kaiser-windowed sinc with its cut-off at
    the lower of the two Nyquist frequencies. Here the same windowed sinc is evaluated as a
    continuous function at the needed offsets, so an output can sit at *any* sub-sample phase —
    the absolute grid rarely coincides with a sensor's samples (a 2048 Hz stream started at an
    arbitrary microsecond). The phase of output ``k`` repeats every ``up`` outputs, so at most
    ``up`` distinct weight vectors exist per timebase; they are cached by their exact phase.
    At phase 0 the weights are exactly resample_poly's polyphase branch (tested). The window is
    evaluated with ``np.i0`` and the sinc with ``np.sinc``: no SciPy on the gateway (see the
    package docstring).

    This FIR is the only anti-aliasing filter in front of the 20 Hz grid: the Butterworth
    low-pass runs *after* the resampler (``filters.py`` explains the order). Kaiser(5) puts its
    stop band ~54 dB down; at 20 Hz output its transition band spans ~8.5-11.5 Hz.

    One deliberate difference: each phase's weights are normalised to sum to 1. resample_poly's
    branches sum to 1 only approximately (off by 7.5e-5 at 50 -> 20 Hz, 5e-4 at 10 -> 20 Hz), which
    turns a constant input into a ripple at the polyphase period; here a constant stays constant.
    Against resample_poly the outputs therefore differ by at most that branch error times the
    signal's magnitude (the tests compute the bound from firwin itself).

Delay compensation and causality
    The FIR is symmetric, so its group delay is ``reach`` input samples. The output for instant
    ``k * period_us`` is computed once the input has reached ``pos_k + reach`` and is labelled with
    ``k`` — the delay is compensated in the timestamps, not left in the data. The price is a
    latency of ``reach / fs_in`` (0.5 s when decimating to 20 Hz, 1 s when up-sampling 10 -> 20 Hz).

Edges
    A segment's start is extended backwards with its first (raw) sample and its end, when
    ``finish`` is called, forwards with its last — the same assumption the Butterworth start state
    makes (constant before the segment). resample_poly zero-pads by default (its edge outputs sag towards 0); with
    ``padtype='edge'`` it makes the same assumption as here and agrees at the edges too.

Bit-identical for any chunking
    Positions are exact rationals, so which samples and which weights an output uses never depend
    on chunk boundaries. The sum over taps is done by :func:`fixed_order_sum` — elementwise
    multiply, then pairwise halving adds whose order depends only on the number of taps. A BLAS
    dot product or ``einsum`` may reorder its additions with the array length or alignment, so the
    same output could differ in the last bit between a one-shot and a chunked run. A Python loop
    over taps would also be order-stable, but costs one numpy call per tap (2049 taps at 2048 Hz);
    halving needs ``ceil(log2(taps))`` calls.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

#: resample_poly's default window ('kaiser', 5.0) and filter half-length rule (10 * max(up, down)).
KAISER_BETA = 5.0
HALF_LEN_PER_RATE = 10
#: Largest up or down factor accepted (a kernel of 10x that many taps at the up-sampled rate).
MAX_RATE_FACTOR = 100_000
#: Largest timebase correction (in input samples) ``set_clock`` accepts without a restart.
MAX_CLOCK_STEP = 2
_HISTORY_MARGIN = MAX_CLOCK_STEP + 1
#: Elements of the (taps, outputs, channels) product array computed at once: bounds temporaries.
_BLOCK_ELEMENTS = 1 << 18
_WEIGHT_CACHE_MAX = 256


def exact_rate(rate_hz: float) -> Fraction:
    """A rate as the exact fraction of its shortest decimal spelling (2048.0 -> 2048, 12.5 -> 25/2).

    Binary floats like 100.3 are not exact; the decimal a person wrote in a descriptor is what the
    sensor means, and it keeps the up/down factors small.
    """
    if not (isinstance(rate_hz, (int, float)) and math.isfinite(rate_hz) and rate_hz > 0):
        raise ValueError(f"a sample rate must be a positive finite number, got {rate_hz!r}")
    return Fraction(repr(float(rate_hz)))


def resample_ratio(fs_in_hz: float, fs_out_hz: float) -> tuple[int, int]:
    """``(up, down)`` in lowest terms with ``fs_out / fs_in == up / down`` exactly."""
    ratio = exact_rate(fs_out_hz) / exact_rate(fs_in_hz)
    up, down = ratio.numerator, ratio.denominator
    if max(up, down) > MAX_RATE_FACTOR:
        raise ValueError(
            f"resampling {fs_in_hz} Hz -> {fs_out_hz} Hz needs up/down = {up}/{down}, above {MAX_RATE_FACTOR}; "
            "declare the sensor's nominal rate (e.g. 100 rather than 100.0003)"
        )
    return up, down


def filter_reach(up: int, down: int) -> int:
    """Input samples on each side of an output that the FIR touches: ``ceil(half_len / up)``."""
    return -(-HALF_LEN_PER_RATE * max(up, down) // up)


def kernel_weights(phase: float, up: int, down: int) -> np.ndarray:
    """Weights for the ``2 * reach + 1`` input samples ``i - reach .. i + reach`` of an output at ``i + phase``.

    ``phase`` in [0, 1). The Kaiser-windowed sinc of resample_poly, evaluated at the offsets
    ``(phase + reach - m) * up`` in up-sampled samples, zero outside ``|offset| <= half_len``,
    normalised to unit sum (unit DC gain for every phase).
    """
    if not 0.0 <= phase < 1.0:
        raise ValueError(f"phase must be in [0, 1), got {phase}")
    max_rate = max(up, down)
    half_len = HALF_LEN_PER_RATE * max_rate
    reach = filter_reach(up, down)
    offset = (phase + reach - np.arange(2 * reach + 1, dtype=np.float64)) * up
    inside = np.abs(offset) <= half_len
    radial = np.sqrt(np.clip(1.0 - (offset / half_len) ** 2, 0.0, None))
    w = np.where(inside, np.sinc(offset / max_rate) * np.i0(KAISER_BETA * radial), 0.0)
    return w / w.sum()


def fixed_order_sum(terms: np.ndarray) -> np.ndarray:
    """Sum over axis 0 by pairwise halving, in place; the order of additions depends only on ``len(terms)``.

    Each step adds the top half onto the bottom half elementwise (an odd middle row waits for the
    next step), so every column is reduced by the same tree whatever the other axes hold.
    """
    n = terms.shape[0]
    while n > 1:
        half = n // 2
        terms[:half] += terms[n - half : n]
        n -= half
    return terms[0]


class StreamResampler:
    """Resamples one sensor's segments onto the absolute grid, keeping its input history across chunks.

    A segment is ``start`` -> ``push`` ... -> ``finish``; ``set_clock`` re-anchors the timebase
    mid-segment (clock drift). Outputs come back as ``(k, values)``: grid indices (int64, strictly
    increasing within a segment) and an ``(m, channels)`` float64 array.
    """

    def __init__(self, fs_in_hz: float, fs_out_hz: float, period_us: int) -> None:
        if Fraction(10**6) / exact_rate(fs_out_hz) != period_us:
            raise ValueError(f"period_us={period_us} is not the period of {fs_out_hz} Hz")
        self.fs_in = exact_rate(fs_in_hz)
        self.up, self.down = resample_ratio(fs_in_hz, fs_out_hz)
        self.period_us = period_us
        self.reach = filter_reach(self.up, self.down)
        self._step = Fraction(self.down, self.up)  # input samples per output
        self._samples_per_us = self.fs_in / 10**6
        self._weights: dict[Fraction, np.ndarray] = {}
        self._hist: np.ndarray | None = None  # input samples; row 0 is segment sample `_hist_start`
        self._hist_start = 0
        self._n = 0  # samples pushed in this segment
        self._next_k = 0  # grid index of the next output
        self._next_pos = Fraction(0)  # its exact position in segment sample indices

    @property
    def latency_s(self) -> float:
        """How long after its grid instant an output is emitted (the FIR's half-length)."""
        return self.reach / float(self.fs_in)

    @property
    def history_len(self) -> int:
        return 0 if self._hist is None else len(self._hist)

    def start(self, time_us: Fraction | int, first: np.ndarray) -> None:
        """Begin a segment whose sample 0 is at ``time_us`` with value ``first``.

        The first output is the first grid instant at or after ``time_us``.
        """
        first = np.asarray(first, dtype=np.float64)
        if first.ndim != 1:
            raise ValueError(f"first sample must be 1-D (channels,), got shape {first.shape}")
        t = Fraction(time_us)
        self._next_k = math.ceil(t / self.period_us)
        self._n = 0
        self._hist_start = -(self.reach + _HISTORY_MARGIN)
        self._hist = np.repeat(first[None, :], -self._hist_start, axis=0)
        self._next_pos = self._position(self._next_k, 0, t)

    def set_clock(self, sample_index: int, time_us: Fraction | int) -> None:
        """Re-anchor: segment sample ``sample_index`` is at ``time_us``; applies to outputs not yet emitted."""
        if self._hist is None:
            raise RuntimeError("set_clock() outside a segment: call start() first")
        pos = self._position(self._next_k, sample_index, Fraction(time_us))
        if abs(pos - self._next_pos) > MAX_CLOCK_STEP:
            raise ValueError(
                f"clock correction of {float(pos - self._next_pos):.2f} samples exceeds {MAX_CLOCK_STEP}: "
                "end the segment (a gap) instead of re-anchoring"
            )
        self._next_pos = pos

    def push(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append ``(n, channels)`` samples; return the outputs whose FIR support is now complete."""
        hist = self._require_active()
        self._hist = np.concatenate([hist, np.asarray(samples, dtype=np.float64)])
        self._n += len(samples)
        # Output j needs samples up to floor(pos_j) + reach <= n - 1, i.e. pos_j < n - reach.
        return self._emit(max(0, math.ceil((self._n - self.reach - self._next_pos) / self._step)))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """End the segment: emit the remaining outputs before ``t_last + 1/fs`` (each sample owns its period),
        holding the last sample for the missing right-hand taps."""
        hist = self._require_active()
        count = max(0, math.ceil((self._n - self._next_pos) / self._step))
        if count:
            last_base = math.floor(self._next_pos + (count - 1) * self._step)
            missing = last_base + self.reach - (self._hist_start + len(hist) - 1)
            if missing > 0:
                self._hist = np.concatenate([hist, np.repeat(hist[-1:], missing, axis=0)])
        out = self._emit(count)
        self._hist = None
        return out

    def _require_active(self) -> np.ndarray:
        if self._hist is None:
            raise RuntimeError("StreamResampler used outside a segment: call start(time_us, first_sample) first")
        return self._hist

    def _position(self, k: int, sample_index: int, time_us: Fraction) -> Fraction:
        return sample_index + (k * self.period_us - time_us) * self._samples_per_us

    def _phase_weights(self, phase: Fraction) -> np.ndarray:
        w = self._weights.get(phase)
        if w is None:
            if len(self._weights) >= _WEIGHT_CACHE_MAX:
                self._weights.clear()
            w = self._weights[phase] = kernel_weights(float(phase), self.up, self.down)
        return w

    def _emit(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        hist = self._hist
        assert hist is not None
        if count == 0:
            return np.empty(0, dtype=np.int64), np.empty((0, hist.shape[1]))
        # Outputs j and j + up share a phase and sit exactly `down` samples apart: exact rational
        # arithmetic for the (at most `up`) distinct phases, int64 offsets for the rest.
        n_phase = min(self.up, count)
        positions = [self._next_pos + r * self._step for r in range(n_phase)]
        phase_base = np.array([math.floor(p) for p in positions], dtype=np.int64)
        bank = np.stack([self._phase_weights(p - math.floor(p)) for p in positions], axis=1)  # (taps, phases)
        j = np.arange(count, dtype=np.int64)
        phase = j % self.up
        base = phase_base[phase] + (j // self.up) * self.down
        first_row = base - self.reach - self._hist_start
        taps = 2 * self.reach + 1
        n_ch = hist.shape[1]
        tap_rows = np.arange(taps, dtype=np.int64)[:, None]
        out = np.empty((count, n_ch))
        block = max(1, _BLOCK_ELEMENTS // (taps * n_ch))
        for b in range(0, count, block):
            sl = slice(b, b + block)
            terms = hist[first_row[sl][None, :] + tap_rows]  # (taps, outputs, channels), a fresh copy
            terms *= bank[:, phase[sl]][:, :, None]
            out[sl] = fixed_order_sum(terms)
        ks = self._next_k + j
        self._next_k += count
        self._next_pos += count * self._step
        drop = math.floor(self._next_pos) - self.reach - _HISTORY_MARGIN - self._hist_start
        if drop > 0:
            self._hist = hist[drop:]
            self._hist_start += drop
        return ks, out
