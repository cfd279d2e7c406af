"""Differential privacy on the aggregator: the accountant that calibrates and adds up the noise of
a training's releases (``accountant``)."""

from .accountant import PrivacyBudget, PrivacySpent, Release, epsilon_of, rho_for_epsilon, skellam_release

__all__ = ["PrivacyBudget", "PrivacySpent", "Release", "epsilon_of", "rho_for_epsilon", "skellam_release"]
