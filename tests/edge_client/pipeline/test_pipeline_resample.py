"""The polyphase resampler: resample_poly's FIR, exact grid placement, causality, chunk invariance.

Agreement with ``scipy.signal.resample_poly`` (grid-aligned input, t0 = 0):

* Tolerance. Each of our polyphase branches is normalised to unit DC gain; resample_poly's
  branches sum to 1 only approximately. So ``ours = theirs / s_r`` for branch ``r`` with sum ``s_r``,
  and ``|ours - theirs| <= max_r |1/s_r - 1| * sum|h_r| * max|x|`` (+ float rounding). The bound is
  computed here from ``firwin`` itself: 7.5e-5 relative at 50 -> 20 Hz, 6e-8 at 2048 -> 20 Hz,
  exactly 0 for integer decimation (1000 -> 20 Hz), where there is a single branch.
* Edges. resample_poly zero-pads (``padtype='constant'``), so its first and last ~0.5 s sag
  towards 0; we extend with the edge samples. With ``padtype='edge'`` it agrees everywhere.
* Delay. resample_poly is non-causal (centred): its output ``k`` uses input up to ``k q/p + reach``.
  We emit the very same value only once that input has arrived — 0.5 s later — and label it ``k``:
  same numbers, placed at the same instants, produced causally.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import firwin, resample_poly

from edge_client.pipeline import StreamResampler, kernel_weights, resample_ratio
from edge_client.pipeline.resample import MAX_CLOCK_STEP, filter_reach, fixed_order_sum
from tests.edge_client.pipeline.pipeline_data import ecg_1000, ecg_2048, watch_series

P_US = 50_000


def _signal(rate: int) -> np.ndarray:
    """A real recording at ``rate`` (resampled from the nearest real one where none exists)."""
    watch = watch_series()[3]
    return {
        10: watch[::5],
        20: resample_poly(watch, 2, 5, axis=0),
        50: watch,
        128: resample_poly(ecg_2048()[: 2048 * 30], 1, 16, axis=0),
        250: resample_poly(ecg_2048()[: 2048 * 30], 125, 1024, axis=0),
        1000: ecg_1000(),
        2048: ecg_2048()[: 2048 * 30],
    }[rate]


def _run(r: StreamResampler, x: np.ndarray, t0: int, cuts: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    r.start(t0, x[0])
    bounds = [0, *(cuts or []), len(x)]
    parts = [r.push(x[a:b]) for a, b in zip(bounds[:-1], bounds[1:])] + [r.finish()]
    return np.concatenate([k for k, _ in parts]), np.concatenate([v for _, v in parts])


def _branch_bound(up: int, down: int, x: np.ndarray) -> float:
    if up == down == 1:
        return 1e-13 * np.abs(x).max()
    half_len = 10 * max(up, down)
    h = firwin(2 * half_len + 1, 1 / max(up, down), window=("kaiser", 5.0)) * up
    branches = [h[r::up] for r in range(up)]
    rel = max(abs(1 / b.sum() - 1) * np.abs(b).sum() for b in branches)
    return (rel + 1e-12) * np.abs(x).max()


@pytest.mark.parametrize(
    ("fs", "want"),
    [
        (50.0, (2, 5)),
        (2048.0, (5, 512)),
        (1000.0, (1, 50)),
        (128.0, (5, 32)),
        (250.0, (2, 25)),
        (10.0, (2, 1)),
        (20.0, (1, 1)),
        (12.5, (8, 5)),
        (100.3, (200, 1003)),
    ],
)
def test_ratio_is_exact_and_reduced(fs: float, want: tuple[int, int]) -> None:
    assert resample_ratio(fs, 20.0) == want


def test_ratio_refuses_absurd_factors() -> None:
    with pytest.raises(ValueError, match="nominal rate"):
        resample_ratio(100.0003, 20.0)
    with pytest.raises(ValueError, match="positive"):
        resample_ratio(0.0, 20.0)


@pytest.mark.parametrize(("up", "down"), [(2, 5), (5, 512), (1, 50), (5, 32), (2, 1), (8, 5)])
def test_phase_zero_weights_are_resample_polys_branch(up: int, down: int) -> None:
    half_len = 10 * max(up, down)
    h = firwin(2 * half_len + 1, 1 / max(up, down), window=("kaiser", 5.0))
    reach = filter_reach(up, down)
    offsets = (reach - np.arange(2 * reach + 1)) * up
    inside = np.abs(offsets) <= half_len
    branch = np.where(inside, h[np.clip(half_len + offsets, 0, 2 * half_len)], 0.0)
    np.testing.assert_allclose(kernel_weights(0.0, up, down), branch / branch.sum(), rtol=1e-12, atol=1e-15)


@settings(max_examples=50, deadline=None)
@given(n_taps=st.integers(1, 300), n_cols=st.integers(1, 7), seed=st.integers(0, 2**32 - 1))
def test_fixed_order_sum_of_a_column_does_not_depend_on_its_neighbours(n_taps: int, n_cols: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n_taps, n_cols)) * 10.0 ** rng.integers(-8, 8, size=(n_taps, n_cols))
    together = fixed_order_sum(a.copy())
    for c in range(n_cols):
        alone = fixed_order_sum(a[:, c : c + 1].copy())
        assert alone.tobytes() == together[c : c + 1].tobytes()
    np.testing.assert_allclose(
        together,
        [np.float64(sum(sorted(a[:, c], key=abs))) for c in range(n_cols)],
        rtol=1e-9,
        atol=1e-300 + 1e-12 * np.abs(a).sum(axis=0).max(),
    )


@pytest.mark.parametrize("fs", [10, 20, 50, 128, 250, 1000, 2048])
def test_matches_resample_poly_in_the_interior_and_with_edge_padding_everywhere(fs: int) -> None:
    x = _signal(fs)
    r = StreamResampler(fs, 20.0, P_US)
    up, down = r.up, r.down
    k, y = _run(r, x, t0=0, cuts=[len(x) // 3, len(x) // 3 + 1, 2 * len(x) // 3])
    tol = _branch_bound(up, down, x)
    if up == down == 1:
        padded = constant = x
    else:
        padded = resample_poly(x, up, down, axis=0, padtype="edge")
        constant = resample_poly(x, up, down, axis=0)
    m = min(len(k), len(padded))
    assert np.array_equal(k[:m], np.arange(m)) and abs(len(k) - len(padded)) <= 1
    assert np.abs(y[:m] - padded[:m]).max() <= tol
    # Interior = outputs whose FIR support lies inside the data: there zero padding does not matter.
    pos = k[:m] * Fraction(down, up)
    interior = np.array([p - r.reach >= 0 and p + r.reach <= len(x) - 1 for p in pos])
    assert interior.sum() > m // 2
    assert np.abs(y[:m][interior] - constant[:m][interior]).max() <= tol
    if (up, down) != (1, 1):  # the documented edge difference: zero padding pulls the edges towards 0
        assert np.abs(y[:10] - constant[:10]).max() > 10 * tol


@pytest.mark.parametrize(
    ("fs", "t0", "max_timing_us"),
    [
        (50, 7_777, 1.0),
        (128, 1, 1.0),
        (250, 3_999, 1.0),
        (1000, 999, 1.0),
        (2048, 123_457, 1.0),
        # At or below 20 Hz the FIR's cut-off sits at the *input* Nyquist, so sampling the windowed sinc
        # at a fractional phase aliases its transition band: a residual delay of up to ~0.1 ms at 0.3 Hz.
        (10, 33_333, 20.0),
        (20, 12_345, 200.0),
    ],
)
@pytest.mark.parametrize("f_hz", [0.3, 1.3, 3.0])
def test_outputs_sit_on_the_absolute_grid_for_any_start_phase(
    fs: int, t0: int, max_timing_us: float, f_hz: float
) -> None:
    """A sinusoid sampled from an off-grid t0: fitting the outputs at their grid instants k * 50 ms gives
    the input's phase back (timing error in microseconds) and its amplitude within the FIR ripple."""
    t = t0 + np.arange(fs * 30) * 1e6 / fs
    x = np.sin(2 * np.pi * f_hz * t / 1e6)[:, None]
    k, y = _run(StreamResampler(fs, 20.0, P_US), x, t0)
    tau = k * P_US
    steady = (tau > t0 + 2e6) & (tau < t[-1] - 2e6)
    basis = np.stack([np.sin(2 * np.pi * f_hz * tau / 1e6), np.cos(2 * np.pi * f_hz * tau / 1e6)], axis=1)[steady]
    (a, b), *_ = np.linalg.lstsq(basis, y[steady, 0], rcond=None)
    timing_us = np.arctan2(b, a) / (2 * np.pi * f_hz) * 1e6
    assert abs(timing_us) < max_timing_us
    assert abs(np.hypot(a, b) - 1) < 2e-3  # Kaiser(5) pass-band ripple is ~1.4e-3
    assert k[0] == -(-t0 // P_US)  # the first output is the first grid instant at or after t0


@pytest.mark.parametrize(("fs", "reach"), [(50, 25), (1000, 500), (10, 10)])
def test_causal_latency_and_delay_compensated_timestamps(fs: int, reach: int) -> None:
    """An impulse at a grid instant comes out centred on that instant's k (not k + delay), and an
    output is emitted exactly when the input has reached its position + reach."""
    n0 = 5 * fs  # t = 5 s = grid index 100
    x = np.zeros((10 * fs, 1))
    x[n0] = 1.0
    r = StreamResampler(fs, 20.0, P_US)
    assert r.reach == reach and r.latency_s == pytest.approx(reach / fs)
    r.start(0, x[0])
    emitted: list[int] = []
    for n in range(len(x)):
        ks, _ = r.push(x[n : n + 1])
        for kk in ks:  # emitted as soon as floor(pos) + reach <= n, and not before
            pos = Fraction(int(kk) * fs, 20)
            assert int(pos) + reach == n or (n == 0 and int(pos) + reach <= 0)
        emitted += ks.tolist()
    k, y = _run(StreamResampler(fs, 20.0, P_US), x, 0)
    peak = int(k[np.argmax(y[:, 0])])
    assert peak == 100
    i = int(np.flatnonzero(k == peak)[0])
    np.testing.assert_allclose(y[i - 8 : i, 0], y[i + 8 : i : -1, 0], atol=1e-15)


@settings(max_examples=25, deadline=None)
@given(
    fs=st.sampled_from([10, 50, 128, 2048]),
    t0=st.integers(0, 10**13),
    cuts=st.lists(st.integers(0, 2048 * 30), max_size=25),
)
def test_any_chunking_gives_bit_identical_outputs(fs: int, t0: int, cuts: list[int]) -> None:
    x = _signal(fs)[: fs * 20]
    cuts = sorted(c % (len(x) + 1) for c in cuts)
    k1, y1 = _run(StreamResampler(fs, 20.0, P_US), x, t0)
    k2, y2 = _run(StreamResampler(fs, 20.0, P_US), x, t0, cuts)
    assert np.array_equal(k1, k2) and y1.tobytes() == y2.tobytes()


def test_grid_shift_of_the_start_shifts_outputs_exactly() -> None:
    x = _signal(2048)[: 2048 * 10]
    k1, y1 = _run(StreamResampler(2048, 20.0, P_US), x, 1_234_567)
    k2, y2 = _run(StreamResampler(2048, 20.0, P_US), x, 1_234_567 + 7 * P_US)
    assert np.array_equal(k1 + 7, k2) and y1.tobytes() == y2.tobytes()


def test_set_clock_is_bounded_and_a_consistent_clock_changes_nothing() -> None:
    x = _signal(50)
    r = StreamResampler(50, 20.0, P_US)
    with pytest.raises(RuntimeError, match="start"):
        r.set_clock(0, 0)
    r.start(0, x[0])
    a = r.push(x[:600])
    r.set_clock(600, 600 * 20_000)  # what the timebase already says
    b = r.push(x[600:])
    k_ref, y_ref = _run(StreamResampler(50, 20.0, P_US), x, 0, cuts=[600])
    got = np.concatenate([a[1], b[1], r.finish()[1]])
    assert got.tobytes() == y_ref.tobytes()
    r.start(0, x[0])
    r.push(x[:600])
    with pytest.raises(ValueError, match="gap"):
        r.set_clock(600, 600 * 20_000 + (MAX_CLOCK_STEP + 1) * 20_000)
    r.set_clock(600, 600 * 20_000 + 20_000)  # one sample late: later outputs are taken one sample earlier
    k_late, y_late = r.push(x[600:])
    assert len(k_late) > 0 and not np.array_equal(y_late, y_ref[np.searchsorted(k_ref, k_late)])
