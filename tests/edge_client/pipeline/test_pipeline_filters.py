"""The causal Butterworth stage: design per sensor kind, chunk invariance, steady-state start."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import sosfilt, sosfilt_zi, sosfreqz

from edge_client.pipeline import PipelineConfig, StreamingLowPass, lowpass_sos
from tests.edge_client.pipeline.pipeline_data import watch_series


@pytest.mark.parametrize(("kind", "fs", "cutoff"), [
    ("imu", 50.0, 5.0), ("wheel_imu", 100.0, 10.0), ("ecg", 2048.0, 5.0), ("ppg", 128.0, 5.0),
])
def test_cutoff_by_kind_is_the_half_power_point_of_a_5th_order_butterworth(kind: str, fs: float, cutoff: float) -> None:
    cfg = PipelineConfig()
    assert cfg.cutoff_for(kind) == cutoff
    sos = lowpass_sos(fs, cfg.cutoff_for(kind), cfg.filter_order)
    assert sos is not None and sos.shape == (3, 6)  # 5th order = 3 sections (the last one first-order)
    _, h = sosfreqz(sos, worN=[0.0, cutoff, 2 * cutoff], fs=fs)
    assert abs(h[0]) == pytest.approx(1.0, abs=1e-9)
    assert abs(h[1]) == pytest.approx(2**-0.5, rel=1e-6)
    # One octave above the cut-off a 5th-order Butterworth is down ~30 dB (bilinear warping adds a bit).
    assert 20 * np.log10(abs(h[2])) < -29


def test_cutoff_at_or_above_nyquist_is_the_identity() -> None:
    assert lowpass_sos(10.0, 5.0, 5) is None  # a 10 Hz pressure mat with the default 5 Hz cut-off
    lp = StreamingLowPass(None, 2)
    x = np.array([[1.0, 2.0], [3.0, -4.0]])
    lp.start(x[0])
    y = lp.process(x)
    assert np.array_equal(y, x) and y is not x


@settings(max_examples=30, deadline=None)
@given(series=st.integers(0, 139), cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_streaming_equals_one_shot_sosfilt_bit_for_bit(series: int, cuts: list[int]) -> None:
    x = watch_series()[series]
    sos = lowpass_sos(50.0, 5.0, 5)
    assert sos is not None
    want, _ = sosfilt(sos, x, axis=0, zi=sosfilt_zi(sos)[:, :, None] * x[0][None, None, :])
    lp = StreamingLowPass(sos, 6)
    lp.start(x[0])
    bounds = [0, *sorted(c % (len(x) + 1) for c in cuts), len(x)]
    got = np.concatenate([lp.process(x[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    assert got.tobytes() == want.tobytes()


def test_constant_input_has_no_start_transient() -> None:
    sos = lowpass_sos(50.0, 5.0, 5)
    assert sos is not None
    x = np.full((200, 2), [0.98, -9.81])
    lp = StreamingLowPass(sos, 2)
    lp.start(x[0])
    y = lp.process(x)
    assert np.max(np.abs(y - x)) < 1e-12
    # What the steady-state start avoids: a zero initial state rings from 0 up to the level.
    assert np.max(np.abs(sosfilt(sos, x, axis=0) - x)) > 0.5


def test_reset_starts_the_next_segment_from_its_own_first_sample() -> None:
    sos = lowpass_sos(50.0, 5.0, 5)
    x = watch_series()[0]
    lp = StreamingLowPass(sos, 6)
    lp.start(x[0])
    lp.process(x[:500])
    lp.reset()
    with pytest.raises(RuntimeError, match="start"):
        lp.process(x[500:])
    lp.start(x[500])
    fresh = StreamingLowPass(sos, 6)
    fresh.start(x[500])
    assert lp.process(x[500:]).tobytes() == fresh.process(x[500:]).tobytes()
    with pytest.raises(ValueError, match="shape"):
        lp.start(np.zeros(5))
