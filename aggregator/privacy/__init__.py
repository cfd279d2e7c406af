"""Differential privacy on the aggregator: the accountant that calibrates and adds up the noise of
a training's releases (``accountant``), the write-ahead record of what a running training has
released (``spending``) and the ledger of every private job's spending per window (``ledger``)."""

from .accountant import PrivacyBudget, PrivacySpent, Release, epsilon_of, rho_for_epsilon, skellam_release
from .spending import Released, ReleaseLog, recording_releases

__all__ = [
    "PrivacyBudget",
    "PrivacySpent",
    "Release",
    "ReleaseLog",
    "Released",
    "epsilon_of",
    "recording_releases",
    "rho_for_epsilon",
    "skellam_release",
]
