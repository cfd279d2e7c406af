"""The demo's report as text: a one-screen summary for the terminal, and the full text.

:func:`summary_lines` is what the demo prints at its end, at most :data:`SCREEN_LINES` lines of
at most :data:`SCREEN_COLUMNS` columns: the decisions and the headline numbers (each model's
held-out accuracy beside chance and the local-only baseline, the privacy budget and why that
epsilon, bytes per gateway, what runs where), the dashboard of the ``wheelfed server`` the demo
ran (its jobs, models with per-gateway scores, deployments, promotions and privacy ledger as
tables and charts) and where the full report goes. :func:`detail_lines` is that full report as
text -- every table, reason and byte count -- which ``--report`` writes into the JSON as
``details``. Both are pure functions of a :class:`aggregator.demo.report.DemoReport`.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from typing import TYPE_CHECKING

from .decisions import UNNAMED, DeploymentDecision, bytes_explanation
from .epsilon import DEMO_DELTA
from .training import FIRST_TRAINING

if TYPE_CHECKING:
    from .events import PrivacySettings
    from .report import DemoReport, Scoring

__all__ = [
    "SCREEN_COLUMNS",
    "SCREEN_LINES",
    "decision_line",
    "detail_lines",
    "epsilon_lines",
    "personal_lines",
    "privacy_line",
    "summary_lines",
]

#: The one-screen summary's most lines ...
SCREEN_LINES = 30
#: ... and columns.
SCREEN_COLUMNS = 100
TITLE, DETAILS_TITLE = "=== WheelFed fleet demo: summary ===", "=== WheelFed fleet demo: full report ==="
#: The accuracy table's columns on the screen: name, step, windows, accuracy, chance, local-only.
_COLUMNS = (46, 14, 8, 8, 7, 10)
_FEDGA_ROW = "FedGA-Tree, each gateway its own tree"
_DASHBOARD_HOLDS = "jobs, models and per-gateway scores, deployments, promotions, privacy ledger"


def _f(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def _row(cells: list[str]) -> str:
    """A Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def _some(items: list[str], most: int = 4) -> str:
    """A list in a few words: its first ``most`` items, then how many more."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _wrapped(text: str) -> list[str]:
    """A sentence on the screen: wrapped at its width, continuation lines indented."""
    return textwrap.wrap(text, SCREEN_COLUMNS, subsequent_indent="  ", break_on_hyphens=False)


def _columns(cells: list[str]) -> str:
    """A row of the screen's accuracy table: name and step left-aligned, the numbers right."""
    name, *numbers = cells
    width, *widths = _COLUMNS
    step, *values = numbers
    return (
        f"{name[:width]:<{width}} {step:<{widths[0]}} " + " ".join(f"{v:>{w}}" for v, w in zip(values, widths[1:]))
    ).rstrip()


# -- the one-screen summary -------------------------------------------------------------------


def summary_lines(r: DemoReport) -> list[str]:
    """The demo's last screen (module docstring)."""
    return [
        TITLE,
        f"{r.gateways} gateways (real seglearn sessions, labelled only at the start), broker {r.broker}, "
        f"{r.elapsed_s:.0f} s",
        "",
        *_accuracy_table(r),
        "",
        *_decisions(r),
        *_outcome(r),
        *_privacy(r),
        *_traffic(r),
        *_pointers(r),
    ]


def _local_only(r: DemoReport, step: str) -> float:
    """The local-only baseline's pooled accuracy in a step (NaN: none)."""
    return next((s.accuracy for s in r.scorings if s.step == step and s.is_local_only), math.nan)


def _accuracy_table(r: DemoReport) -> list[str]:
    """Every model's held-out accuracy with chance and the local-only baseline beside it (the
    FedGA trees after the first training's models, the centralized ones without baselines)."""
    rows = [
        _columns(
            [
                sc.short or sc.model,
                sc.step,
                str(sc.windows),
                _f(sc.accuracy),
                _f(sc.majority_rate),
                _f(_local_only(r, sc.step) if sc.windows_per_gateway else math.nan),
            ]
        )
        for sc in r.scorings
        if not sc.is_local_only
    ]
    fedga = _fedga_row(r)
    if fedga is not None:
        rows.insert(sum(sc.step == FIRST_TRAINING and not sc.is_local_only for sc in r.scorings), fedga)
    return [
        f"held-out accuracy (each gateway's last {r.holdout_fraction:.0%} of labels at each step); chance = the "
        "majority class",
        _columns(["model", "step", "windows", "accuracy", "chance", "local-only"]),
        *rows,
    ]


