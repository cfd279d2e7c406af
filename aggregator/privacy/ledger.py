"""The privacy ledger: what every private job spent on which windows, over a lifetime of retraining.

A private training spends ``(xi, rho)``-zCDP on each window it may have used: the windows of its
gateways whose start time lies in its range ``[since_us, until_us)`` (``since_us`` None: from the
beginning; ``until_us`` None: the job is still running, so every window up to now and to come).
A window is identified by its gateway and its start time; its lifetime spending is the sum of
``rho`` and of ``xi`` over every entry that covers it (zCDP composes by adding both), turned into
``epsilon`` at the ledger's ``delta`` by :func:`aggregator.privacy.epsilon_of`.

Per gateway the spending is piecewise constant in the start time: :func:`gateway_segments` cuts
the time axis at every entry's bounds and sums the covering entries per segment (prefix sums over
the entries sorted by start and by end). The epsilon of a sum is only asked of dp-accounting
where it decides something: the Pareto-maximal ``(rho, xi)`` pairs (the most-used window, the
least room) and pairs near the cap. :func:`budget_of` gives per gateway the most-used window
and how much a new job could still spend there; :func:`check_job` decides whether a proposed job
(its gateways, its range, its planned ``epsilon`` at its ``delta``, i.e. ``rho_for_epsilon``)
keeps every window it covers within the cap, and if not, says in one line what is left and from
when new windows have the full budget (:class:`BudgetExceeded`).

The entries are what the server records (``aggregator.server.service``): a private job's attempt
is entered when it starts with its planned spending (``basis`` ``"running"``; without a range its
``until_us`` is open: it may use every window to come). While it runs, every release is recorded
in the entry before its request goes out (``released_rho``, ``released_xi``, ``releases``:
``aggregator.privacy.spending``). It is settled when it ends -- with what its model's metadata
says it spent (``"spent"``: ``dp_rho``, ``dp_xi``), or, ended without a model (failed, cancelled,
cut short by a stopped or killed server), with what it released (``"spent"`` with no model: the
record, each release in flight counted). An entry without that record (``releases`` None: entered
by a server before it) is settled with its plan (``"planned"``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .accountant import epsilon_of, rho_for_epsilon

__all__ = [
    "BudgetExceeded",
    "GatewayBudget",
    "LedgerEntry",
    "PlannedJob",
    "PrivacyCap",
    "Segment",
    "budget_of",
    "check_job",
    "gateway_segments",
    "iso_us",
    "rho_room",
]

#: Stand-ins for an open bound (``since_us``/``until_us`` None) on the int64 time axis.
_LOW, _HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@dataclass(frozen=True)
class PrivacyCap:
    """The most ``epsilon`` (at ``delta``) any window may spend over its lifetime, every job that
    used it together (the server's ``privacy_epsilon_cap`` and ``privacy_delta``).

    Examples
    --------
    >>> PrivacyCap(0.0)
    Traceback (most recent call last):
    ...
    ValueError: privacy_epsilon_cap must be a number > 0, got 0.0
    """

    epsilon: float = 10.0
    delta: float = 1e-6

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, int | float) and 0 < self.epsilon < float("inf")):
            raise ValueError(f"privacy_epsilon_cap must be a number > 0, got {self.epsilon!r}")
        if not (isinstance(self.delta, float) and 0 < self.delta < 1e-3):
            raise ValueError(f"privacy_delta must be a float in (0, 1e-3), got {self.delta!r}")


@dataclass(frozen=True)
class LedgerEntry:
    """One attempt of a private job: what it spent per window on ``gateways`` x ``[since_us,
    until_us)``. ``basis`` is ``"running"`` (its plan, while it runs), ``"spent"`` (its model's
    metadata, or without a model what it released) or ``"planned"`` (its plan: it ended without
    a model and without a record of its releases). ``epsilon`` is the job's own, at its
    ``delta``. ``released_rho``, ``released_xi`` and ``releases``: what it had released, written
    ahead of each release (None: no record)."""

    job_id: str
    attempt: int
    gateways: tuple[str, ...]
    since_us: int | None
    until_us: int | None
    rho: float
    xi: float
    delta: float
    epsilon: float
    basis: str
    model: str = ""
    created: float = 0.0
    released_rho: float | None = None
    released_xi: float | None = None
    releases: int | None = None

    @property
    def open(self) -> bool:
        """Whether the job is still running (its range reaches every window to come)."""
        return self.until_us is None


@dataclass(frozen=True)
class PlannedJob:
    """A job to check: its gateways (None: any gateway, i.e. every one), its range, and its
    planned ``epsilon`` at its ``delta``."""

    gateways: tuple[str, ...] | None
    since_us: int | None
    until_us: int | None
    epsilon: float
    delta: float

    @property
    def rho(self) -> float:
        return rho_for_epsilon(self.epsilon, self.delta)


@dataclass(frozen=True)
class Segment:
    """Windows of one gateway starting in ``[since_us, until_us)`` (None: open), all covered by the
    same ``jobs`` entries: their lifetime zCDP ``rho`` and ``xi`` (their epsilon is
    ``epsilon_of(rho, xi, delta)``)."""

    since_us: int | None
    until_us: int | None
    rho: float
    xi: float
    jobs: int


@dataclass(frozen=True)
class GatewayBudget:
    """One gateway's budget: its most-used window's lifetime ``spent_epsilon``, the largest
    ``epsilon`` a new job (at the ledger's delta) could still spend there (``remaining_epsilon``),
    the time from which its windows are untouched (``fresh_since_us``; None: all are, or a job
    still runs on it), the jobs still running on it (``running``: until they end, every window to
    come is covered), how many entries cover some of its windows (``jobs``) and its segments."""

    gateway: str
    spent_epsilon: float
    remaining_epsilon: float
    fresh_since_us: int | None
    running: tuple[str, ...]
    jobs: int
    segments: tuple[Segment, ...]


class BudgetExceeded(ValueError):
    """A job would take a window over the cap; the message is the one line an operator reads.

    ``fresh_since_us``: the start time (microseconds) from which every covered gateway's
    windows have the full budget, when there is one -- the ``since`` the message suggests."""

    def __init__(self, message: str, fresh_since_us: int | None = None) -> None:
        super().__init__(message)
        self.fresh_since_us = fresh_since_us


def iso_us(t_us: int | None) -> str:
    """A start time in microseconds as ISO-8601 UTC (``"the beginning"`` / ``"now on"`` when open).

    Examples
    --------
    >>> iso_us(1_795_660_200_000_000)
    '2026-11-26T02:30:00Z'
    """
    if t_us is None:
        return "the beginning"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_us / 1e6))


def _bounds(values: Iterable[int | None], open_value: int) -> np.ndarray:
    return np.array([open_value if v is None else v for v in values], dtype=np.int64)


@lru_cache(maxsize=4096)
def _epsilon(rho: float, xi: float, delta: float) -> float:
    return epsilon_of(rho, xi, delta)


@lru_cache(maxsize=256)
def _rho_cap(cap: float, delta: float) -> float:
    """The largest ``rho`` whose ``rho``-zCDP stays within ``cap`` at ``delta``."""
    return rho_for_epsilon(cap, delta)


@dataclass(frozen=True)
class _Spending:
    """One gateway's covered segments as arrays (start, end: int64 with open ends as
    ``_LOW``/``_HIGH``; rho, xi; entries covering)."""

    starts: np.ndarray
    ends: np.ndarray
    rho: np.ndarray
    xi: np.ndarray
    jobs: np.ndarray

    @classmethod
    def of(cls, mine: Sequence[LedgerEntry]) -> _Spending:
        """The spending of the windows ``mine`` (one gateway's entries) cover. A segment's is the
        sum over the entries begun at or before its start less those ended by then: prefix sums
        over the entries sorted by start and by end, looked up at every cut (``searchsorted``),
        so a long ledger costs ``O(n log n)`` per gateway."""
        if not mine:
            empty = np.zeros(0)
            return cls(empty.astype(np.int64), empty.astype(np.int64), empty, empty, empty.astype(np.int64))
        since, until = _bounds((e.since_us for e in mine), _LOW), _bounds((e.until_us for e in mine), _HIGH)
        values = np.array([[e.rho, e.xi] for e in mine])
        cuts = np.unique(np.concatenate([since, until]))
        starts, ends = cuts[:-1], cuts[1:]
        begun, ended = np.argsort(since, kind="stable"), np.argsort(until, kind="stable")
        n_begun = np.searchsorted(since[begun], starts, side="right")
        n_ended = np.searchsorted(until[ended], starts, side="right")
        prefix = lambda order: np.vstack([np.zeros((1, 2)), np.cumsum(values[order], axis=0)])  # noqa: E731
        spent = prefix(begun)[n_begun] - prefix(ended)[n_ended]
        jobs = n_begun - n_ended
        used = jobs > 0
        spent = np.maximum(spent[used], 0.0)  # a difference of prefix sums may round below 0
        return cls(starts[used], ends[used], spent[:, 0], spent[:, 1], jobs[used])


def _by_gateway(entries: Sequence[LedgerEntry]) -> dict[str, list[LedgerEntry]]:
    out: dict[str, list[LedgerEntry]] = {}
    for e in entries:
        for g in e.gateways:
            out.setdefault(g, []).append(e)
    return out


def _segments(sp: _Spending) -> tuple[Segment, ...]:
    bound = lambda t, open_value: None if t == open_value else int(t)  # noqa: E731
    return tuple(
        Segment(bound(s, _LOW), bound(u, _HIGH), float(r), float(x), int(n))
        for s, u, r, x, n in zip(sp.starts, sp.ends, sp.rho, sp.xi, sp.jobs)
    )


def _front(rho: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Indices of the Pareto-maximal ``(rho, xi)`` pairs: epsilon grows with both, so the largest
    epsilon and the least room are among them (one pair when every ``xi`` is 0)."""
    if rho.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-xi, -rho))
    seen = np.maximum.accumulate(np.concatenate([[-np.inf], xi[order][:-1]]))
    return order[xi[order] > seen]


