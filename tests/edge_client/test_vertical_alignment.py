"""Window alignment of vertical jobs (issue 16): keyed-hash ids, snapping to the window grid
within a clock tolerance, the intersection and its report -- and a job over parties whose
windows are shuffled, partly missing, duplicated, off-grid and shifted by clock offsets trains
exactly the forest of the cleanly aligned common windows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.algorithms.vertical_forest import VerticalFederatedForest
from aggregator.simulate import Simulation
from edge_client.training_data import PartyData
from shared.vertical_alignment import aligned_order, intersect_digests, snap_starts, window_digests
from shared.vertical_party_key import PartyKey, SealError, new_party_key

HOP = 2_000_000
TOL = 250_000


@settings(max_examples=200, deadline=None)
@given(st.integers(-10_000, 10_000), st.integers(-TOL, TOL))
def test_a_clock_offset_within_the_tolerance_snaps_to_the_same_grid_point(k, offset):
    snapped = snap_starts(np.array([k * HOP + offset]), HOP, TOL)
    assert snapped.starts.tolist() == [k * HOP] and snapped.on_grid.all()


@settings(max_examples=200, deadline=None)
@given(st.integers(-10_000, 10_000), st.integers(TOL + 1, HOP // 2 - 1))
def test_a_start_beyond_the_tolerance_is_off_grid_never_matched(k, offset):
    for sign in (1, -1):
        assert not snap_starts(np.array([k * HOP + sign * offset]), HOP, TOL).on_grid.any()


def test_snap_rejects_a_tolerance_over_half_a_hop():
    with pytest.raises(ValueError, match="tolerance_us must be an int in 0..hop_us/2"):
        snap_starts(np.zeros(1, np.int64), 100, 51)


def test_digests_need_the_key_and_name_nothing():
    key, other = PartyKey.from_secret(new_party_key()), PartyKey.from_secret(new_party_key())
    a = window_digests(key.id_key, ["s1", "s1"], np.array([0, HOP]))
    assert (a == window_digests(key.id_key, ["s1", "s1"], np.array([0, HOP]))).all()
    assert not (a == window_digests(other.id_key, ["s1", "s1"], np.array([0, HOP]))).all(axis=1).any()
    assert not (a[0] == a[1]).all()
    assert b"s1" not in a.tobytes() and str(HOP).encode() not in a.tobytes()


def test_a_sealed_blob_opens_only_with_the_key_and_its_context():
    key = PartyKey.from_secret(new_party_key())
    blob = key.seal(b"left right", associated=b"job-1/level/0")
    assert key.open(blob, associated=b"job-1/level/0") == b"left right"
    with pytest.raises(SealError):
        key.open(blob, associated=b"job-2/level/0")
    with pytest.raises(SealError):
        PartyKey.from_secret(new_party_key()).open(blob, associated=b"job-1/level/0")
    with pytest.raises(ValueError, match="party_key must be at least 16 random bytes"):
        PartyKey.from_secret(b"short")
    assert "secret" in repr(key) and key.seal_key.hex() not in repr(key)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=60), min_size=1, max_size=4))
def test_the_intersection_keeps_each_common_window_once_and_counts_the_rest(windows_per_party):
    key = PartyKey.from_secret(bytes(32))
    digests = [window_digests(key.id_key, ["s"] * len(w), np.array(w, dtype=np.int64)) for w in windows_per_party]
    keep, report = intersect_digests([f"p{i}" for i in range(len(digests))], digests, [0] * len(digests))
    common = set.intersection(*(set(w) for w in windows_per_party))
    assert report.common == len(common)
    for w, k, held, missing, dup in zip(windows_per_party, keep, report.held, report.missing, report.duplicates):
        assert sorted(np.array(w)[k].tolist()) == sorted(common)
        assert held == len(w) and dup == len(w) - len(set(w)) and missing == len(set(w) - common)
    assert str(report.common) in report.line()


def test_aligned_order_is_by_session_then_start():
    order = aligned_order(["b", "a", "b", "a"], np.array([5, 9, 1, 2]))
    assert order.tolist() == [3, 1, 2, 0]


def _shifted(rows, X, y, key, offset, rng, extra=0, duplicate=False, off_grid=False):
    """A party's own windows: ``rows`` of the true windows (session s-{row // 50}, slot row % 50),
    its clock ``offset``, shuffled, plus ``extra`` windows nobody else has."""
    rows = np.asarray(rows)
    sessions = [f"s-{r // 50}" for r in rows.tolist()]
    starts = (rows % 50) * HOP + offset
    Xp, yp = X[rows], None if y is None else y[rows]
    if extra:
        sessions += ["s-other"] * extra
        starts = np.r_[starts, np.arange(extra) * HOP]
        Xp = np.vstack([Xp, rng.normal(size=(extra, X.shape[1]))])
        yp = None if yp is None else np.r_[yp, np.zeros(extra, yp.dtype)]
    if duplicate:
        sessions.append(sessions[0])
        starts = np.r_[starts, starts[0]]
        Xp, yp = np.vstack([Xp, Xp[:1]]), None if yp is None else np.r_[yp, yp[:1]]
    if off_grid:
        sessions.append(sessions[1])
        starts = np.r_[starts, starts[1] + HOP // 2 - 1]
        Xp, yp = np.vstack([Xp, Xp[:1]]), None if yp is None else np.r_[yp, yp[:1]]
    perm = rng.permutation(len(sessions))
    return dict(X=Xp[perm], y=None if yp is None else yp[perm], party_key=key,
                sessions=tuple(np.array(sessions, dtype=object)[perm]), start_us=np.asarray(starts)[perm])


def test_misaligned_parties_train_the_forest_of_their_common_windows():
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 6))
    y = (X[:, 0] - X[:, 4] + 0.3 * rng.normal(size=n) > 0).astype(int)
    key = new_party_key()
    rows0 = np.setdiff1d(np.arange(n), [3, 77])
    rows1 = np.setdiff1d(np.arange(n), [150, 151, 199])
    rows2 = np.arange(n)
    parties = [PartyData("party-000", **_shifted(rows0, X[:, :2], y, key, 0, rng, duplicate=True)),
               PartyData("party-001", **_shifted(rows1, X[:, 2:4], None, key, 120_000, rng, extra=7)),
               PartyData("party-002", **_shifted(rows2, X[:, 4:], None, key, -TOL, rng, off_grid=True))]
    cfg = VerticalFederatedForest(n_trees=4, max_depth=5, hop_us=HOP, tolerance_us=TOL)
    sim = Simulation(parties)
    model = cfg.run_in(sim, seed=3)
    report = model.alignment
    assert report.common == n - 5
    assert report.missing == (3, 2 + 7, 5) and report.duplicates == (1, 0, 0) and report.off_grid == (0, 0, 1)
    common = np.setdiff1d(np.arange(n), [3, 77, 150, 151, 199])  # already in (session, start) order
    clean = dataclasses.replace(cfg, hop_us=0, tolerance_us=0).simulate(
        [(X[common, :2], y[common]), (X[common, 2:4], None), (X[common, 4:], None)], seed=3)
    for a, b in zip(model.trees, clean.trees):
        assert (a.split_nodes == b.split_nodes).all() and (a.feature == b.feature).all()
        np.testing.assert_array_equal(a.values, b.values)
    blocks = [X[:, :2], X[:, 2:4], X[:, 4:]]
    np.testing.assert_array_equal(model.predict_proba(blocks), clean.predict_proba(blocks))
    # the master saw digests only: no session name, no start time, no key
    raw = repr([r.body for replies in sim.server_view().values() for r in replies]).encode()
    for secret in (b"s-0", b"s-other", str(2 * HOP).encode(), key):
        assert secret not in raw
