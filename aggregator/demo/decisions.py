"""The fleet demo's decisions and explanations, as pure functions of what the demo measured.

The demo has to say why it did what it did, and its numbers must not mislead: a model scored on
60 windows and re-scored on 321 later is not "the same model improving"; bytes are a multiple of
*something*; a gateway that did not train must be named. Every rule here takes counts the demo
measured (held-out windows and correct predictions per gateway, class supports, who answered
which round, bytes per phase) and returns a decision or a sentence, so the rules are tested
without a fleet (``tests/aggregator/test_demo_decisions.py``).

The deployment rule: a model is deployed only if its held-out accuracy beats **both** the
local-only baseline (every gateway's own model, on the same windows) and chance, taken as the
**majority-class rate** -- the accuracy of always guessing the most common held-out activity.
The majority-class rate is never below 1/#classes and is the honest bar when the held-out
activities are unbalanced (they are: each gateway holds out the tail of its labelled minutes,
often one or two exercises). On retraining the new model must also not score below the
deployed one re-scored on the same windows. A tie does not beat a bar.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["CHANCE_RULE", "DeploymentDecision", "RoundFacts", "Score", "SecureAggregationPlan", "bytes_explanation",
           "decide_deployment", "gateways_phrase", "rescoring_note", "sat_out_reasons", "secure_aggregation_plan"]

#: What "chance" means in the demo's deployment rule (see the module docstring).
CHANCE_RULE = "majority-class rate"


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
    windows; ``kept``: the model the gateways keep when nothing new is deployed ("" for none)."""

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


@dataclass(frozen=True)
class _Bars:
    name: str
    accuracy: float
    windows: int
    local_only: float
    chance: float
    previous: float | None

    @property
    def passes(self) -> bool:
        return (self.accuracy > self.local_only and self.accuracy > self.chance
                and (self.previous is None or self.accuracy >= self.previous))


def _bars(name: str, candidate: Score, local_only: Score, deployed: Score | None) -> _Bars:
    """The candidate against the bars on the gateways all of them were scored on (a gateway
    that sat out one scoring would otherwise make the comparison one of different windows)."""
    common = set(candidate.windows) & set(local_only.windows)
    if deployed is not None:
        common &= set(deployed.windows)
    accuracy, n = candidate.accuracy_on(sorted(common))
    previous = deployed.accuracy_on(sorted(common))[0] if deployed is not None else None
    return _Bars(name, accuracy, n, local_only.accuracy_on(sorted(common))[0], candidate.majority_rate, previous)


def decide_deployment(step: str, candidates: Mapping[str, Score], *, local_only: Score,
                      deployed: tuple[str, Score] | None = None,
                      failures: Mapping[str, str] | None = None) -> DeploymentDecision:
    """Deploy the most accurate candidate that beats the local-only baseline and chance (and,
    when a model is deployed, does not score below it re-scored on the same windows); else
    nothing. The module docstring says why these bars."""
    failures = dict(failures or {})
    label, previous = deployed if deployed is not None else ("", None)
    keep = f"the gateways keep {label}" if label else "the gateways keep running without a model"
    failed = [f"{name}: training failed ({why})" for name, why in failures.items()]
    bars = sorted((_bars(n, s, local_only, previous) for n, s in candidates.items()),
                  key=lambda b: -b.accuracy if not math.isnan(b.accuracy) else math.inf)
    scores = {n: s.accuracy for n, s in candidates.items()}
    if not bars:
        return DeploymentDecision(step, None, "; ".join(["no model deployed", *failed, keep]), scores, failures,
                                  kept=label)
    passing = [b for b in bars if b.passes]
    best = passing[0] if passing else bars[0]
    facts = dict(candidates=scores, failures=failures, local_only=best.local_only, chance=best.chance,
                 deployed_rescored=best.previous, windows=best.windows)
    bar_text = (f"the local-only baseline ({best.local_only:.3f}: every gateway its own model) and chance "
                f"({CHANCE_RULE} {best.chance:.3f}: always guessing the most common held-out activity)")
    if passing:
        reason = f"{best.name}: held-out accuracy {best.accuracy:.3f} on {best.windows} windows beats {bar_text}"
        if best.previous is not None:
            reason += f", and is not below {label} re-scored on the same windows ({best.previous:.3f})"
        return DeploymentDecision(step, best.name, reason, **facts)
    tried = ", ".join(f"{b.name} {b.accuracy:.3f}" for b in bars)
    reason = f"no model deployed: {tried} on {best.windows} held-out windows; none beats {bar_text}"
    if best.previous is not None:
        reason += f" without falling below {label} re-scored on them ({best.previous:.3f})"
    return DeploymentDecision(step, None, "; ".join([reason, *failed, keep]), **facts, kept=label)


def gateways_phrase(n: int) -> str:
    """"1 gateway", "3 gateways"."""
    return f"{n} gateway{'s' if n != 1 else ''}"


