"""Window alignment of vertical jobs: keyed-hash ids of the window start (never the
session: a person's gateways each store under their own), snapping to the window grid within a
clock tolerance, the intersection and its report -- and a job over parties whose windows are
stored under different sessions (each gateway's default, ``#n`` after a restart), shuffled, partly
missing, duplicated, off-grid and shifted by clock offsets trains exactly the forest of the
cleanly aligned common windows; a job where nothing aligns fails with one line naming the cause."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.algorithms.vertical_forest import VerticalFederatedForest, parties_for_simulation
from aggregator.jobs import TrainingError
from aggregator.simulate import Simulation
from edge_client.training_data import PartyData
from shared.vertical_alignment import AlignmentReport, intersect_digests, snap_starts, start_digests, start_order
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
    a = start_digests(key.id_key, np.array([0, HOP]))
    assert a.shape == (2, 16) and a.dtype == np.uint8
    assert (a == start_digests(key.id_key, np.array([0, HOP]))).all()
    # another person's key: unrelated digests for the same instants
    assert not (a == start_digests(other.id_key, np.array([0, HOP]))).all(axis=1).any()
    assert not (a[0] == a[1]).all()
    assert str(HOP).encode() not in a.tobytes() and key.id_key not in a.tobytes()


def test_the_digest_is_the_hmac_of_the_start_alone():
    """The id derivation, against hmac computed here: the start's decimal digits after a fixed
    domain tag, under the id key -- no session, so a person's gateways agree whatever they named
    their sessions."""
    import hashlib
    import hmac

    key = PartyKey.from_secret(bytes(range(32))).id_key
    starts = np.array([1_790_000_000_000_000, -HOP, 0])
    expected = [
        hmac.new(key, b"wheelfed/vertical/window-start|" + str(s).encode(), hashlib.sha256).digest()[:16]
        for s in starts.tolist()
    ]
    assert [bytes(d) for d in start_digests(key, starts)] == expected
    assert start_digests(key, np.zeros(0, np.int64)).shape == (0, 16)


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
def test_the_intersection_keeps_the_windows_every_party_holds_once_and_counts_the_rest(windows_per_party):
    key = PartyKey.from_secret(bytes(32))
    digests = [start_digests(key.id_key, np.array(w, dtype=np.int64)) for w in windows_per_party]
    keep, report = intersect_digests([f"p{i}" for i in range(len(digests))], digests, [0] * len(digests))
    once = [{s for s in set(w) if w.count(s) == 1} for w in windows_per_party]
    common = set.intersection(*once)  # a start a party holds twice is ambiguous there: nobody's row
    assert report.common == len(common)
    for i, (w, k) in enumerate(zip(windows_per_party, keep)):
        assert np.array(w)[k].tolist() == [s for s in w if s in common]  # each once, in the party's order
        others = set().union(*(once[j] for j in range(len(once)) if j != i))
        assert report.held[i] == len(w) == report.common + report.missing[i] + report.duplicates[i]
        assert report.duplicates[i] == len(w) - len(once[i]) and report.overlap[i] == len(once[i] & others)
    assert str(report.common) in report.line()
    assert ("likely cause" in report.line()) == (report.common == 0)


def test_start_order_is_by_start():
    assert start_order(np.array([5, 9, 1, 2])).tolist() == [2, 3, 0, 1]


T0 = 1_790_000_000_000_000  # on the sensors' common clock, on the grid


def _party(client_id, rows, X, y, key, offset, rng, restart_at=None, extra=0, duplicate=None, off_grid=False):
    """A gateway's own windows: ``rows`` of the true windows (start ``T0 + row * HOP``) seen by
    its clock ``offset`` ahead, stored under its own default session (``#2`` from row
    ``restart_at``: a stream restart), shuffled; plus ``extra`` windows of later times nobody
    else has, another window at the start of row ``duplicate`` (other values: its sensors' clock
    stepped back), and one window off the grid."""
    rows = np.asarray(rows)
    session = f"{client_id}-20261126T101500"
    sessions = [session if restart_at is None or r < restart_at else f"{session}#2" for r in rows.tolist()]
    starts = T0 + rows * HOP + offset
    Xp, yp = X[rows], None if y is None else y[rows]

    def add(n, at):
        nonlocal starts, Xp, yp
        sessions.extend([f"{session}#3"] * n)
        starts = np.r_[starts, at]
        Xp = np.vstack([Xp, rng.normal(size=(n, X.shape[1]))])
        yp = None if yp is None else np.r_[yp, np.zeros(n, yp.dtype)]

    if extra:
        add(extra, T0 + (10_000 + np.arange(extra)) * HOP + offset)
    if duplicate is not None:
        add(1, T0 + duplicate * HOP + offset)
    if off_grid:
        add(1, T0 + rows[1] * HOP + HOP // 2 - 1)
    perm = rng.permutation(len(sessions))
    return PartyData(
        client_id,
        X=Xp[perm],
        y=None if yp is None else yp[perm],
        party_key=key,
        sessions=tuple(np.array(sessions, dtype=object)[perm]),
        start_us=np.asarray(starts)[perm],
    )


def test_parties_with_their_own_sessions_restarts_and_offsets_train_the_forest_of_their_common_windows():
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 6))
    y = (X[:, 0] - X[:, 4] + 0.3 * rng.normal(size=n) > 0).astype(int)
    key = new_party_key()
    parties = [
        _party("gw-1-wrist", np.setdiff1d(np.arange(n), [3, 77]), X[:, :2], y, key, 0, rng, duplicate=10),
        _party(
            "gw-2-chair",
            np.setdiff1d(np.arange(n), [150, 151, 199]),
            X[:, 2:4],
            None,
            key,
            120_000,
            rng,
            restart_at=120,
            extra=7,
        ),
        _party("gw-3-chest", np.arange(n), X[:, 4:], None, key, -TOL, rng, restart_at=60, off_grid=True),
    ]
    assert not set.intersection(*(set(p.sessions) for p in parties))  # no session name in common
    assert [p.client_id for p in parties] == sorted(p.client_id for p in parties)  # the master's order
    cfg = VerticalFederatedForest(n_trees=4, max_depth=5, hop_us=HOP, tolerance_us=TOL)
    sim = Simulation(parties, record_bodies=True)
    model = cfg.run_in(sim, seed=3)
    report = model.alignment
    assert report.common == n - 6
    assert report.held == (198 + 1, 197 + 7, 200)
    assert report.missing == (3, 3 + 7, 6) and report.duplicates == (2, 0, 0) and report.off_grid == (0, 0, 1)
    common = np.setdiff1d(np.arange(n), [3, 10, 77, 150, 151, 199])  # in start order
    blocks = [(X[common, :2], y[common]), (X[common, 2:4], None), (X[common, 4:], None)]
    clean = dataclasses.replace(cfg, hop_us=0, tolerance_us=0).run_in(  # same key and job: same feature codes
        Simulation(parties_for_simulation(blocks, party_key=key)), seed=3, job_id=model.metadata.job
    )
    for a, b in zip(model.trees, clean.trees, strict=True):
        for field in ("split_nodes", "owner", "feature", "gain", "leaves", "values", "cover"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    blocks = [X[:, :2], X[:, 2:4], X[:, 4:]]
    np.testing.assert_array_equal(model.predict_proba(blocks), clean.predict_proba(blocks))
    # the master saw digests only: no session name, no start time, no key
    raw = repr([r.body for replies in sim.server_view().values() for r in replies]).encode()
    for secret in (b"gw-1-wrist-2026", b"#2", str(T0 + 2 * HOP).encode(), key):
        assert secret not in raw


def _keyed(client_id, X, y, key, starts):
    return PartyData(client_id, X=X, y=y, party_key=key, sessions=(f"{client_id}-s",) * len(X), start_us=starts)


def test_a_job_where_nothing_aligns_fails_with_one_line_naming_the_likely_cause():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(40, 3)), np.arange(40) % 2
    starts = T0 + np.arange(40) * HOP
    person, stranger = new_party_key(), new_party_key()
    cfg = VerticalFederatedForest(n_trees=2, max_depth=2)

    def fails(*parties):
        with pytest.raises(TrainingError) as caught:
            cfg.run_in(Simulation(list(parties)), seed=0)
        message = str(caught.value)
        assert "\n" not in message and message.startswith("the parties hold no window in common: 0 windows aligned")
        return message.split("likely cause: ", 1)[1]

    # one gateway holds another person's key: named, with the key as the likely cause
    cause = fails(
        _keyed("gw-a", X[:, :1], y, person, starts),
        _keyed("gw-b", X[:, 1:2], None, person, starts),
        _keyed("gw-c", X[:, 2:], None, stranger, starts),
    )
    assert cause.startswith("gw-c shares no window with the other parties: another party key") and "keygen" in cause
    # every key differs
    cause = fails(_keyed("gw-a", X[:, :1], y, person, starts), _keyed("gw-b", X[:, 1:], None, stranger, starts))
    assert cause.startswith("no two parties share a window: different party keys")
    # same key, windows of other hours (the sensors' clocks are not the common clock)
    cause = fails(
        _keyed("gw-a", X[:, :1], y, person, starts), _keyed("gw-b", X[:, 1:], None, person, starts + 3600 * 10**6)
    )
    assert "windows of different times" in cause
    # pairs overlap, the three never do
    cause = fails(
        _keyed("gw-a", X[:20, :1], y[:20], person, starts[:20]),
        _keyed("gw-b", X[10:30, 1:2], None, person, starts[10:30]),
        _keyed("gw-c", np.r_[X[:5, 2:], X[25:, 2:]], None, person, np.r_[starts[:5], starts[25:]]),
    )
    assert cause == "every party shares windows with another, but no window is held by all: their times do not overlap"


def test_the_diagnosis_of_parties_without_windows_or_with_only_repeated_starts():
    empty = AlignmentReport(("a", "b"), 0, (5, 0), (5, 0), (0, 0), (0, 0), (0, 0))
    assert empty.diagnosis().startswith("b offered no window (no window of the feature set stored")
    off = AlignmentReport(("a", "b"), 0, (5, 0), (5, 0), (0, 0), (0, 7), (0, 0))
    assert off.diagnosis() == "b offered no window: b stored windows, all off the grid (--hop-ms / --tolerance-ms)"
    twice = AlignmentReport(("a", "b"), 0, (5, 4), (5, 0), (0, 4), (0, 0), (0, 0))
    assert twice.diagnosis().startswith("b offered every window start more than once")
    assert AlignmentReport(("a", "b"), 3, (5, 4), (2, 1), (0, 0), (0, 0), (3, 3)).diagnosis() == ""