def _fedga_row(r: DemoReport) -> str | None:
    """Every gateway's own FedGA tree, pooled over the windows each was scored on, beside the
    local-only models on the same gateways' windows and the first training's chance (when its
    models were scored on as many windows)."""
    scored = [d for d in r.personal if d.tree and d.tree_windows]
    if not scored:
        return None
    n = sum(d.tree_windows for d in scored)
    accuracy = sum(d.tree_accuracy * d.tree_windows for d in scored) / n
    local = sum(d.local_only * d.windows for d in scored) / sum(d.windows for d in scored)
    first = next((s for s in r.scorings if s.step == FIRST_TRAINING and s.windows == n and not s.is_local_only), None)
    return _columns(
        [_FEDGA_ROW, FIRST_TRAINING, str(n), _f(accuracy), _f(first.majority_rate if first else None), _f(local)]
    )


def decision_line(d: DeploymentDecision) -> str:
    """A step's decision with its numbers, in a line (its ``reason`` says it in full): the best
    candidate against the bars, or against the deployed model re-scored when the server's
    promotion rule decided."""
    outcome = (
        f"deployed {d.deployed_as or d.deploy}"
        if d.deploy
        else "nothing deployed" + (f" (the gateways keep {d.kept})" if d.kept else "")
    )
    ranked = sorted(d.candidates, key=lambda n: -d.candidates[n] if not math.isnan(d.candidates[n]) else math.inf)
    best = d.deploy or (ranked[0] if ranked else None)
    if best is None:
        return (
            f"{d.step}: {outcome} -- no model trained ("
            + "; ".join(f"{name}: {why}" for name, why in d.failures.items())
            + ")"
        )
    bars = (
        f"the deployed re-scored {d.deployed_rescored:.3f}"
        if d.deployed_rescored is not None
        else f"local-only {_f(d.local_only)}, chance {_f(d.chance)}"
    )
    return f"{d.step}: {outcome} -- {best} {_f(d.candidates.get(best))} vs {bars}"


def _fedga_line(r: DemoReport) -> list[str]:
    """Where a gateway's own FedGA tree replaced the fleet's model (its accuracy vs the fleet
    model's there), and the worst-served gateways that kept the fleet's model."""
    if r.personal_job is None:
        return []
    deployed = [f"{d.gateway} ({d.tree_accuracy:.3f} vs {d.federated:.3f})" for d in r.personal if d.deploy]
    kept = [d.gateway for d in r.personal if d.worst_served and not d.deploy]
    if not deployed and not kept:
        return _wrapped(
            "FedGA-Tree: the federated model beats every gateway's local-only model there; no gateway "
            "needs its own tree"
        )
    parts = ([f"own tree deployed to {_some(deployed, 3)}"] if deployed else []) + (
        [f"served worst but kept the fleet's model: {_some(kept)}"] if kept else []
    )
    return _wrapped("FedGA-Tree: " + "; ".join(parts))


def _decisions(r: DemoReport) -> list[str]:
    """The first training's decision, the FedGA trees', then the retraining's."""
    if not r.decisions:
        return ["decisions: none (no training step ran)"]
    lines = _wrapped(decision_line(r.decisions[0])) + _fedga_line(r)
    for d in r.decisions[1:]:
        lines += _wrapped(decision_line(d))
    return lines


def _outcome(r: DemoReport) -> list[str]:
    """What runs where at the end, the killed gateway, live vs offline and who sat out."""
    killed = (
        f"{r.killed} killed, {'rejoined' if r.killed_rejoined else 'did NOT rejoin'}"
        if r.killed
        else "no gateway killed"
    )
    if r.deployed:
        running = Counter(g.model or "-" for g in r.per_gateway.values()).most_common()
        models = _some(
            [
                f"{m} on {n} gateway{'s' if n != 1 else ''}" if k == 0 else f"{m} on {n}"
                for k, (m, n) in enumerate(running)
            ],
            3,
        )
        each = "each" if r.all_received_model else "NOT each"
        lines = _wrapped(f"at the end: {models}, {each} the model last deployed to it; {killed}")
    else:
        lines = _wrapped(f"at the end: no model deployed, the gateways ran without one; {killed}")
    live = (
        f"live == offline prediction on {r.live_agreement:.1%} of {r.live_windows} windows"
        if r.live_windows
        else "no live predictions"
    )
    gateways = {s.gateway for s in r.sat_out}
    names = sorted(gateways - {UNNAMED}) + (["gateways the server did not name"] if UNNAMED in gateways else [])
    sat = (
        f"sat out (part of) {len({s.job for s in r.sat_out})} job(s): {_some(names)} (the report says why)"
        if r.sat_out
        else "no gateway sat out a step"
    )
    return lines + _wrapped(f"{live}; {sat}")


