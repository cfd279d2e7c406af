"""Causal Butterworth low-pass with carried state: the first stage of every sensor's 20 Hz path.

Why this design
    FedSCS-XGB low-passes every channel (5th order, 5 Hz; 10 Hz for the wheel IMU) before
    resampling to 20 Hz. On the gateway the data arrive in frames, so the filter must be causal
    and keep its state between frames: ``sosfilt`` with a carried ``zi`` processes sample after
    sample, so any chunking of the input gives bit-identical output (tested).
    Second-order sections, not ``(b, a)``: a 5 Hz cut-off at 2048 Hz puts the poles within 1 %
    of the unit circle, where the transfer-function form loses precision.

Start of a segment
    The state is initialised to the steady state for the first sample (``sosfilt_zi * x0``), as if
    the signal had been constant at ``x0`` forever: a constant signal passes with no transient
    (a zero initial state would ring from 0 up to 1 g on every accelerometer restart).

Cut-off at or above Nyquist
    A sensor sampled at ``fs <= 2 * cutoff`` (a 10 Hz pressure mat with a 5 Hz cut-off) carries
    nothing above the cut-off, and ``butter`` cannot place a pole there: the stage is then the
    identity. The resampler's anti-aliasing FIR still band-limits to the output rate.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import butter, sosfilt, sosfilt_zi


def lowpass_sos(fs_hz: float, cutoff_hz: float, order: int) -> np.ndarray | None:
    """Second-order sections of a digital Butterworth low-pass, or ``None`` when ``cutoff >= fs/2``."""
    if cutoff_hz >= fs_hz / 2:
        return None
    return np.asarray(butter(order, cutoff_hz, btype="lowpass", fs=fs_hz, output="sos"), dtype=np.float64)


class StreamingLowPass:
    """A causal low-pass over ``(n, channels)`` chunks with state carried from chunk to chunk.

    ``start(x0)`` begins a segment (state = steady state for ``x0``); ``process(chunk)`` filters
    the next samples. ``sos=None`` makes it the identity (see module docstring).
    """

    def __init__(self, sos: np.ndarray | None, n_channels: int) -> None:
        self.sos = sos
        self.n_channels = n_channels
        # Steady-state state for a unit step, shape (sections, 2); scaled per channel at start().
        self._zi_unit = None if sos is None else sosfilt_zi(sos)
        self._zi: np.ndarray | None = None
        self._started = False

    def start(self, x0: np.ndarray) -> None:
        """Begin a segment whose first sample is ``x0`` (shape ``(channels,)``)."""
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (self.n_channels,):
            raise ValueError(f"first sample must have shape ({self.n_channels},), got {x0.shape}")
        if self._zi_unit is not None:
            # sosfilt along axis 0 of (n, ch) wants zi of shape (sections, 2, ch).
            self._zi = self._zi_unit[:, :, None] * x0[None, None, :]
        self._started = True

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Filter the next ``(n, channels)`` samples of the current segment."""
        if not self._started:
            raise RuntimeError("StreamingLowPass.process() before start(): call start(first_sample) at a segment start")
        if self.sos is None or len(chunk) == 0:  # sosfilt rejects an empty chunk with a zi
            return np.array(chunk, dtype=np.float64, copy=True)
        y, self._zi = sosfilt(self.sos, chunk, axis=0, zi=self._zi)
        return y

    def reset(self) -> None:
        """End the segment: the next ``start`` re-initialises from its own first sample."""
        self._zi = None
        self._started = False
