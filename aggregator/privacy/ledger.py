"""The privacy ledger: what every private job spent on which windows, over a lifetime of retraining.

A private training spends ``(xi, rho)``-zCDP on each window it may have used: the windows of its
gateways whose start time lies in its range ``[since_us, until_us)`` (``since_us`` None: from the
beginning; ``until_us`` None: the job is still running, so every window up to now and to come).
A window is identified by its gateway and its start time; its lifetime spending is the sum of
``rho`` and of ``xi`` over every entry that covers it (zCDP composes by adding both), turned into
``epsilon`` at the ledger's ``delta`` by :func:`aggregator.privacy.epsilon_of`.

Per gateway the spending is piecewise constant in the start time: :func:`gateway_segments` cuts
the time axis at every entry's bounds and sums the covering entries per segment (one
segments-by-entries coverage matrix). :func:`budget_of` gives per gateway the most-used window
and how much a new job could still spend there; :func:`check_job` decides whether a proposed job
(its gateways, its range, its planned ``epsilon`` at its ``delta``, i.e. ``rho_for_epsilon``)
keeps every window it covers within the cap, and if not, says in one line what is left and from
when new windows have the full budget (:class:`BudgetExceeded`).

The entries are what the server records (``aggregator.server.service``): a private job's attempt
is entered when it starts with its planned spending (``basis`` ``"running"``; without a range its
``until_us`` is open: it may use every window to come) and settled when it ends -- with what its
model's metadata says it spent (``"spent"``: ``dp_rho``, ``dp_xi``), or with its plan when it
ended without a model (``"planned"``: failed, cancelled or cut short, its releases were made all
the same).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .accountant import epsilon_of, rho_for_epsilon

__all__ = ["BudgetExceeded", "GatewayBudget", "LedgerEntry", "PlannedJob", "PrivacyCap", "Segment", "budget_of",
           "check_job", "gateway_segments", "iso_us", "rho_room"]

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
    metadata) or ``"planned"`` (its plan: it ended without a model). ``epsilon`` is the job's own,
    at its ``delta``."""

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
    """Windows of one gateway starting in ``[since_us, until_us)`` (None: open), all covered by
    the same entries: their lifetime ``rho``, ``xi`` and ``epsilon`` (at the ledger's delta)."""

    since_us: int | None
    until_us: int | None
    rho: float
    xi: float
    epsilon: float
    jobs: int


@dataclass(frozen=True)
class GatewayBudget:
    """One gateway's budget: its most-used window's lifetime ``spent_epsilon``, the largest
    ``epsilon`` a new job (at the ledger's delta) could still spend there (``remaining_epsilon``),
    the time from which its windows are untouched (``fresh_since_us``; None: all are, or a job
    still runs on it), the jobs still running on it (``running``: until they end, every window to come is covered) and its
    segments."""

    gateway: str
    spent_epsilon: float
    remaining_epsilon: float
    fresh_since_us: int | None
    running: tuple[str, ...]
    segments: tuple[Segment, ...]


class BudgetExceeded(ValueError):
    """A job would take a window over the cap; the message is the one line an operator reads."""


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


def gateway_segments(entries: Sequence[LedgerEntry], gateway: str, delta: float) -> tuple[Segment, ...]:
    """The piecewise-constant lifetime spending of ``gateway``'s windows over their start time:
    the segments covered by at least one entry, in time order.

    Examples
    --------
    >>> a = LedgerEntry("j1", 1, ("gw-1",), None, 100, 0.5, 0.0, 1e-6, 0.0, "spent")
    >>> b = LedgerEntry("j2", 1, ("gw-1", "gw-2"), 50, 200, 0.25, 0.0, 1e-6, 0.0, "spent")
    >>> [(s.since_us, s.until_us, s.rho, s.jobs) for s in gateway_segments([a, b], "gw-1", 1e-6)]
    [(None, 50, 0.5, 1), (50, 100, 0.75, 2), (100, 200, 0.25, 1)]
    """
    mine = [e for e in entries if gateway in e.gateways]
    if not mine:
        return ()
    since, until = _bounds((e.since_us for e in mine), _LOW), _bounds((e.until_us for e in mine), _HIGH)
    cuts = np.unique(np.concatenate([since, until]))
    starts, ends = cuts[:-1], cuts[1:]
    cover = (since[None, :] <= starts[:, None]) & (starts[:, None] < until[None, :])  # segments x entries
    rho = cover @ np.array([e.rho for e in mine])
    xi = cover @ np.array([e.xi for e in mine])
    jobs = cover.sum(axis=1)
    bound = lambda t, open_value: None if t == open_value else int(t)  # noqa: E731
    return tuple(Segment(bound(s, _LOW), bound(u, _HIGH), float(r), float(x), _epsilon(float(r), float(x), delta),
                         int(n)) for s, u, r, x, n in zip(starts, ends, rho, xi, jobs) if n)


