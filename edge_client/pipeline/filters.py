"""Causal Butterworth low-pass with carried state, on the 20 Hz grid: the second stage of every
sensor's path.

It runs after the polyphase resampler (``resample.py``) -- the reverse of FedSCS-XGB §III-A's
order, because a gateway can afford neither SciPy nor a recursive filter at the sensors' native
rates -- equals ``scipy.signal.sosfilt`` bit for bit whatever the chunking, starts each segment in
the steady state of its first sample, and is the identity where the cut-off lies at or above the
sensor's or the grid's Nyquist. Why that order is sound and what it changes (measured on real
recordings), and the design of the sections: ``docs/gateway.md``.
"""

from __future__ import annotations

import numpy as np


def butter_lowpass_sos(order: int, cutoff_hz: float, fs_hz: float) -> np.ndarray:
    """``scipy.signal.butter(order, cutoff_hz, fs=fs_hz, output='sos')`` in numpy: ``(sections, 6)``.

    Same steps and pairing as SciPy, so the coefficients agree to rounding (tested to 1e-12):

    1. analog prototype poles ``-exp(i pi m / (2 N))``, ``m = -N+1, -N+3, ..., N-1`` (gain 1);
    2. scaled to the pre-warped cut-off ``w = 4 tan(pi fc / fs)`` (SciPy designs at a normalised
       ``fs = 2``), gain ``w**N``;
    3. bilinear transform ``z = (4 + s) / (4 - s)``: the N zeros at infinity land on ``z = -1``,
       the gain becomes ``w**N * re(1 / prod(4 - p))``;
    4. second-order sections by SciPy's "nearest" pairing: an odd order gets an extra pole and zero
       at the origin; from the last section to the first, the pole nearest the unit circle (with
       its conjugate, or for a real pole the other real pole) takes the zero nearest to it and then
       the nearest real zero; the gain goes into the first section.
    """
    if order < 1 or int(order) != order:
        raise ValueError(f"filter order must be a positive integer, got {order}")
    if not 0 < cutoff_hz < fs_hz / 2:
        raise ValueError(f"cut-off {cutoff_hz} Hz must lie strictly between 0 and Nyquist ({fs_hz / 2} Hz)")
    n = int(order)
    m = np.arange(-n + 1, n, 2, dtype=np.float64)
    prototype = -np.exp(1j * np.pi * m / (2 * n))
    wn = 2.0 * cutoff_hz / fs_hz
    warped = 2 * 2.0 * np.tan(np.pi * wn / 2.0)
    analog = warped * prototype
    gain = 1.0 * warped**n
    fs2 = 2.0 * 2.0
    poles = (fs2 + analog) / (fs2 - analog)
    gain = gain * np.real(1.0 / np.prod(fs2 - analog))

    real = np.abs(poles.imag) <= 100 * np.finfo(np.float64).eps * np.abs(poles)
    real_poles = poles[real].real.tolist()
    remaining_zeros = [-1.0] * n
    if n % 2:  # an odd order gets an extra pole and zero at the origin
        real_poles.append(0.0)
        remaining_zeros.append(0.0)
    upper = poles[~real & (poles.imag > 0)]
    upper = upper[np.lexsort((np.abs(upper.imag), upper.real))]  # SciPy's order (matters only for ties)
    remaining_poles: list[complex | float] = [complex(p) for p in upper] + sorted(real_poles)
    remaining_zeros.sort()
    n_sections = (n + 1) // 2
    sos = np.zeros((n_sections, 6))

    def worst(candidates: list) -> int:  # digital: the pole closest to the unit circle
        return int(np.argmin(np.abs(1 - np.abs(np.array(candidates, dtype=complex)))))

    def nearest_zero(to: complex) -> float:  # all zeros of a low-pass are real
        order_ = np.argsort(np.abs(np.array(remaining_zeros) - to))
        return remaining_zeros.pop(int(order_[0]))

    for si in range(n_sections - 1, -1, -1):
        p1 = remaining_poles.pop(worst(remaining_poles))
        if np.imag(p1) == 0:
            reals = [i for i, p in enumerate(remaining_poles) if np.imag(p) == 0]
            p2 = remaining_poles.pop(reals[worst([remaining_poles[i] for i in reals])])
        else:
            p2 = np.conj(p1)
        z1 = nearest_zero(p1)
        z2 = nearest_zero(p1)
        b = np.poly([z1, z2])
        a = np.poly(np.array([p1, p2], dtype=complex))
        sos[si, :3] = np.real(b)
        sos[si, 3:] = np.real(a)
    sos[0, :3] *= gain
    return sos


def lowpass_sos(fs_hz: float, cutoff_hz: float, order: int) -> np.ndarray | None:
    """Second-order sections of a digital Butterworth low-pass at rate ``fs_hz``, or ``None`` when ``cutoff >=
    fs/2``."""
    if cutoff_hz >= fs_hz / 2:
        return None
    return butter_lowpass_sos(order, cutoff_hz, fs_hz)