def _over(rho: np.ndarray, xi: np.ndarray, cap: float, delta: float) -> np.ndarray:
    """Which ``(rho, xi)`` pairs exceed ``cap`` at ``delta`` (the same answers as calling
    :func:`epsilon_of` on each). ``xi + alpha rho <= alpha (rho + xi)`` at every order ``alpha >= 1``,
    so ``rho + xi <= rho_cap`` is within the cap; only pairs near the boundary are converted."""
    limit = _rho_cap(cap, delta)
    over = rho > limit * (1 + 2e-6)
    unsure = ~over & (rho + xi > limit)
    for i in np.flatnonzero(unsure):
        over[i] = _epsilon(float(rho[i]), float(xi[i]), delta) > cap
    return over


def gateway_segments(entries: Sequence[LedgerEntry], gateway: str) -> tuple[Segment, ...]:
    """The piecewise-constant lifetime spending of ``gateway``'s windows over their start time:
    the segments covered by at least one entry, in time order.

    Examples
    --------
    >>> a = LedgerEntry("j1", 1, ("gw-1",), None, 100, 0.5, 0.0, 1e-6, 0.0, "spent")
    >>> b = LedgerEntry("j2", 1, ("gw-1", "gw-2"), 50, 200, 0.25, 0.0, 1e-6, 0.0, "spent")
    >>> [(s.since_us, s.until_us, s.rho, s.jobs) for s in gateway_segments([a, b], "gw-1")]
    [(None, 50, 0.5, 1), (50, 100, 0.75, 2), (100, 200, 0.25, 1)]
    """
    return _segments(_Spending.of([e for e in entries if gateway in e.gateways]))


