"""Window alignment for vertical jobs: keyed-hash window ids, snapping to the window grid, and
the intersection the master computes without learning which windows they are.

A window is identified by its session and its start time. Gateways of one person cut windows
on a common grid (every ``hop_us`` microseconds from the session's origin), but their clocks
may disagree by a little; :func:`snap_starts` rounds each start to the nearest grid point and
flags starts farther than ``tolerance_us`` from it (off-grid windows cannot be matched and are
counted, never guessed). :func:`window_digests` turns ``(session, snapped start)`` into
HMAC-SHA256 digests under the parties' id key (``shared.vertical_party_key``): the master sees
only digests, which it can compare across parties but not invert or link to another person's.

:func:`intersect_digests` is the master's side: which of each party's digests every party
holds, and an :class:`AlignmentReport` of what was left out and why. Each party then sorts its
common windows by ``(session, snapped start)`` (:func:`aligned_order`) -- the same order on
every party, which the master never needs to know.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DIGEST_BYTES", "AlignmentReport", "SnappedStarts", "aligned_order", "intersect_digests",
           "snap_starts", "window_digests"]

DIGEST_BYTES = 16  # truncated HMAC-SHA256: 128 bits, collision-free at any fleet's window counts


@dataclass(frozen=True, eq=False)
class SnappedStarts:
    """Start times on the grid (``starts``) and which windows lay within the tolerance (``on_grid``)."""

    starts: np.ndarray
    on_grid: np.ndarray


def snap_starts(start_us: np.ndarray, hop_us: int, tolerance_us: int) -> SnappedStarts:
    """Round window starts to the nearest multiple of ``hop_us``.

    A gateway whose clock runs ``delta`` ahead cuts its windows ``delta`` late; any ``delta``
    within ``tolerance_us`` (at most half a hop, so that a window cannot snap to its neighbour's
    grid point) lands on the same grid point as the other gateways' windows.

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


def window_digests(id_key: bytes, sessions: Sequence[str], starts: np.ndarray) -> np.ndarray:
    """HMAC-SHA256(id_key, "session|start") of every window, truncated: ``(n, DIGEST_BYTES)`` uint8."""
    out = np.zeros((len(sessions), DIGEST_BYTES), dtype=np.uint8)
    for i, (session, start) in enumerate(zip(sessions, np.asarray(starts).tolist())):
        mac = hmac.new(id_key, f"{session}|{int(start)}".encode(), hashlib.sha256).digest()
        out[i] = np.frombuffer(mac[:DIGEST_BYTES], dtype=np.uint8)
    return out


@dataclass(frozen=True)
class AlignmentReport:
    """What alignment kept and dropped, per party (in party order).

    ``common``: windows every party holds (the rows of the job); ``held``: windows each party
    offered; ``missing``: offered windows some other party lacks; ``duplicates``: repeated ids
    (kept once); ``off_grid``: windows too far from the grid to be matched (counted by the party,
    never offered).
    """

    parties: tuple[str, ...]
    common: int
    held: tuple[int, ...]
    missing: tuple[int, ...]
    duplicates: tuple[int, ...]
    off_grid: tuple[int, ...]

    def line(self) -> str:
        """One line for logs and the CLI."""
        per = ", ".join(f"{p}: {h} held, {m} unmatched, {g} off-grid, {d} duplicate"
                        for p, h, m, g, d in zip(self.parties, self.held, self.missing, self.off_grid,
                                                 self.duplicates))
        return f"{self.common} windows aligned ({per})"


def _keys(digests: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(digests, dtype=np.uint8).view(f"V{DIGEST_BYTES}").ravel()


def intersect_digests(parties: Sequence[str], digests: Sequence[np.ndarray],
                      off_grid: Sequence[int]) -> tuple[list[np.ndarray], AlignmentReport]:
    """Per party, the positions (ascending) of its digests that every party holds -- each common
    window once -- and the report. Pure: the master's whole share of alignment."""
    keys = [_keys(d) for d in digests]
    common = keys[0] if keys else np.zeros(0, f"V{DIGEST_BYTES}")
    for k in keys[1:]:
        common = np.intersect1d(common, k)
    common = np.unique(common)
    kept, missing, duplicates = [], [], []
    for k in keys:
        _, first = np.unique(k, return_index=True)
        first = np.sort(first)
        in_common = np.isin(k[first], common)
        kept.append(first[in_common].astype(np.int64))
        duplicates.append(int(k.size - first.size))
        missing.append(int((~in_common).sum()))
    report = AlignmentReport(tuple(parties), int(common.size), tuple(int(k.size) for k in keys), tuple(missing),
                             tuple(duplicates), tuple(int(g) for g in off_grid))
    return kept, report


def aligned_order(sessions: Sequence[str], starts: np.ndarray) -> np.ndarray:
    """Row order of the common windows on every party: by session, then snapped start."""
    session_codes = np.unique(np.asarray(list(sessions), dtype=object).astype(str), return_inverse=True)[1]
    return np.lexsort((np.asarray(starts, dtype=np.int64), session_codes))
