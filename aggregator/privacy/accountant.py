"""The privacy accountant of a training: which noise each release needs, and what it spent.

Every release is a fleet sum with distributed Skellam noise (``shared.differential_privacy``).
Its guarantee is approximate zero-concentrated DP: a sum whose one-window change has L2 norm
``l2`` and L1 norm ``l1`` (in the lattice units the gateways sum), released with ``Skellam(mu)``
noise, is ``(xi, rho)``-zCDP with ``rho = l2**2 / (2 mu)`` and ``xi = 3 l1 / (4 mu)`` (Agarwal,
Kairouz, Liu 2021, the Skellam mechanism's RDP bound, taking its alpha-free term). Releases
compose by adding ``rho`` and ``xi``; Google's ``dp-accounting`` (its RDP accountant, which takes
``ZCDpEvent``) converts the total to ``(epsilon, delta)``. A training is given ``epsilon`` and
``delta`` and shares ``rho`` between kinds of release (opening, splits, leaves):
:meth:`PrivacyBudget.mu` is the noise one release of a kind needs, charging its ``xi`` as if it
were ``rho`` (safe: Renyi divergences of order ``alpha >= 1`` grow by ``xi + alpha rho``). A
budget made under :func:`~aggregator.privacy.spending.recording_releases` reports every release to
that log before it goes out (``spending``: the server's write-ahead ledger).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .spending import ReleaseLog, current_log

__all__ = ["PrivacyBudget", "PrivacySpent", "Release", "epsilon_of", "rho_for_epsilon", "skellam_release"]


@dataclass(frozen=True)
class Release:
    """One release's cost: ``(xi, rho)``-zCDP per window."""

    kind: str
    rho: float
    xi: float = 0.0


def skellam_release(kind: str, l2: float, l1: float, mu: float, *, answered: int = 1, asked: int = 1) -> Release:
    """The cost of a sum with L2/L1 sensitivity ``l2``/``l1`` and ``Skellam(mu)`` noise, of which
    only ``answered`` of the ``asked`` gateways' shares arrived (the noise is ``Skellam(mu *
    answered / asked)``).

    Examples
    --------
    >>> skellam_release("leaves", l2=2.0, l1=4.0, mu=100.0)
    Release(kind='leaves', rho=0.02, xi=0.03)
    """
    if not (mu > 0 and 1 <= answered <= asked):
        raise ValueError("a release needs mu > 0 and 1 <= answered <= asked")
    effective = mu * answered / asked
    return Release(kind, l2 * l2 / (2.0 * effective), 3.0 * l1 / (4.0 * effective))


def epsilon_of(rho: float, xi: float, delta: float) -> float:
    """``epsilon`` of ``(xi, rho)``-zCDP at ``delta`` (dp-accounting's RDP accountant).

    Examples
    --------
    >>> round(epsilon_of(0.0175, 0.0, 1e-6), 3)
    0.838
    """
    if rho < 0 or xi < 0 or not 0 < delta < 1:
        raise ValueError("rho and xi must be >= 0 and delta in (0, 1)")
    if rho == 0 and xi == 0:
        return 0.0
    try:  # the aggregator's extra: a gateway, or a test of the gateway's side, imports this module without it
        import dp_accounting
        from dp_accounting.rdp import RdpAccountant
    except ImportError:
        raise ImportError(
            "differential privacy accounting needs dp-accounting: pip install 'wheelfed[aggregator]'"
        ) from None
    accountant = RdpAccountant()
    accountant.compose(dp_accounting.ZCDpEvent(rho, xi))
    return float(accountant.get_epsilon(delta))


def rho_for_epsilon(epsilon: float, delta: float) -> float:
    """The largest ``rho`` whose ``rho``-zCDP is ``(epsilon, delta)``-DP (bisection on
    :func:`epsilon_of`, to a relative 1e-6).

    Examples
    --------
    >>> round(rho_for_epsilon(1.0, 1e-6), 4)
    0.0244
    """
    if not (epsilon > 0 and math.isfinite(epsilon)) or not 0 < delta < 1:
        raise ValueError(f"epsilon must be finite and > 0 and delta in (0, 1), got {epsilon}, {delta}")
    low, high = 0.0, 1.0
    while epsilon_of(high, 0.0, delta) < epsilon:
        low, high = high, high * 2
    while high - low > 1e-6 * high:
        mid = (low + high) / 2
        if epsilon_of(mid, 0.0, delta) <= epsilon:
            low = mid
        else:
            high = mid
    return low