def _privacy(r: DemoReport) -> list[str]:
    """The budget spent and why that epsilon, or what the aggregator saw without differential privacy."""
    from .epsilon import reason

    settings = r.privacy
    if not settings.secure_aggregation:
        return _wrapped(
            f"privacy: secure aggregation OFF -- {r.secure_aggregation_note or 'disabled'}; no differential privacy"
        )
    eps = settings.epsilons
    if not eps:
        return _wrapped(f"privacy: {settings.protocol} protocol under secure aggregation, without differential privacy")
    ledger = r.server.privacy
    composed = (
        f"; the most-used window ({ledger.spent_gateway}) has spent epsilon {ledger.spent_epsilon:.3g} of the "
        f"server's cap {ledger.epsilon_cap:g}"
        if ledger.jobs
        else ""
    )
    spent = ", ".join(sorted({f"{e:g}" for e in eps.values()}))
    lines = _wrapped(
        f"privacy: epsilon {spent} per window per training (delta {ledger.delta or DEMO_DELTA:g}; "
        f"differential privacy under secure aggregation){composed}"
    )
    for e in sorted(set(eps.values())):
        lines += _wrapped("  " + reason(e))
    return lines


def _traffic(r: DemoReport) -> list[str]:
    """The aggregator's bytes per gateway against the raw data, or that the server does not count them."""
    if not r.traffic_bytes:
        return _wrapped(
            f"bytes: not measured (the server's /metrics has no wheelfed_mqtt_bytes_total); the raw "
            f"sensor data ({r.raw_sensor_bytes / 1e6:.1f} MB) never left the gateways"
        )
    ratio = r.traffic_bytes / r.raw_sensor_bytes if r.raw_sensor_bytes else math.nan
    return _wrapped(
        f"bytes per gateway: {r.traffic_bytes / max(r.gateways, 1) / 1e6:.1f} MB through the aggregator, "
        f"{ratio:.1f}x the raw sensor data (kept on the gateways)"
    )


def _pointers(r: DemoReport) -> list[str]:
    """Where the rest is: the server's dashboard and the JSON report."""
    lines = []
    if r.dashboard_url:
        state = "running until Ctrl-C" if r.keep_running else "stopped with the demo; --keep-running keeps it up"
        lines += _wrapped(f"dashboard ({_DASHBOARD_HOLDS}; {state}): {r.dashboard_url}")
    where = r.report_path or "--report PATH writes it as JSON"
    return lines + _wrapped(f"full report (every table, reason and byte count): {where}")


# -- the full text (the JSON report's "details") ----------------------------------------------


def detail_lines(r: DemoReport) -> list[str]:
    """Every table and explanation of the report, as text."""
    return [
        DETAILS_TITLE,
        "",
        f"{r.gateways} gateways (real seglearn sessions, labelled only at the start), broker "
        f"{r.broker}, {r.elapsed_s:.0f} s in all",
        "",
        f"Every score is on held-out windows: the last {r.holdout_fraction:.0%} of each gateway's labelled "
        "windows when the step ran. Chance is the majority-class rate (always guessing the most common held-out "
        "activity).",
        "",
        *_scoring_table(r.scorings),
        "",
        *_gateway_table(r),
        "",
        *_decision_reasons(r),
        *personal_lines(r),
        *_sat_out(r),
        *_bytes(r),
        *r.server.lines(),
        f"privacy: {privacy_line(r.privacy, r.secure_aggregation_note)}",
        *epsilon_lines(r.privacy),
        *_fedga_privacy(r),
        *_live(r),
    ]