@lru_cache(maxsize=4096)
def rho_room(rho: float, xi: float, cap: float, delta: float) -> float:
    """The most ``rho`` a window that spent ``(xi, rho)`` may still take without its lifetime
    ``epsilon`` (at ``delta``) passing ``cap``: bisection on :func:`epsilon_of`, to a relative 1e-6.

    Examples
    --------
    >>> r = rho_room(0.0, 0.0, 1.0, 1e-6)
    >>> abs(r - rho_for_epsilon(1.0, 1e-6)) < 1e-6 * r
    True
    """
    if _epsilon(rho, xi, delta) >= cap:
        return 0.0
    low, high = 0.0, rho_for_epsilon(cap, delta)  # epsilon_of(rho + r, xi) >= epsilon_of(r, 0)
    while high - low > 1e-6 * high:
        mid = (low + high) / 2
        if _epsilon(rho + mid, xi, delta) <= cap:
            low = mid
        else:
            high = mid
    return low


def _remaining(rho: float, xi: float, cap: float, delta: float) -> float:
    """The ``epsilon`` (at ``delta``) of the most a new job may still spend on such a window."""
    return _epsilon(rho_room(rho, xi, cap, delta), 0.0, delta)


def budget_of(entries: Sequence[LedgerEntry], gateways: Iterable[str], cap: float,
              delta: float) -> list[GatewayBudget]:
    """Per gateway (those given and those in ``entries``, in order): its most-used window and
    what is left there, under ``cap`` at ``delta``.

    Examples
    --------
    >>> e = LedgerEntry("j1", 1, ("gw-1",), None, 100, rho_for_epsilon(4.0, 1e-6), 0.0, 1e-6, 4.0, "spent")
    >>> [(b.gateway, round(b.spent_epsilon, 3), b.fresh_since_us) for b in budget_of([e], ["gw-2"], 10.0, 1e-6)]
    [('gw-1', 4.0, 100), ('gw-2', 0.0, None)]
    """
    names = sorted(set(gateways) | {g for e in entries for g in e.gateways})
    out = []
    for gateway in names:
        segments = gateway_segments(entries, gateway, delta)
        worst = max(segments, key=lambda s: s.epsilon, default=None)
        rho, xi = (worst.rho, worst.xi) if worst else (0.0, 0.0)
        running = tuple(sorted({e.job_id for e in entries if e.open and gateway in e.gateways}))
        out.append(GatewayBudget(gateway, worst.epsilon if worst else 0.0, _remaining(rho, xi, cap, delta),
                                 segments[-1].until_us if segments else None, running, segments))
    return out


def check_job(entries: Sequence[LedgerEntry], job: PlannedJob, known: Iterable[str], cap: float,
              delta: float) -> None:
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
        raise BudgetExceeded(f"refused: a job of epsilon {job.epsilon:g} (delta {job.delta:g}) is epsilon {lone:.4g} "
                             f"at the ledger's delta {delta:g}, above the cap of {cap:g} on its own: lower its "
                             "dp_epsilon")
    scope = sorted(set(job.gateways) if job.gateways is not None else
                   set(known) | {g for e in entries for g in e.gateways})
    since = _LOW if job.since_us is None else job.since_us
    until = _HIGH if job.until_us is None else job.until_us
    over: list[tuple[str, Segment, float]] = []  # gateway, segment, epsilon with the job
    left: list[tuple[float, str]] = []  # per covered segment: what a job may still spend there, gateway
    fresh: list[int] = []  # per gateway with a window over the cap: from when its windows would pass
    for gateway in scope:
        segments = gateway_segments(entries, gateway, delta)
        hit = [(s, _epsilon(s.rho + rho, s.xi, delta)) for s in segments
               if (_LOW if s.since_us is None else s.since_us) < until
               and (_HIGH if s.until_us is None else s.until_us) > since]
        left += [(_remaining(s.rho, s.xi, cap, delta), gateway) for s, _ in hit]
        failing = [(s, eps) for s, eps in hit if eps > cap]
        if failing:
            over += [(gateway, s, eps) for s, eps in failing]
            last = failing[-1][0].until_us
            fresh.append(_HIGH if last is None else last)
    if not over:
        return
    gateway, segment, eps = max(over, key=lambda o: (o[2], o[0]))
    least, least_gateway = min(left)
    start = max(fresh)
    if start == _HIGH:
        runner = sorted({e.job_id for e in entries if e.open})
        when = (f"every window to come is held by the running job {', '.join(runner)}: new windows have budget from "
                "when it ends")
    else:
        start = -(-start // 1_000_000) * 1_000_000  # to the second after, as the suggestion is written
        when = f"windows starting at or after {iso_us(start)} have the full budget: give the job since={iso_us(start)}"
    until_text = "now on" if segment.until_us is None else iso_us(segment.until_us)
    raise BudgetExceeded(f"refused: a job of epsilon {job.epsilon:g} (delta {job.delta:g}) would take {gateway}'s "
                         f"windows from {iso_us(segment.since_us)} to {until_text} to epsilon {eps:.4g} over their "
                         f"lifetime, above the cap of {cap:g} (delta {delta:g}); left there: epsilon "
                         f"{least:.4g} ({least_gateway}); {when}")

