"""The fleet demo's decisions and explanations, as pure functions of what the demo measured.

The demo has to say why it did what it did, and its numbers must not mislead: a model scored on
60 windows and re-scored on 321 later is not "the same model improving"; bytes are a multiple of
*something*; a gateway that did not train must be named. Every rule here takes counts the demo
measured (held-out windows and correct predictions per gateway, class supports, who answered
which round, bytes per phase) and returns a decision or a sentence, so the rules are tested
without a fleet (``tests/aggregator/test_demo_decisions.py``).

The first training's deployment rule (the demo's): a model is deployed only if its held-out
accuracy beats **both** the local-only baseline (every gateway's own model, on the same windows)
and chance, taken as the **majority-class rate** -- the accuracy of always guessing the most
common held-out activity. The majority-class rate is never below 1/#classes and is the honest
bar when the held-out activities are unbalanced (they are: each gateway holds out the tail of
its labelled minutes, often one or two exercises). A tie does not beat a bar. The retraining is
the server's: its promotion rule decides (``promotion_decision`` tells that decision with the
same bars beside it).

The third contender (after the first training): FedGA-Tree, one small tree per gateway evolved
with the fleet's help. The gateways the chosen federated model serves worst are those where it
does not beat the gateway's own local-only model (``worst_served``); on each of them the
gateway's FedGA tree replaces the fleet's model only if it beats that model on the gateway's
same held-out windows (``decide_personal_trees``), and it goes to that gateway alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "CHANCE_RULE",
    "UNNAMED",
    "DeploymentDecision",
    "PersonalDecision",
    "PersonalTree",
    "Score",
    "SecureAggregationPlan",
    "bytes_explanation",
    "class_counts",
    "decide_deployment",
    "decide_personal_trees",
    "gateways_phrase",
    "promotion_decision",
    "rescoring_note",
    "sat_out_reasons",
    "secure_aggregation_plan",
    "worst_served",
]

#: What "chance" means in the demo's deployment rule (see the module docstring).
CHANCE_RULE = "majority-class rate"
#: Who sat out rounds the server's job record counts without naming the gateways (``sat_out_reasons``).
UNNAMED = "(unnamed)"


@dataclass(frozen=True)
class Score:
    """A model's scoring on held-out windows, as counts: windows and correct predictions per
    gateway, and the pooled windows per true class (the confusion matrix's row sums)."""

    windows: dict[str, int]
    correct: dict[str, int]
    class_counts: tuple[int, ...] = ()

    @classmethod
    def from_metrics(cls, per_client: Mapping[str, Mapping[str, float]], class_counts: Iterable[int] = ()) -> Score:
        """From federated evaluation metrics (``n`` and ``accuracy`` per gateway): exact counts,
        since accuracy is correct / n of integers."""
        windows = {c: int(round(m.get("n", 0.0))) for c, m in per_client.items()}
        correct = {c: int(round(m.get("accuracy", 0.0) * windows[c])) for c, m in per_client.items()}
        return cls(windows, correct, tuple(int(v) for v in class_counts))

    @property
    def n(self) -> int:
        return sum(self.windows.values())

    @property
    def accuracy(self) -> float:
        return self.accuracy_on(self.windows)[0]

    @property
    def majority_rate(self) -> float:
        """Accuracy of always guessing the most common held-out activity (NaN: no counts)."""
        total = sum(self.class_counts)
        return max(self.class_counts) / total if total else math.nan

    def accuracy_on(self, gateways: Iterable[str]) -> tuple[float, int]:
        """Pooled accuracy and window count over ``gateways`` (those this score has)."""
        chosen = [g for g in gateways if g in self.windows]
        n = sum(self.windows[g] for g in chosen)
        return (sum(self.correct[g] for g in chosen) / n if n else math.nan), n


@dataclass(frozen=True)
class DeploymentDecision:
    """What the demo deployed after a training step, and why (the facts behind ``reason``).

    ``deploy``: the candidate deployed, or None; ``local_only``, ``chance`` and
    ``deployed_rescored`` are the bars the best candidate was held to, on ``windows`` held-out
    windows; ``kept``: the model the gateways keep when nothing new is deployed ("" for none);
    ``deployed_as``: the registry label the deployed candidate got ("" until it is deployed)."""

    step: str
    deploy: str | None
    reason: str
    candidates: dict[str, float] = field(default_factory=dict)  # name -> pooled held-out accuracy
    failures: dict[str, str] = field(default_factory=dict)  # name -> why its training failed
    local_only: float = math.nan
    chance: float = math.nan
    chance_rule: str = CHANCE_RULE
    deployed_rescored: float | None = None
    windows: int = 0
    kept: str = ""
    deployed_as: str = ""


@dataclass(frozen=True)
class _Bars:
    name: str
    accuracy: float
    windows: int
    local_only: float
    chance: float

    @property
    def passes(self) -> bool:
        return self.accuracy > self.local_only and self.accuracy > self.chance


def _bars(name: str, candidate: Score, local_only: Score) -> _Bars:
    """The candidate against the bars on the gateways both were scored on (a gateway that sat
    out one scoring would otherwise make the comparison one of different windows)."""
    common = sorted(set(candidate.windows) & set(local_only.windows))
    accuracy, n = candidate.accuracy_on(common)
    return _Bars(name, accuracy, n, local_only.accuracy_on(common)[0], candidate.majority_rate)


def _bar_text(local_only: float, chance: float) -> str:
    return (
        f"the local-only baseline ({local_only:.3f}: every gateway its own model) and chance "
        f"({CHANCE_RULE} {chance:.3f}: always guessing the most common held-out activity)"
    )


def decide_deployment(
    step: str, candidates: Mapping[str, Score], *, local_only: Score, failures: Mapping[str, str] | None = None
) -> DeploymentDecision:
    """Deploy the most accurate candidate that beats the local-only baseline and chance; else
    nothing. The module docstring says why these bars."""
    failures = dict(failures or {})
    keep = "the gateways keep running without a model"
    failed = [f"{name}: training failed ({why})" for name, why in failures.items()]
    bars = sorted(
        (_bars(n, s, local_only) for n, s in candidates.items()),
        key=lambda b: -b.accuracy if not math.isnan(b.accuracy) else math.inf,
    )
    scores = {n: s.accuracy for n, s in candidates.items()}
    if not bars:
        return DeploymentDecision(step, None, "; ".join(["no model deployed", *failed, keep]), scores, failures)
    passing = [b for b in bars if b.passes]
    best = passing[0] if passing else bars[0]
    bar_text = _bar_text(best.local_only, best.chance)
    if passing:
        deploy = best.name
        reason = f"{best.name}: held-out accuracy {best.accuracy:.3f} on {best.windows} windows beats {bar_text}"
    else:
        deploy = None
        tried = ", ".join(f"{b.name} {b.accuracy:.3f}" for b in bars)
        reason = "; ".join(
            [f"no model deployed: {tried} on {best.windows} held-out windows; none beats {bar_text}", *failed, keep]
        )
    return DeploymentDecision(
        step, deploy, reason, scores, failures, local_only=best.local_only, chance=best.chance, windows=best.windows
    )


def promotion_decision(
    step: str,
    name: str,
    candidate: Score | None,
    promotion: Mapping[str, Any] | None,
    *,
    local_only: Score,
    deployed: str = "",
    failures: Mapping[str, str] | None = None,
) -> DeploymentDecision:
    """The server's promotion decision on a retrained candidate (``promotion``: its record from
    ``/api/promotions``; ``deployed``: the label the gateways ran), told with the local-only
    baseline and chance on the same gateways beside it: the server's rule is the regression
    check alone, so whether the candidate also beats those bars is said, not enforced."""
    failures = dict(failures or {})
    keep = f"the gateways keep {deployed}" if deployed else "the gateways keep running without a model"
    if candidate is None or promotion is None:
        why = failures.get(name, "the server recorded no promotion decision")
        return DeploymentDecision(step, None, f"no model deployed: {name}: {why}; {keep}", {}, failures, kept=deployed)
    bars = _bars(name, candidate, local_only)
    metric, baseline = promotion["metric"], promotion["baseline_value"]
    value = promotion["candidate_value"]
    scored = f"held-out {metric} of {name} {'-' if value is None else f'{value:.3f}'}"
    if baseline is None:
        scored += f", no deployed model to compare with (threshold {promotion['threshold']:g})"
    else:
        scored += (
            f" vs {deployed or 'the deployed model'} re-scored on the same windows {baseline:.3f}, "
            f"threshold {promotion['threshold']:g}"
        )
    verdict = "beats" if bars.passes else "does NOT beat"
    reason = (
        f"the server's promotion rule ({scored}): {promotion['decision']} -- {promotion['detail']}; beside it: "
        f"{name} {bars.accuracy:.3f} on {bars.windows} windows {verdict} {_bar_text(bars.local_only, bars.chance)}"
    )
    rolled_out = promotion["decision"] == "rolled-out"
    if not rolled_out:
        reason = f"no model deployed: {reason}; {keep}"
    return DeploymentDecision(
        step,
        name if rolled_out else None,
        reason,
        {name: candidate.accuracy},
        failures,
        local_only=bars.local_only,
        chance=bars.chance,
        deployed_rescored=baseline,
        windows=bars.windows,
        kept="" if rolled_out else deployed,
    )


@dataclass(frozen=True)
class PersonalTree:
    """A gateway's own FedGA-Tree model as its job registered and scored it: the registry label
    (``MODEL_ID.GATEWAY:vN``), its accuracy on that gateway's held-out windows and how many
    windows that was, and its decision nodes (the point of FedGA-Tree: a tree a clinician reads)."""

    label: str
    accuracy: float
    windows: int
    decision_nodes: int


@dataclass(frozen=True)
class PersonalDecision:
    """The third contender on one gateway: the federated model, the gateway's local-only model
    and its FedGA tree, each on that gateway's held-out windows; whether the gateway is one the
    federated model serves worst, and whether its tree is deployed there (``reason``: why)."""

    gateway: str
    federated: float
    local_only: float
    windows: int
    worst_served: bool
    deploy: bool
    reason: str
    tree: str = ""
    tree_accuracy: float = math.nan
    tree_windows: int = 0
    decision_nodes: int = 0


def worst_served(federated: Score, local_only: Score) -> list[str]:
    """The gateways the federated model serves worst: those where it does not beat the
    gateway's own local-only model on the same held-out windows (a tie does not beat a bar),
    the largest shortfall first. A gateway without both scores on equal windows is not judged;
    one where the federated model is right on every held-out window is served as well as it
    can be (nothing could beat it there).

    Examples
    --------
    >>> fed = Score({"a": 10, "b": 10, "c": 10, "d": 10}, {"a": 9, "b": 5, "c": 6, "d": 10})
    >>> own = Score({"a": 10, "b": 10, "c": 10, "d": 10}, {"a": 8, "b": 8, "c": 6, "d": 10})
    >>> worst_served(fed, own)
    ['b', 'c']
    """
    gaps = {
        g: (federated.correct[g] - local_only.correct[g]) / n
        for g, n in federated.windows.items()
        if n and local_only.windows.get(g) == n and federated.correct[g] < n
    }
    return sorted((g for g, gap in gaps.items() if gap <= 0), key=lambda g: (gaps[g], g))


def decide_personal_trees(
    federated_name: str, federated: Score, local_only: Score, trees: Mapping[str, PersonalTree], *, failure: str = ""
) -> list[PersonalDecision]:
    """Per gateway: federated vs local-only vs its FedGA tree; the tree is deployed to its own
    gateway when the gateway is one the federated model serves worst (:func:`worst_served`) and
    the tree beats the federated model there, on the same held-out windows. ``failure``: why
    there are no trees (the FedGA job failed), said for the gateways that needed one."""
    worst = set(worst_served(federated, local_only))
    out = []
    for gateway, n in sorted(federated.windows.items()):
        fed, own = federated.accuracy_on([gateway])[0], local_only.accuracy_on([gateway])[0]
        tree = trees.get(gateway)
        facts = PersonalDecision(gateway, fed, own, n, gateway in worst, deploy=False, reason="")
        if tree is not None:
            facts = replace(
                facts,
                tree=tree.label,
                tree_accuracy=tree.accuracy,
                tree_windows=tree.windows,
                decision_nodes=tree.decision_nodes,
            )
        versus = f"{federated_name} {fed:.3f}, its local-only model {own:.3f}"
        if gateway not in worst:
            if local_only.windows.get(gateway) != n:
                why = f"not judged: no local-only score on the same {n} held-out windows ({versus})"
            elif federated.correct[gateway] == n:
                why = f"the federated model is right on all {n} of its held-out windows ({versus})"
            else:
                why = f"not among the gateways the federated model serves worst ({versus} on its {n} held-out windows)"
            out.append(replace(facts, deploy=False, reason=f"keeps the fleet's model: {why}"))
        elif tree is None:
            why = failure or "the FedGA job registered no scored tree for it"
            out.append(replace(facts, deploy=False, reason=f"served worst ({versus}), no FedGA tree: {why}"))
        elif tree.windows != n:
            out.append(
                replace(
                    facts,
                    deploy=False,
                    reason=(
                        f"served worst ({versus}), {tree.label} not deployed: scored on {tree.windows} held-out "
                        f"windows, the federated model on {n}: not comparable"
                    ),
                )
            )
        elif tree.accuracy > fed:
            out.append(
                replace(
                    facts,
                    deploy=True,
                    reason=(
                        f"served worst ({versus}); {tree.label} ({tree.decision_nodes} decision nodes) "
                        f"{tree.accuracy:.3f} beats {federated_name} on the same {n} held-out windows: deployed to "
                        f"{gateway} alone"
                    ),
                )
            )
        else:
            out.append(
                replace(
                    facts,
                    deploy=False,
                    reason=(
                        f"served worst ({versus}); {tree.label} ({tree.decision_nodes} decision nodes) "
                        f"{tree.accuracy:.3f} does not beat {federated_name} on the same {n} held-out windows: not "
                        "deployed"
                    ),
                )
            )
    return out


def gateways_phrase(n: int) -> str:
    """ "1 gateway", "3 gateways"."""
    return f"{n} gateway{'s' if n != 1 else ''}"


def rescoring_note(
    first: Mapping[str, int], now: Mapping[str, int], *, still_held_out: int | None, holdout_fraction: float
) -> str:
    """Why a model's second score is not comparable with its first: on which held-out windows
    (``first``/``now``: windows per gateway at each scoring) and, when the demo could count it
    in the stores (``still_held_out``), how many of the first windows are still held out."""
    n_first, n_now = sum(first.values()), sum(now.values())
    was = f"was {n_first}" if set(first) == set(now) else f"was {n_first} of {len(first)}"
    text = f"re-scored on {n_now} held-out windows of {gateways_phrase(len(now))} ({was} at its first scoring)"
    missing = sorted(set(first) - set(now))
    if missing:
        text += f", not scored this time: {', '.join(missing)}"
    change = (
        "the carers' later labels grew it and moved it later in each session"
        if n_now > n_first
        else "it follows the labels in each gateway's store"
    )
    text += f": the held-out set is the last {holdout_fraction:.0%} of each gateway's labelled windows, so {change}"
    if still_held_out is not None:
        if still_held_out == n_first:
            text += f"; all {n_first} of the first are still held out; the later labels added {n_now - n_first}"
        else:
            text += (
                f"; {still_held_out} of the first {n_first} are still held out; the other "
                f"{n_first - still_held_out} are not (the tail moved past them)"
            )
    return text


def sat_out_reasons(job: Mapping[str, Any], gateways: Iterable[str]) -> dict[str, str]:
    """Who missed (part of) a server job and why, from its record (``/api/jobs/{id}``): the
    ``gateways`` it was meant for that the feature-set survey left out, rounds that fewer
    gateways answered than were asked (the record counts them without naming them: keyed
    ``"(unnamed)"``), gateways left out of the held-out scoring (with the reason it gives)."""
    out: dict[str, str] = {}
    if job.get("state") == "completed":
        for client in sorted(set(gateways) - set(job.get("participants") or [])):
            out[client] = "left out of the job by the feature-set survey (no answer, or another feature set)"
    rounds = job.get("rounds") or []
    short = [r for r in rounds if r["answered"] < r["selected"]]
    if short:
        detail = ", ".join(f"round {r['step']}: {r['answered']} of {r['selected']}" for r in short)
        out[UNNAMED] = (
            f"not every gateway answered in {len(short)} of {len(rounds)} rounds ({detail}; the "
            "server's job record counts the answers, it does not name who missed)"
        )
    for client, why in ((job.get("evaluation") or {}).get("left_out") or {}).items():
        out[client] = f"left out of the held-out scoring: {why}"
    return out


def class_counts(evaluation: Mapping[str, Any]) -> list[int]:
    """Held-out windows per true class: the row sums of a job's confusion matrix."""
    return [int(sum(row)) for row in evaluation.get("confusion") or []]


@dataclass(frozen=True)
class SecureAggregationPlan:
    on: bool
    reason: str


def secure_aggregation_plan(n_gateways: int) -> SecureAggregationPlan:
    """Whether the demo's federated trainings can run under secure aggregation with this many
    gateways. Secure aggregation secret-shares every gateway's mask seeds among at least two
    neighbours (``shared.secure_aggregation.default_threshold``), so it needs at least 3
    gateways; the library then refuses to train (PRIVACY.md: it never falls back on its own).
    The demo knows its fleet size up front, so below 3 it trains in the clear and says so."""
    from shared.secure_aggregation import SecureAggregationError, default_degree, default_threshold

    try:
        default_threshold(default_degree(n_gateways))
    except SecureAggregationError:
        return SecureAggregationPlan(
            False,
            f"secure aggregation needs at least 3 gateways (each gateway's masks "
            f"are secret-shared among at least 2 others); with {n_gateways} the "
            "demo trains on the gateways' histograms sent unmasked, in the clear",
        )
    return SecureAggregationPlan(
        True, f"secure aggregation over {n_gateways} gateways: the aggregator decodes only the fleet's sums"
    )


def bytes_explanation(
    phases: Mapping[str, int],
    *,
    total: int,
    raw_sensor_bytes: int,
    raw_samples: int,
    channels: int,
    gateways: int,
    secure: bool,
) -> list[str]:
    """The aggregator's bytes in context: the multiple of the raw samples, where the bytes went
    (``phases``: bytes the aggregator sent and received during each step, its transport's
    counters read before and after the step), and why private training costs more than the data
    it learns from."""
    ratio = total / raw_sensor_bytes if raw_sensor_bytes else math.nan
    lines = [
        f"bytes through the aggregator (sent + received): {total / 1e6:.1f} MB = {ratio:.1f}x the raw sensor "
        f"data ({raw_sensor_bytes / 1e6:.1f} MB: {raw_samples:,} samples x {channels} channels as recorded, "
        "every gateway's whole session), which never left the gateways; by step:"
    ]
    for name, value in phases.items():
        if name.startswith("deploying"):
            lines.append(
                f"  {name}: {value / 1e6:.1f} MB = {value / max(gateways, 1) / 1e3:.0f} kB per gateway "
                "(the signed model each gateway downloads)"
            )
        else:
            lines.append(f"  {name}: {value / 1e6:.1f} MB ({value / total:.0%})" if total else f"  {name}: 0 MB")
    other = max(total - sum(phases.values()), 0)
    lines.append(f"  other (status messages, waiting between steps): {other / 1e6:.1f} MB")
    if secure:
        lines.append(
            "why private training costs more than the data: the federated trainings send masked vectors (secure "
            "aggregation cannot skip an empty cell without revealing it) plus key set-up and unmasking "
            "rounds -- private FedSCS-XGB a noisy histogram of the round's sampled features for one child "
            "of every sibling pair at every level of every boosting round, private FedForest one noisy "
            "histogram of every feature and bin and one of every tree's leaves; the local-only baseline "
            "sends every gateway's own histograms of every forest level in the clear, one job per gateway; "
            "every held-out scoring and deployment sends the model to every gateway; the sensor samples "
            "themselves are never sent"
        )
    else:
        lines.append(
            "why private training costs more than the data: at every depth level of every boosting round "
            "(FedSCS-XGB) and every forest level (FedForest) each gateway sends its histogram of every "
            "node x feature x bin (FedForest: the features sampled per node), in the clear (no secure "
            "aggregation); every held-out scoring and deployment sends the model to every gateway; the "
            "sensor samples themselves are never sent"
        )
    return lines