@dataclass(frozen=True)
class PrivacySpent:
    """What a training spent per window: ``(xi, rho)``-zCDP, i.e. ``(epsilon, delta)``-DP."""

    epsilon: float
    delta: float
    rho: float
    xi: float
    releases: int
    by_kind: dict[str, float]

    def metadata(self) -> dict[str, float]:
        """The model metadata's ``dp_*`` entries."""
        return {
            "dp_epsilon": self.epsilon,
            "dp_delta": self.delta,
            "dp_rho": self.rho,
            "dp_xi": self.xi,
            "dp_releases": self.releases,
        }


@dataclass
class PrivacyBudget:
    """A training's ``(epsilon, delta)`` budget, shared between kinds of release.

    ``shares`` maps a kind to its fraction of the budget's ``rho`` and ``releases`` to the most
    releases of that kind the training makes; every release of a kind gets the same noise.

    Examples
    --------
    >>> b = PrivacyBudget(1.0, 1e-6, shares={"splits": 0.5, "leaves": 0.5}, releases={"splits": 4, "leaves": 1})
    >>> mu = b.mu("leaves", l2=1.0, l1=1.0)
    >>> b.spend(skellam_release("leaves", 1.0, 1.0, mu))
    >>> b.spent().epsilon < 1.0
    True
    """

    epsilon: float
    delta: float
    shares: dict[str, float]
    releases: dict[str, int]
    spent_releases: list[Release] = field(default_factory=list)
    #: Where the releases are recorded ahead of their requests (the log installed when the
    #: budget was made, if any).
    log: ReleaseLog | None = field(default_factory=current_log, compare=False, repr=False)

    def __post_init__(self) -> None:
        if set(self.shares) != set(self.releases):
            raise ValueError("every kind of release needs a share and a count")
        if any(s <= 0 for s in self.shares.values()) or abs(sum(self.shares.values()) - 1) > 1e-9:
            raise ValueError(f"the shares must be > 0 and add up to 1, got {self.shares}")
        if any(n < 1 for n in self.releases.values()):
            raise ValueError("every kind of release needs a count >= 1")
        self.rho = rho_for_epsilon(self.epsilon, self.delta)

    def mu(self, kind: str, l2: float, l1: float) -> float:
        """The Skellam variance the next release of ``kind`` with L2/L1 sensitivity ``l2``/``l1``
        needs: its ``rho + xi`` is what is left of the kind's share over the releases of that
        kind still to come, so a release that was not made (a node too small to split) leaves
        its budget to the next ones. Choosing each release's noise from earlier outputs with the
        total fixed is sound for zCDP (a Renyi filter, Feldman and Zrnic 2021).

        With a ``log``, the release is recorded there at this cost (every asked gateway
        answering) before the noise is returned, i.e. before its requests can go out."""
        mu = self.planned_mu(kind, l2, l1)
        if self.log is not None and mu > 0:
            self.log.asking(self, skellam_release(kind, l2, l1, mu))
        return mu

    def planned_mu(self, kind: str, l2: float, l1: float) -> float:
        """What :meth:`mu` returns for the next release of ``kind``, without recording it."""
        made = [r for r in self.spent_releases if r.kind == kind]
        left = self.releases[kind] - len(made)
        if left < 1:
            raise ValueError(f"the training planned {self.releases[kind]} {kind} releases and makes more")
        remaining = self.rho * self.shares[kind] - sum(r.rho + r.xi for r in made)
        return (l2 * l2 / 2.0 + 0.75 * l1) / max(remaining / left, 1e-300)

    def spend(self, release: Release) -> None:
        """Account ``release`` (decoded; its cost with the gateways that answered)."""
        self.spent_releases.append(release)
        if self.log is not None:
            self.log.spent(self, release)

    def spent(self) -> PrivacySpent:
        rho = sum(r.rho for r in self.spent_releases)
        xi = sum(r.xi for r in self.spent_releases)
        by_kind: dict[str, float] = {}
        for r in self.spent_releases:
            by_kind[r.kind] = by_kind.get(r.kind, 0.0) + r.rho
        return PrivacySpent(epsilon_of(rho, xi, self.delta), self.delta, rho, xi, len(self.spent_releases), by_kind)
