"""The privacy ledger's cost: per-gateway budgets (what ``GET /api/privacy`` computes) and the
cap check a private job's submission runs, on ledgers of nightly retraining (each job covers a
week of windows on half the gateways, rho drawn per job, a small xi).

    python -m benchmarks.bench_privacy_ledger

Prints a Markdown table: entries, gateways, milliseconds for the budgets (first call, then again
with dp-accounting's answers cached), with the segments too (``?detail=true``), and for one check.
"""

from __future__ import annotations

import time

import numpy as np

from aggregator.privacy.ledger import BudgetExceeded, LedgerEntry, PlannedJob, budget_of, check_job

DAY_US = 86_400_000_000
T0_US = 1_795_000_000_000_000
SIZES = ((100, 20), (1000, 50), (3000, 100))


def ledger(n_entries: int, n_gateways: int, seed: int = 0) -> tuple[list[LedgerEntry], list[str]]:
    rng = np.random.default_rng(seed)
    gateways = [f"gw-{i}" for i in range(n_gateways)]
    entries = []
    for k in range(n_entries):
        since = T0_US + k * DAY_US // 4
        chosen = tuple(rng.choice(gateways, size=max(1, n_gateways // 2), replace=False))
        entries.append(
            LedgerEntry(
                f"job-{k}",
                1,
                chosen,
                since,
                since + 7 * DAY_US,
                float(rng.uniform(0.01, 0.05)),
                float(rng.uniform(0, 1e-4)),
                1e-6,
                1.0,
                "spent",
            )
        )
    return entries, gateways


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


def main() -> None:
    print("| entries | gateways | budgets, first (ms) | budgets, again (ms) | with segments (ms) | one check (ms) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n_entries, n_gateways in SIZES:
        entries, gateways = ledger(n_entries, n_gateways)
        first = timed(lambda: budget_of(entries, gateways, 10.0, 1e-6, segments=False))
        again = timed(lambda: budget_of(entries, gateways, 10.0, 1e-6, segments=False))
        detail = timed(lambda: budget_of(entries, gateways, 10.0, 1e-6))

        def check() -> None:
            try:
                check_job(entries, PlannedJob(None, None, None, 4.0, 1e-6), gateways, 10.0, 1e-6)
            except BudgetExceeded:
                pass

        print(f"| {n_entries} | {n_gateways} | {first:.0f} | {again:.0f} | {detail:.0f} | {timed(check):.0f} |")


if __name__ == "__main__":
    main()