@lru_cache(maxsize=4096)
def rho_room(rho: float, xi: float, cap: float, delta: float) -> float:
    """The most ``rho`` a window that spent ``(xi, rho)`` may still take without its lifetime
    ``epsilon`` (at ``delta``) passing ``cap``: bisection on :func:`epsilon_of` between
    ``rho_cap - rho - xi`` (within the cap, see ``_over``) and ``rho_cap - rho``, to 1e-6 of ``rho_cap``.

    Examples
    --------
    >>> r = rho_room(0.0, 0.0, 1.0, 1e-6)
    >>> abs(r - rho_for_epsilon(1.0, 1e-6)) < 1e-6 * r
    True
    """
    limit = _rho_cap(cap, delta)
    low, high = max(0.0, limit - rho - xi), max(0.0, limit - rho)
    if xi == 0.0 or high == 0.0:
        return high
    while high - low > 1e-6 * limit:
        mid = (low + high) / 2
        if _epsilon(rho + mid, xi, delta) <= cap:
            low = mid
        else:
            high = mid
    return low


def _remaining(rho: float, xi: float, cap: float, delta: float) -> float:
    """The ``epsilon`` (at ``delta``) of the most a new job may still spend on such a window."""
    return _epsilon(rho_room(rho, xi, cap, delta), 0.0, delta)


def budget_of(
    entries: Sequence[LedgerEntry], gateways: Iterable[str], cap: float, delta: float, *, segments: bool = True
) -> list[GatewayBudget]:
    """Per gateway (those given and those in ``entries``, in order): its most-used window and
    what is left there, under ``cap`` at ``delta`` (with its segments unless ``segments`` is False).

    Examples
    --------
    >>> e = LedgerEntry("j1", 1, ("gw-1",), None, 100, rho_for_epsilon(4.0, 1e-6), 0.0, 1e-6, 4.0, "spent")
    >>> [(b.gateway, round(b.spent_epsilon, 3), b.fresh_since_us) for b in budget_of([e], ["gw-2"], 10.0, 1e-6)]
    [('gw-1', 4.0, 100), ('gw-2', 0.0, None)]
    """
    index = _by_gateway(entries)
    out = []
    for gateway in sorted(set(gateways) | set(index)):
        mine = index.get(gateway, [])
        sp = _Spending.of(mine)
        front = [(float(sp.rho[i]), float(sp.xi[i])) for i in _front(sp.rho, sp.xi)] or [(0.0, 0.0)]
        running = tuple(sorted({e.job_id for e in mine if e.open}))
        fresh = None if not sp.ends.size or sp.ends[-1] == _HIGH else int(sp.ends[-1])
        out.append(
            GatewayBudget(
                gateway,
                max(_epsilon(r, x, delta) for r, x in front),
                min(_remaining(r, x, cap, delta) for r, x in front),
                fresh,
                running,
                len(mine),
                _segments(sp) if segments else (),
            )
        )
    return out


