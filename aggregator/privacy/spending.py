"""Write-ahead spending: every private release is recorded as spent before its request goes out.

A server that charges an attempt of a private job for what it released (not its whole plan)
must know what it released even when the process dies mid-release. The strategies ask
:meth:`~aggregator.privacy.PrivacyBudget.mu` for a release's noise before they build its requests
and call :meth:`~aggregator.privacy.PrivacyBudget.spend` once its sum is decoded; a budget made
while a :class:`ReleaseLog` is installed (:func:`recording_releases`, a context variable the
server sets around a job's fit) reports both. The log's running total is the releases decoded
(at their actual cost) plus, per budget and kind, the one asked for and not decoded yet (at its
cost with the fewest answers a round accepts, ``answered_fraction``: fewer noise shares cost
more), and it is written (``write``) before ``mu`` returns -- so a release whose replies never
came, or a crash between the record and the send or between the decoding and ``spend``, is
counted: the total over-counts by at most one release per kind. (A sum decoded from fewer
gateways than a round's quorum, after some were excluded as liars, costs more than that record
until its ``spend`` replaces it.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .accountant import Release

__all__ = ["Released", "ReleaseLog", "current_log", "recording_releases"]


@dataclass(frozen=True)
class Released:
    """What an attempt has released so far, the releases in flight counted: ``(xi, rho)``-zCDP
    per window and how many releases."""

    rho: float
    xi: float
    releases: int


class ReleaseLog:
    """The running total of one attempt's releases, written ahead of every release.

    ``write(released)`` is called with the new total whenever it changes; it must make the total
    durable before it returns (an exception stops the release: the strategy never sends it).
    ``answered_fraction`` is the smallest share of the asked gateways whose noise a decoded sum
    may carry (the job's ``min_fraction``): a release in flight is recorded at that cost.

    Examples
    --------
    >>> from aggregator.privacy import Release
    >>> seen = []
    >>> log = ReleaseLog(seen.append)
    >>> budget = object()
    >>> log.asking(budget, Release("splits", 0.5, 0.25))  # recorded before it goes out
    >>> log.asking(budget, Release("splits", 0.5, 0.25))  # asked again, not sent twice: no change
    >>> log.spent(budget, Release("splits", 0.5, 0.5))  # decoded with fewer answers: its actual cost
    >>> seen
    [Released(rho=0.5, xi=0.25, releases=1), Released(rho=0.5, xi=0.5, releases=1)]
    """

    def __init__(self, write: Callable[[Released], None], *, answered_fraction: float = 1.0) -> None:
        if not 0.0 < answered_fraction <= 1.0:
            raise ValueError(f"answered_fraction must lie in (0, 1], got {answered_fraction}")
        self._write = write
        self._worst = 1.0 / answered_fraction
        self._spent: list[Release] = []
        self._pending: dict[tuple[int, str], Release] = {}
        self._last: Released | None = None

    def asking(self, budget: object, release: Release) -> None:
        """``budget`` is about to ask for ``release`` (its cost with every asked gateway
        answering): record it first, at its cost with the fewest answers accepted."""
        worst = replace(release, rho=release.rho * self._worst, xi=release.xi * self._worst)
        self._pending[(id(budget), release.kind)] = worst
        self._flush()

    def spent(self, budget: object, release: Release) -> None:
        """``budget`` decoded ``release`` (its actual cost): it replaces the one in flight."""
        self._pending.pop((id(budget), release.kind), None)
        self._spent.append(release)
        self._flush()

    def total(self) -> Released:
        """The releases decoded plus those in flight."""
        every = [*self._spent, *self._pending.values()]
        return Released(sum(r.rho for r in every), sum(r.xi for r in every), len(every))

    def _flush(self) -> None:
        total = self.total()
        if total != self._last:
            self._write(total)
            self._last = total


_current: ContextVar[ReleaseLog | None] = ContextVar("wheelfed_release_log", default=None)


def current_log() -> ReleaseLog | None:
    """The log a budget made now reports to (None: none installed)."""
    return _current.get()


@contextmanager
def recording_releases(log: ReleaseLog) -> Iterator[ReleaseLog]:
    """Install ``log`` for the budgets made inside the block (in this thread or task)."""
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)
