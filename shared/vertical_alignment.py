"""Window alignment for vertical jobs: keyed-hash window ids, snapping to the window grid, and
the intersection the master computes without learning which windows they are.

A window is identified by its start time on the sensors' common clock -- and nothing else. The
gateways of one person cut windows on the same absolute grid (``edge_client.pipeline.windows``:
window ``w`` starts at ``w * step`` of the common clock, whatever the gateway, its session or a
restart of its stream), so the start alone names the same window on every gateway. The session
a gateway stores a window under is not part of the id: by default it is the gateway's own
(client id + start time) and a stream restart makes it ``session#n``, so no two gateways of a
person would share one. Which person a window belongs to is given by the key: the party key is
one person's (``shared.vertical_party_key``; ``wheelfed vertical keygen``, copied to each of
that person's gateways and to no other), so the same start under two persons' keys gives
unrelated digests.

Sources whose windows are not on a grid (or whose clocks disagree by a little) are snapped:
:func:`snap_starts` rounds each start to the nearest grid point and flags starts farther than
``tolerance_us`` from it (off-grid windows cannot be matched and are counted, never guessed).
:func:`start_digests` turns each snapped start into an HMAC-SHA256 digest under the person's id
key: the master sees only digests, which it can compare across parties but not invert or link
to another person's.

:func:`intersect_digests` is the master's side: which of each party's digests every party holds,
and an :class:`AlignmentReport` of what was left out and why -- including, when nothing aligns,
the likely cause (:meth:`AlignmentReport.diagnosis`). A start a party holds twice (two windows at
the same time: its sensors' clock stepped back, or one recording was fed twice) is ambiguous and
dropped on that party, counted as duplicates. Each party then sorts its common windows by start
(:func:`start_order`) -- the same order on every party, which the master never needs to know.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DIGEST_BYTES",
    "AlignmentReport",
    "SnappedStarts",
    "intersect_digests",
    "snap_starts",
    "start_digests",
    "start_order",
]

DIGEST_BYTES = 16  # truncated HMAC-SHA256: 128 bits, collision-free at any fleet's window counts
_ID_DOMAIN = b"wheelfed/vertical/window-start|"  # the id's format, bound into every digest


@dataclass(frozen=True, eq=False)
class SnappedStarts:
    """Start times on the grid (``starts``) and which windows lay within the tolerance (``on_grid``)."""

    starts: np.ndarray
    on_grid: np.ndarray


def snap_starts(start_us: np.ndarray, hop_us: int, tolerance_us: int) -> SnappedStarts:
    """Round window starts to the nearest multiple of ``hop_us``.

    A source whose clock runs ``delta`` ahead and cuts windows relative to that clock's own
    origin starts them ``delta`` late; any ``delta`` within ``tolerance_us`` (at most half a
    hop, so that a window cannot snap to its neighbour's grid point) lands on the same grid point
    as the other parties' windows. (A gateway's pipeline cuts windows on the absolute grid of its
    sensors' clock, so its starts are grid points already: snapping leaves them as they are.)

    Examples
    --------
    >>> s = snap_starts(np.array([0, 2_000_150, 3_999_000, 5_000_000]), 2_000_000, 250_000)
    >>> s.starts.tolist(), s.on_grid.tolist()
    ([0, 2000000, 4000000, 6000000], [True, True, True, False])
    """
    if not (isinstance(hop_us, (int, np.integer)) and hop_us >= 1):
        raise ValueError(f"hop_us must be an int >= 1, got {hop_us!r}")
    if not (isinstance(tolerance_us, (int, np.integer)) and 0 <= 2 * tolerance_us <= hop_us):
        raise ValueError(f"tolerance_us must be an int in 0..hop_us/2 ({hop_us // 2}), got {tolerance_us!r}")
    start = np.asarray(start_us, dtype=np.int64)
    snapped = np.floor_divide(start + hop_us // 2, hop_us) * hop_us
    return SnappedStarts(snapped, np.abs(start - snapped) <= tolerance_us)


def start_digests(id_key: bytes, starts: np.ndarray) -> np.ndarray:
    """The window ids a party offers: HMAC-SHA256 under the person's ``id_key`` of each window's
    (snapped) start, truncated to ``(n, DIGEST_BYTES)`` uint8.

    The start alone, not the session: a person's gateways store the same window under different
    session names (each its own default, ``#n`` after a stream restart), but at the same start
    on the common clock. The key makes the digests the person's: another person's gateways,
    holding another key, give unrelated digests for the same instant.

    Examples
    --------
    >>> key = bytes(32)
    >>> a = start_digests(key, np.array([0, 2_000_000]))
    >>> a.shape, bool((a == start_digests(key, np.array([0, 2_000_000]))).all())
    ((2, 16), True)
    >>> bool((a == start_digests(bytes(31) + b"x", np.array([0, 2_000_000]))).all(axis=1).any())
    False
    """
    base = hmac.new(id_key, _ID_DOMAIN, hashlib.sha256)
    starts = np.asarray(starts, dtype=np.int64)
    out = np.zeros((starts.size, DIGEST_BYTES), dtype=np.uint8)
    for i, start in enumerate(starts.tolist()):
        mac = base.copy()
        mac.update(str(start).encode())
        out[i] = np.frombuffer(mac.digest()[:DIGEST_BYTES], dtype=np.uint8)
    return out


def start_order(starts: np.ndarray) -> np.ndarray:
    """Row order of a party's common windows: by (snapped) start -- the same on every party,
    since the common windows have one start each (:func:`intersect_digests` drops repeats).

    Examples
    --------
    >>> start_order(np.array([6, 2, 4])).tolist()
    [1, 2, 0]
    """
    return np.argsort(np.asarray(starts, dtype=np.int64), kind="stable")


@dataclass(frozen=True)
class AlignmentReport:
    """What alignment kept and dropped, per party (in party order).

    ``common``: windows every party holds (the rows of the job); ``held``: windows each party
    offered (``held = common + missing + duplicates``); ``missing``: offered windows some other
    party lacks; ``duplicates``: windows whose id the party offered more than once -- every copy
    is dropped, since which of them is the window the other parties hold cannot be told;
    ``off_grid``: windows too far from the grid to be matched (counted by the party, never
    offered); ``overlap``: offered windows (not duplicated) that at least one other party holds
    too -- zero on a party whose windows no other party shares, the mark of a party holding
    another person's key or windows of other times (:meth:`diagnosis`).
    """

    parties: tuple[str, ...]
    common: int
    held: tuple[int, ...]
    missing: tuple[int, ...]
    duplicates: tuple[int, ...]
    off_grid: tuple[int, ...]
    overlap: tuple[int, ...]

    def diagnosis(self) -> str:
        """Why no window aligned, as far as the counts tell ("" when some did).

        Examples
        --------
        >>> report = AlignmentReport(("a", "b", "c"), 0, (9, 9, 8), (9, 9, 8), (0, 0, 0), (0, 0, 0), (9, 9, 0))
        >>> print(report.diagnosis())  # doctest: +NORMALIZE_WHITESPACE
        c shares no window with the other parties: another party key than theirs (one key per person:
        wheelfed vertical keygen, copied to each of the person's gateways) or windows of other times
        (the sensors' clock)
        """
        if self.common or not self.parties:
            return ""
        silent = [p for p, h in zip(self.parties, self.held) if h == 0]
        if silent:
            grid = [p for p, h, g in zip(self.parties, self.held, self.off_grid) if h == 0 and g]
            why = (
                f": {', '.join(grid)} stored windows, all off the grid (--hop-ms / --tolerance-ms)"
                if grid
                else " (no window of the feature set stored, or none new since the last live run)"
            )
            return f"{', '.join(silent)} offered no window{why}"
        repeated = [p for p, h, d in zip(self.parties, self.held, self.duplicates) if h == d]
        if repeated:
            return (
                f"{', '.join(repeated)} offered every window start more than once (its sensors' clock stepped "
                "back, or the same data was stored twice)"
            )
        alone = [p for p, o in zip(self.parties, self.overlap) if o == 0]
        key = "(one key per person: wheelfed vertical keygen, copied to each of the person's gateways)"
        if len(alone) == len(self.parties):
            return (
                f"no two parties share a window: different party keys {key} or windows of different times "
                "(the sensors' clocks)"
            )
        if alone:
            return (
                f"{', '.join(alone)} share{'s' if len(alone) == 1 else ''} no window with the other parties: "
                f"another party key than theirs {key} or windows of other times (the sensors' clock)"
            )
        return "every party shares windows with another, but no window is held by all: their times do not overlap"

    def line(self) -> str:
        """One line for logs and the CLI (with :meth:`diagnosis` when nothing aligned)."""
        per = ", ".join(
            f"{p}: {h} held, {m} unmatched, {g} off-grid, {d} duplicate"
            for p, h, m, g, d in zip(self.parties, self.held, self.missing, self.off_grid, self.duplicates)
        )
        cause = self.diagnosis()
        return f"{self.common} windows aligned ({per})" + (f"; likely cause: {cause}" if cause else "")


def _keys(digests: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(digests, dtype=np.uint8).view(f"V{DIGEST_BYTES}").ravel()


def intersect_digests(
    parties: Sequence[str], digests: Sequence[np.ndarray], off_grid: Sequence[int]
) -> tuple[list[np.ndarray], AlignmentReport]:
    """Per party, the positions (ascending) of its digests that every party holds once, and the
    report. Pure: the master's whole share of alignment.

    Examples
    --------
    >>> d = lambda *ids: np.array([[i] * DIGEST_BYTES for i in ids], dtype=np.uint8)
    >>> keep, report = intersect_digests(["a", "b"], [d(1, 2, 3, 3), d(3, 2, 5)], [0, 0])
    >>> [k.tolist() for k in keep], report.common, report.missing, report.duplicates
    ([[1], [1]], 1, (1, 2), (2, 0))
    """
    once_ids, once_at, duplicates = [], [], []
    for d in digests:
        k = _keys(d)
        ids, first, counts = np.unique(k, return_index=True, return_counts=True)
        single = counts == 1
        once_ids.append(ids[single])
        once_at.append(first[single])
        duplicates.append(int(k.size - single.sum()))
    common = once_ids[0] if once_ids else np.zeros(0, f"V{DIGEST_BYTES}")
    for ids in once_ids[1:]:
        common = np.intersect1d(common, ids, assume_unique=True)
    pooled_ids, pooled_counts = (
        np.unique(np.concatenate(once_ids), return_counts=True) if once_ids else (common, np.zeros(0, np.int64))
    )
    shared = pooled_ids[pooled_counts > 1]
    kept, missing, overlap = [], [], []
    for ids, at in zip(once_ids, once_at):
        in_common = np.isin(ids, common, assume_unique=True)
        kept.append(np.sort(at[in_common]).astype(np.int64))
        missing.append(int((~in_common).sum()))
        overlap.append(int(np.isin(ids, shared, assume_unique=True).sum()))
    report = AlignmentReport(
        tuple(parties),
        int(common.size),
        tuple(int(_keys(d).size) for d in digests),
        tuple(missing),
        tuple(duplicates),
        tuple(int(g) for g in off_grid),
        tuple(overlap),
    )
    return kept, report