def check_job(entries: Sequence[LedgerEntry], job: PlannedJob, known: Iterable[str], cap: float, delta: float) -> None:
    """Raise :class:`BudgetExceeded` if ``job`` would take any window it covers past ``cap``
    (lifetime ``epsilon`` at ``delta``); ``known``: the gateways a job of any gateway may reach.

    Examples
    --------
    >>> e = LedgerEntry("j1", 1, ("gw-1",), None, 1_795_660_200_000_000, rho_for_epsilon(8.0, 1e-6), 0.0, 1e-6, 8.0,
    ...                 "spent")
    >>> check_job([e], PlannedJob(("gw-1",), 1_795_660_200_000_000, None, 8.0, 1e-6), [], 10.0, 1e-6)
    >>> check_job([e], PlannedJob(("gw-1",), None, None, 8.0, 1e-6), [], 10.0, 1e-6)
    Traceback (most recent call last):
    ...
    aggregator.privacy.ledger.BudgetExceeded: refused: a job of epsilon 8 (delta 1e-06) would take gw-1's windows \
from the beginning to 2026-11-26T02:30:00Z to epsilon 12.05 over their lifetime, above the cap of 10 (delta 1e-06); \
left there: epsilon 5.142 (gw-1); windows starting at or after 2026-11-26T02:30:00Z have the full budget: give the \
job since=2026-11-26T02:30:00Z
    """
    rho = job.rho
    lone = _epsilon(rho, 0.0, delta)
    if lone > cap:
        raise BudgetExceeded(
            f"refused: a job of epsilon {job.epsilon:g} (delta {job.delta:g}) is epsilon {lone:.4g} "
            f"at the ledger's delta {delta:g}, above the cap of {cap:g} on its own: lower its "
            "dp_epsilon"
        )
    index = _by_gateway(entries)
    scope = sorted(set(job.gateways) if job.gateways is not None else set(known) | set(index))
    since = _LOW if job.since_us is None else job.since_us
    until = _HIGH if job.until_us is None else job.until_us
    worst: tuple[float, str, int, int] | None = None  # epsilon with the job, gateway, segment's bounds
    left: list[tuple[float, str]] = []  # per gateway: the least a job may still spend on a covered window
    fresh: list[int] = []  # per gateway with a window over the cap: from when its windows would pass
    for gateway in scope:
        sp = _Spending.of(index.get(gateway, []))
        hit = (sp.starts < until) & (sp.ends > since)
        if not hit.any():
            continue
        r, x = sp.rho[hit], sp.xi[hit]
        left.append((min(_remaining(float(r[i]), float(x[i]), cap, delta) for i in _front(r, x)), gateway))
        over = _over(r + rho, x, cap, delta)
        if not over.any():
            continue
        fresh.append(int(sp.ends[hit][over][-1]))
        for i in _front(r[over] + rho, x[over]):
            eps = _epsilon(float(r[over][i] + rho), float(x[over][i]), delta)
            if worst is None or eps > worst[0]:
                worst = (eps, gateway, int(sp.starts[hit][over][i]), int(sp.ends[hit][over][i]))
    if worst is None:
        return
    eps, gateway, seg_since, seg_until = worst
    least, least_gateway = min(left)
    start = max(fresh)
    suggested = None
    if start == _HIGH:
        runner = sorted({e.job_id for e in entries if e.open})
        when = (
            f"every window to come is held by the running job {', '.join(runner)}: new windows have budget from "
            "when it ends"
        )
    else:
        suggested = -(-start // 1_000_000) * 1_000_000  # to the second after, as the suggestion is written
        when = (
            f"windows starting at or after {iso_us(suggested)} have the full budget: give the job "
            f"since={iso_us(suggested)}"
        )
    since_text = iso_us(None if seg_since == _LOW else seg_since)
    until_text = "now on" if seg_until == _HIGH else iso_us(seg_until)
    raise BudgetExceeded(
        f"refused: a job of epsilon {job.epsilon:g} (delta {job.delta:g}) would take {gateway}'s "
        f"windows from {since_text} to {until_text} to epsilon {eps:.4g} over their "
        f"lifetime, above the cap of {cap:g} (delta {delta:g}); left there: epsilon "
        f"{least:.4g} ({least_gateway}); {when}",
        suggested,
    )