def rescoring_note(first: Mapping[str, int], now: Mapping[str, int], *, still_held_out: int | None,
                   holdout_fraction: float) -> str:
    """Why a model's second score is not comparable with its first: on which held-out windows
    (``first``/``now``: windows per gateway at each scoring) and, when the demo could count it
    in the stores (``still_held_out``), how many of the first windows are still held out."""
    n_first, n_now = sum(first.values()), sum(now.values())
    was = f"was {n_first}" if set(first) == set(now) else f"was {n_first} of {len(first)}"
    text = f"re-scored on {n_now} held-out windows of {gateways_phrase(len(now))} ({was} at its first scoring)"
    missing = sorted(set(first) - set(now))
    if missing:
        text += f", not scored this time: {', '.join(missing)}"
    change = ("the carers' later labels grew it and moved it later in each session" if n_now > n_first
              else "it follows the labels in each gateway's store")
    text += f": the held-out set is the last {holdout_fraction:.0%} of each gateway's labelled windows, so {change}"
    if still_held_out is not None:
        if still_held_out == n_first:
            text += f"; all {n_first} of the first are still held out; the later labels added {n_now - n_first}"
        else:
            text += (f"; {still_held_out} of the first {n_first} are still held out; the other "
                     f"{n_first - still_held_out} are not (the tail moved past them)")
    return text


@dataclass(frozen=True)
class RoundFacts:
    """Who a round asked and what came back: ``errors`` as "code: message" per gateway."""

    selected: tuple[str, ...]
    answered: tuple[str, ...]
    errors: dict[str, str] = field(default_factory=dict)
    timed_out: tuple[str, ...] = ()


def sat_out_reasons(clients: Sequence[str], rounds: Sequence[RoundFacts], *, offline: Iterable[str] = (),
                    rejected: Mapping[str, int] | None = None) -> dict[str, str]:
    """Why each of ``clients`` that missed a round of a job missed it: the first reason (an
    error reply -- "refused", with the gateway's own message; no answer by the deadline, marked
    "offline" when its last status said so), in how many rounds, and how many later rounds it
    was left out of (an algorithm stops asking a gateway that dropped out, e.g. of the secure
    aggregation set-up); replies the aggregator rejected are counted too."""
    offline, rejected = set(offline), dict(rejected or {})
    out = {}
    for client in clients:
        asked = [r for r in rounds if client in r.selected and client not in r.answered]
        left_out = sum(client not in r.selected for r in rounds)
        answered_some = any(client in r.answered for r in rounds)
        parts = []
        if asked:
            first = asked[0]
            if client in first.errors:
                reason = f"refused ({first.errors[client]})"
            elif client in first.timed_out:
                reason = "did not answer by the deadline" + (" (offline)" if client in offline else "")
            else:
                reason = "sent no usable reply"
            if answered_some:
                reason += f" in {len(asked)} of {len(rounds)} rounds"
            parts.append(reason)
        if left_out:
            later = "later " if asked else ""
            parts.append(f"left out of {left_out} {later}round{'s' if left_out != 1 else ''}")
        if rejected.get(client):
            parts.append(f"{rejected[client]} replies rejected by the aggregator (they did not fit the job)")
        if parts:
            out[client] = "; ".join(parts)
    return out


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
        return SecureAggregationPlan(False, f"secure aggregation needs at least 3 gateways (each gateway's masks "
                                            f"are secret-shared among at least 2 others); with {n_gateways} the "
                                            "demo trains on the gateways' histograms sent unmasked, in the clear")
    return SecureAggregationPlan(True, f"secure aggregation over {n_gateways} gateways: the aggregator decodes only "
                                       "the fleet's sums")


def bytes_explanation(phases: Mapping[str, int], *, total: int, raw_sensor_bytes: int, raw_samples: int,
                      channels: int, gateways: int, secure: bool) -> list[str]:
    """The aggregator's bytes in context: the multiple of the raw samples, where the bytes went
    (``phases``: bytes the aggregator sent and received during each step, measured on its
    transport), and why private training costs more than the data it learns from."""
    ratio = total / raw_sensor_bytes if raw_sensor_bytes else math.nan
    lines = [f"bytes through the aggregator (sent + received): {total / 1e6:.1f} MB = {ratio:.1f}x the raw sensor "
             f"data ({raw_sensor_bytes / 1e6:.1f} MB: {raw_samples:,} samples x {channels} channels as recorded, "
             "every gateway's whole session), which never left the gateways; by step:"]
    for name, value in phases.items():
        if name.startswith("deploying"):
            lines.append(f"  {name}: {value / 1e6:.1f} MB = {value / max(gateways, 1) / 1e3:.0f} kB per gateway "
                         "(the signed model each gateway downloads)")
        else:
            lines.append(f"  {name}: {value / 1e6:.1f} MB ({value / total:.0%})" if total else f"  {name}: 0 MB")
    other = max(total - sum(phases.values()), 0)
    lines.append(f"  other (status messages, waiting between steps): {other / 1e6:.1f} MB")
    how = ("dense and masked (secure aggregation cannot skip an empty bin without revealing it), plus the key set-up "
           "and unmasking rounds" if secure else "in the clear (no secure aggregation)")
    lines.append("why private training costs more than the data: at every depth level of every boosting round "
                 "(FedSCS-XGB) and every forest level (FedForest) each gateway sends its histogram of every node x "
                 f"feature x bin (FedForest: the features sampled per node), {how}; the sensor samples themselves "
                 "are never sent")
    return lines