def _scoring_table(scorings: list[Scoring]) -> list[str]:
    lines = [
        _row(
            [
                "model",
                "step",
                "held-out windows",
                "accuracy (pooled)",
                "macro-F1 (pooled)",
                "accuracy (mean over gateways)",
                "chance",
            ]
        ),
        _row(["---", "---", "---:", "---:", "---:", "---:", "---:"]),
    ]
    for sc in scorings:
        per = list(sc.accuracy_per_gateway.values())
        lines.append(
            _row(
                [
                    sc.model,
                    sc.step,
                    str(sc.windows),
                    _f(sc.accuracy),
                    _f(sc.macro_f1),
                    _f(sum(per) / len(per)) if per else "-",
                    _f(sc.majority_rate),
                ]
            )
        )
    return lines


def _gateway_table(r: DemoReport) -> list[str]:
    lines = [
        _row(
            [
                "gateway",
                "windows",
                "labelled",
                "held-out windows (per step)",
                "live predictions",
                "local-only acc.",
                "federated acc. (first training)",
                "model",
            ]
        ),
        _row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]),
    ]
    for client, g in r.per_gateway.items():
        held = " / ".join(str(n) for n in g.held_out.values()) or "-"
        lines.append(
            _row(
                [
                    client,
                    str(g.windows),
                    str(g.labelled),
                    held,
                    str(g.predictions),
                    _f(r.local_only.get(client, math.nan)),
                    _f(g.federated_accuracy),
                    str(g.model or "-"),
                ]
            )
        )
    return lines


def _decision_reasons(r: DemoReport) -> list[str]:
    lines = [
        "decisions (first training: the demo deploys only above the local-only baseline and chance; retraining: "
        "the server's promotion rule, beside the same bars):"
    ]
    for d in r.decisions:
        outcome = f"deployed {d.deployed_as}" if d.deployed_as else "nothing deployed"
        lines.append(f"  {d.step}: {outcome} -- {d.reason}")
    return lines + [f"  {sc.model}: {sc.note}" for sc in r.scorings if sc.note]


def personal_lines(r: DemoReport) -> list[str]:
    """The third contender per gateway: FedGA tree vs the federated and local-only models,
    each on that gateway's held-out windows, and what was deployed where."""
    if r.personal_job is None:
        return []
    job = r.personal_job
    st = job.settings
    lines = [
        f"\nthird contender: FedGA-Tree (job {job.job_id}, every gateway taking part: {st.generations} "
        f"generations -- the paper's Table II uses 100 --, population {st.population_size}, epsilon "
        f"{st.epsilon}, depth range {st.d_min}..{st.d_max}), every gateway its own tree, vs "
        f"{job.federated} and the gateway's local-only model, on that gateway's held-out windows "
        f"(the job took {job.elapsed_s:.0f} s):",
        _row(
            [
                "gateway",
                "held-out windows",
                "federated acc.",
                "local-only acc.",
                "FedGA tree acc.",
                "FedGA decision nodes",
                "served worst",
                "FedGA tree deployed",
            ]
        ),
        _row(["---", "---:", "---:", "---:", "---:", "---:", "---", "---"]),
    ]
    for d in r.personal:
        lines.append(
            _row(
                [
                    d.gateway,
                    str(d.windows),
                    _f(d.federated),
                    _f(d.local_only),
                    _f(d.tree_accuracy),
                    str(d.decision_nodes) if d.tree else "-",
                    "yes" if d.worst_served else "no",
                    d.tree if d.deploy else "no",
                ]
            )
        )
    lines += [f"  {d.gateway}: {d.reason}" for d in r.personal if d.worst_served]
    if not any(d.worst_served for d in r.personal):
        lines.append(
            "  the federated model beats every gateway's local-only model there: no gateway needs its own tree"
        )
    for gateway, tree in r.personal_deployed.items():
        facts = r.per_gateway.get(gateway)
        running = (facts.model if facts else "") or "-"
        lines.append(
            f"  {gateway} runs {running} at the end"
            + ("" if running == tree else f" (not {tree}: a later fleet-wide rollout replaced it)")
        )
    return lines


def _sat_out(r: DemoReport) -> list[str]:
    if not r.sat_out:
        return ["gateways that sat out: none (every gateway answered every round of every training and scoring)"]
    return ["gateways that sat out:", *(f"  {s.job}: {s.gateway} {s.reason}" for s in r.sat_out)]