def stage_sos(fs_in_hz: float, fs_out_hz: float, cutoff_hz: float, order: int) -> np.ndarray | None:
    """The low-pass the pipeline applies on the ``fs_out_hz`` grid to a sensor sampled at ``fs_in_hz``.

    ``None`` (identity) when the cut-off is at or above either Nyquist frequency (module docstring).
    """
    if cutoff_hz >= fs_in_hz / 2:
        return None
    return lowpass_sos(fs_out_hz, cutoff_hz, order)


def sos_steady_state(sos: np.ndarray) -> np.ndarray:
    """``scipy.signal.sosfilt_zi(sos)``: the ``(sections, 2)`` state of a unit step in steady state.

    Per section the state solving ``zi = A zi + B`` of its direct-form-II-transposed state space
    (SciPy's ``lfilter_zi``, with the same ``np.linalg.solve``), scaled by the DC gain of the
    sections before it.
    """
    sos = np.asarray(sos, dtype=np.float64)
    if sos.ndim != 2 or sos.shape[1] != 6:
        raise ValueError(f"sos must have shape (sections, 6), got {sos.shape}")
    zi = np.empty((len(sos), 2))
    scale = 1.0
    for s, (b0, b1, b2, a0, a1, a2) in enumerate(sos):
        if a0 != 1.0:
            b0, b1, b2, a1, a2 = b0 / a0, b1 / a0, b2 / a0, a1 / a0, a2 / a0
        i_minus_a = np.array([[1.0 + a1, -1.0], [a2, 1.0]])  # I - companion(a).T
        zi[s] = scale * np.linalg.solve(i_minus_a, np.array([b1 - a1 * b0, b2 - a2 * b0]))
        scale *= np.sum(sos[s, :3]) / np.sum(sos[s, 3:])
    return zi


def sos_filter(sos: np.ndarray, x: np.ndarray, zi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Filter ``(n, channels)`` samples through the cascade from state ``zi`` ``(sections, channels, 2)``.

    Returns ``(y, zf)``: the output (a new array) and the final state (a new array). Identical to
    ``scipy.signal.sosfilt(sos, x, axis=0, zi=zi.transpose(0, 2, 1))`` bit for bit: per sample and
    section, ``y = b0 x + z0; z0 = b1 x - a1 y + z1; z1 = b2 x - a2 y`` in that order. Sections
    must be normalised (``a0 == 1``).
    """
    sos = np.asarray(sos, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"samples must have shape (n, channels), got {x.shape}")
    n_sections, n_ch = len(sos), x.shape[1]
    if zi.shape != (n_sections, n_ch, 2):
        raise ValueError(f"state must have shape ({n_sections}, {n_ch}, 2), got {zi.shape}")
    if not np.all(sos[:, 3] == 1.0):
        raise ValueError("sections must be normalised (a0 == 1)")
    coefficients = [(b0, b1, b2, a1, a2) for b0, b1, b2, _, a1, a2 in sos.tolist()]
    state = zi.tolist()
    columns = x.T.tolist()
    for c, column in enumerate(columns):
        for s, (b0, b1, b2, a1, a2) in enumerate(coefficients):
            z0, z1 = state[s][c]
            for i, x_cur in enumerate(column):
                x_new = b0 * x_cur + z0
                z0 = b1 * x_cur - a1 * x_new + z1
                z1 = b2 * x_cur - a2 * x_new
                column[i] = x_new
            state[s][c] = [z0, z1]
    y = np.array(columns, dtype=np.float64).T.reshape(x.shape)
    return np.ascontiguousarray(y), np.array(state, dtype=np.float64).reshape(zi.shape)


class StreamingLowPass:
    """A causal low-pass over ``(n, channels)`` chunks with state carried from chunk to chunk.

    ``start(x0)`` begins a segment (state = steady state for ``x0``); ``process(chunk)`` filters
    the next samples. ``sos=None`` makes it the identity (see module docstring).
    """

    def __init__(self, sos: np.ndarray | None, n_channels: int) -> None:
        self.sos = None if sos is None else np.asarray(sos, dtype=np.float64)
        self.n_channels = n_channels
        # Steady-state state for a unit step, shape (sections, 2); scaled per channel at start().
        self._zi_unit = None if self.sos is None else sos_steady_state(self.sos)
        self._zi: np.ndarray | None = None
        self._started = False

    @property
    def started(self) -> bool:
        """Whether a segment is running (``start`` called since the last ``reset``)."""
        return self._started

    def start(self, x0: np.ndarray) -> None:
        """Begin a segment whose first sample is ``x0`` (shape ``(channels,)``)."""
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (self.n_channels,):
            raise ValueError(f"first sample must have shape ({self.n_channels},), got {x0.shape}")
        if self._zi_unit is not None:
            self._zi = self._zi_unit[:, None, :] * x0[None, :, None]  # (sections, channels, 2)
        self._started = True

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Filter the next ``(n, channels)`` samples of the current segment."""
        if not self._started:
            raise RuntimeError("StreamingLowPass.process() before start(): call start(first_sample) at a segment start")
        if self.sos is None or len(chunk) == 0:
            return np.array(chunk, dtype=np.float64, copy=True)
        assert self._zi is not None
        y, self._zi = sos_filter(self.sos, chunk, self._zi)
        return y

    def reset(self) -> None:
        """End the segment: the next ``start`` re-initialises from its own first sample."""
        self._zi = None
        self._started = False