def _bytes(r: DemoReport) -> list[str]:
    if not r.traffic_bytes:
        return [
            f"raw sensor data: {r.raw_sensor_bytes / 1e6:.1f} MB ({r.raw_samples:,} samples x {r.raw_channels} "
            f"channels as recorded, every gateway's whole session) and the windows' feature matrix "
            f"({r.raw_feature_bytes / 1e6:.1f} MB as float32) never left the gateways; the bytes the server "
            "exchanged are not broken down here (its /metrics has no wheelfed_mqtt_bytes_total)"
        ]
    return [
        *bytes_explanation(
            r.traffic_by_step,
            total=r.traffic_bytes,
            raw_sensor_bytes=r.raw_sensor_bytes,
            raw_samples=r.raw_samples,
            channels=r.raw_channels,
            gateways=r.gateways,
            secure=r.privacy.secure_aggregation,
        ),
        f"(the windows' feature matrix would be {r.raw_feature_bytes / 1e6:.1f} MB as float32)",
    ]


def _fedga_privacy(r: DemoReport) -> list[str]:
    if r.personal_job is None:
        return []
    return [
        f"privacy of FedGA-Tree: each gateway sent the aggregator, in the clear, its sample count with Laplace "
        f"noise (epsilon {r.personal_job.settings.epsilon}), its cross-validated depth, its local tree's shape "
        "without thresholds or leaf values, and its fitness of every candidate shape per generation; the "
        "thresholds and leaf values fitted to its windows stayed on the gateway until the end, when it sent its "
        "one chosen tree (the model the server registers for it)"
    ]


def _live(r: DemoReport) -> list[str]:
    lines = [
        f"live recognition: {r.live_windows} windows; live == offline prediction on {r.live_agreement:.1%} (max "
        f"probability difference {r.live_max_probability_diff:.1e})"
        if r.live_windows
        else "live recognition: none (no model was deployed)"
    ]
    if r.killed:
        lines.append(
            f"{r.killed} was killed and restarted: "
            f"{'rejoined and trained in the next round' if r.killed_rejoined else 'did NOT rejoin'}"
        )
    if r.deployed:
        lines.append(f"every gateway runs the model last deployed to it: {'yes' if r.all_received_model else 'NO'}")
    else:
        lines.append("no model was deployed (see the decisions): the gateways ran without one")
    return lines


# -- privacy sentences ------------------------------------------------------------------------


def privacy_line(privacy: PrivacySettings, secure_note: str) -> str:
    """What the demo's trainings and scorings revealed to the aggregator, from the settings the
    server's algorithm resolves for the demo's jobs (not the algorithms' defaults)."""
    scoring = (
        "held-out scoring is per gateway, in the clear (each gateway's confusion counts); the local-only "
        "baseline runs one job per gateway, whose sums are that gateway's own (a research comparison; "
        "PRIVACY.md)"
    )
    crowd = (
        f"private protocol: {_dp_statement(privacy)}"
        if privacy.protocol == "private"
        else f"{privacy.protocol} protocol, minimum crowd {privacy.min_crowd} windows"
    )
    if not privacy.secure_aggregation:
        return (
            f"secure aggregation OFF -- {secure_note or 'disabled'}: the aggregator saw each gateway's "
            f"histograms ({crowd}); {scoring}"
        )
    return f"FedSCS-XGB and FedForest trained on fleet sums only ({crowd}, secure aggregation); {scoring}"


def _dp_statement(privacy: PrivacySettings) -> str:
    """The fleet jobs' differential privacy in a few words (the epsilon per window per training)."""
    values = sorted(set(privacy.epsilons.values()))
    if len(values) == 1:
        return f"differential privacy at epsilon {values[0]:g} per window per training, its budget above"
    if values:
        return (
            "differential privacy at epsilon "
            + ", ".join(f"{e:g} ({name})" for name, e in privacy.epsilons.items())
            + " per window per training"
        )
    return "differential privacy, its budget above"


def epsilon_lines(privacy: PrivacySettings) -> list[str]:
    """The report's statement of the demo's epsilon and why (``epsilon.statement``), from the
    epsilons the server's algorithms resolved for the demo's jobs; none without the private protocol."""
    from .epsilon import statement

    eps = privacy.epsilons
    if len(set(eps.values())) == 1:
        return [f"the demo's {statement(next(iter(eps.values())), privacy.gateways)}"]
    return [f"{name}'s {statement(e, privacy.gateways)}" for name, e in eps.items()]
