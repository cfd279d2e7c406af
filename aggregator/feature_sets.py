"""Which feature set a fleet job trains on: asked of the gateways, not typed by the operator.

A gateway stores its windows under ``wheelfed-tifex-2+<digest of its sensor layout>``: gateways
with the same sensors share a version, others do not, and a model only fits the feature
vectors it was trained on. So before a job starts, the aggregator sends every selected gateway
one ``DataShapeRequest`` for the requested feature set (or for none, to find out): a gateway
with labelled windows of it answers with its shape; any other refuses with
``feature_set_mismatch`` and the versions it does hold (the error body's ``feature_sets``:
versions only, which ``Hello`` announces anyway; no counts), or with another reason
(``no_labelled_windows``, ...). :func:`choose_feature_set` then takes the version most gateways
hold -- a tie goes to the first by name, and the choice says so -- and names every gateway it
leaves out and why, so that nobody has to read gateway logs to learn why a job is smaller.

The survey is round 0 of the job's id: it decides who the job's clients are, so it runs before
the job itself (``FederatedJob`` numbers its rounds from 1).

A server job restricted to a data time range sends the range (and its ``min_labelled``) with the
survey: every gateway keeps the range for the job's later requests and refuses
(``too_few_labelled_windows``) when it holds fewer labelled windows in it. A gateway that
answered only with the versions it holds has checked neither for the version chosen, so it is
asked once more (round 0 again) for that version; those that refuse are left out with their
reason. A gateway that does not know the range field refuses the request and is left out too:
no gateway trains on windows outside the range.

The survey also checks protocol versions. It is written in the oldest version that carries it,
so a gateway one version behind the aggregator answers it too, and every answer's envelope says
which version its gateway speaks. A gateway behind the aggregator whose version lacks a request
the job will send (:func:`job_requests`: the algorithm's requests for its protocol, and secure
aggregation's) is left out with the reason -- the version it needs and the first request it
lacks -- instead of failing the job half-way; one that has them all trains, its requests written
in its version (``shared.protocol.wire``). The survey also names the capabilities the job needs
(:func:`job_capabilities`, the names a gateway's ``Hello`` announces) to every gateway whose
version reads them, and a gateway that lacks one refuses (``missing_capability``, saying what
it lacks and what it serves), so it is left out with that reason too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from shared.protocol.envelope import PROTOCOL_VERSION
from shared.protocol.messages.fleet_sums import DataShape, DataShapeRequest, TimeRange
from shared.protocol.wire import can_write, version_needed

from .jobs import TrainingError
from .rounds import RoundEngine

__all__ = [
    "FeatureSetChoice",
    "choose_feature_set",
    "job_capabilities",
    "job_requests",
    "survey_feature_sets",
    "version_gap",
]

log = logging.getLogger(__name__)

MISMATCH = "feature_set_mismatch"

#: The requests a fleet job sends after its survey, by algorithm name and (resolved) protocol;
#: ``None`` stands for every protocol of the algorithm.
JOB_REQUESTS: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("fedscs_xgb", "private"): ("fleet_counts", "grid_counts", "fedscs_xgb.private_level", "fedscs_xgb.private_leaves"),
    ("fedscs_xgb", "histogram"): ("fleet_counts", "grid_counts", "fedscs_xgb.histograms"),
    ("fedscs_xgb", "atoms"): ("data_summary_request", "fedscs_xgb.sketch", "fedscs_xgb.atoms"),
    ("fedforest", "private"): ("fleet_counts", "grid_counts", "fedforest.dp_histograms", "fedforest.dp_leaves"),
    ("fedforest", "histogram"): ("fleet_counts", "grid_counts", "fedforest.histograms"),
    ("fedforest", "sketches"): ("data_summary_request", "fedforest.level", "fedforest.split"),
    ("fedga_tree", None): ("fedga_tree.depth", "fedga_tree.structure", "fedga_tree.generation", "fedga_tree.finish"),
}
#: What a job under secure aggregation sends besides (key setup, then an unmasking per sum).
SECURE_AGGREGATION_REQUESTS = ("secagg.join", "secagg.keys", "secagg.confirm", "secagg.unmask")


def job_requests(algorithm: object | None) -> tuple[str, ...] | None:
    """The message types a job of ``algorithm`` (a configuration such as ``FedForest(...)``)
    sends to its gateways, survey and evaluation included; None when not known (then the job
    takes only gateways of this aggregator's version)."""
    if algorithm is None:
        return None
    name, protocol = getattr(algorithm, "name", ""), getattr(algorithm, "protocol", None)
    requests = JOB_REQUESTS.get((name, protocol)) or JOB_REQUESTS.get((name, None))
    if requests is None:
        return None
    if getattr(algorithm, "secure_aggregation", False):
        requests = (*requests, *SECURE_AGGREGATION_REQUESTS)
    return ("data_shape", *requests, "evaluate")


def job_capabilities(algorithm: object | None) -> tuple[str, ...]:
    """What a gateway must serve for a job of ``algorithm`` (``Hello.capabilities`` names): its
    algorithm's client half and, under secure aggregation, ``secure_aggregation``."""
    name = getattr(algorithm, "name", "")
    if not any(key[0] == name for key in JOB_REQUESTS):
        return ()
    return (name, "secure_aggregation") if getattr(algorithm, "secure_aggregation", False) else (name,)


def version_gap(version: int, requests: Sequence[str] | None) -> str:
    """Why a gateway that speaks protocol ``version`` cannot serve a job sending ``requests``
    ("" when it can: it is this aggregator's version, or every request exists in its own)."""
    if version >= PROTOCOL_VERSION:
        return ""
    if requests is None:
        return (
            f"protocol_version: it speaks protocol version {version}, this job needs {PROTOCOL_VERSION} "
            "-- update the gateway (the job does not say which requests it sends, so it takes only gateways "
            "of this aggregator's version)"
        )
    lacking = [(name, why) for name in requests if (why := version_needed(name, version))]
    if not lacking:
        return ""
    needs = ", ".join(f"{name} ({why})" for name, why in lacking)
    return (
        f"protocol_version: it speaks protocol version {version}, this job needs {PROTOCOL_VERSION}: "
        f"{needs} -- update the gateway"
    )


@dataclass(frozen=True)
class FeatureSetChoice:
    """The outcome of the survey: train on ``version`` with ``clients``.

    ``stored``: every version some gateway holds labelled windows of, with those gateways;
    ``left_out``: the selected gateways that do not take part, each with its reason;
    ``tied_with``: the versions exactly as many gateways hold, passed over by name;
    ``requested``: the operator named the version (no majority was taken).
    """

    version: str
    clients: tuple[str, ...]
    stored: dict[str, tuple[str, ...]] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    tied_with: tuple[str, ...] = ()
    requested: bool = False

    def describe(self) -> list[str]:
        """One line for the choice, then one per gateway left out (what ``wheelfed train`` prints)."""
        who = f"{len(self.clients)} gateway{'s' if len(self.clients) != 1 else ''} ({', '.join(self.clients)})"
        if self.requested:
            head = f"feature set {self.version}: {who}"
        elif self.tied_with:
            head = (
                f"feature set {self.version}: {who}; {', '.join(self.tied_with)} has as many gateways, the tie "
                "goes to the first by name (--feature-set chooses)"
            )
        else:
            head = f"feature set {self.version} (the majority's): {who}"
        return [head, *(f"  {client} left out: {why}" for client, why in self.left_out.items())]


def _fleet_text(stored: Mapping[str, Sequence[str]]) -> str:
    return "; ".join(
        f"{', '.join(clients)} store{'s' if len(clients) == 1 else ''} {version}" for version, clients in stored.items()
    )


def choose_feature_set(
    held: Mapping[str, Sequence[str]],
    *,
    fits_any: Sequence[str] = (),
    left_out: Mapping[str, str] | None = None,
    requested: str = "",
) -> FeatureSetChoice:
    """The version to train on, from what each gateway ``held`` (client -> versions with labelled
    windows); ``fits_any``: clients with unversioned data (simulations), which fit every version;
    ``left_out``: clients already out, with their reasons. ``requested`` (the operator's) wins
    when some gateway holds it; otherwise the version most gateways hold, ties to the first by
    name. ``TrainingError`` when no gateway can train, saying what the fleet does hold."""
    out = dict(left_out or {})
    stored: dict[str, list[str]] = {}
    for client in sorted(held):
        for version in held[client]:
            stored.setdefault(version, []).append(client)
    stored_sorted = {v: tuple(stored[v]) for v in sorted(stored)}
    tied: tuple[str, ...]
    if requested:
        if requested not in stored and not fits_any:
            fleet = _fleet_text(stored_sorted) if stored_sorted else "none stores labelled windows"
            unusable = "; ".join(f"{c}: {why}" for c, why in sorted(out.items()))
            raise TrainingError(
                f"no gateway stores feature set {requested!r}: {fleet}"
                f"{f'; {unusable}' if unusable else ''} (omit --feature-set to train on the "
                "version most gateways store)"
            )
        version, tied = requested, ()
    elif stored:
        most = max(len(c) for c in stored.values())
        tied_versions = sorted(v for v, c in stored.items() if len(c) == most)
        version, tied = tied_versions[0], tuple(tied_versions[1:])
    elif fits_any:
        version, tied = "", ()
    else:
        reasons = "; ".join(f"{c}: {why}" for c, why in sorted(out.items())) or "no gateway answered"
        raise TrainingError(f"no gateway can train: {reasons}")
    takers = set(stored.get(version, ())) | set(fits_any)
    for client in sorted(held):
        if client not in takers:
            out[client] = f"{MISMATCH}: it stores {', '.join(held[client])}, not {version}"
    return FeatureSetChoice(
        version=version,
        clients=tuple(sorted(takers)),
        stored=stored_sorted,
        left_out=dict(sorted(out.items())),
        tied_with=tied,
        requested=bool(requested),
    )


def survey_feature_sets(
    engine: RoundEngine,
    job_id: str,
    clients: Sequence[str],
    requested: str = "",
    *,
    deadline_s: float,
    time_range: TimeRange | None = None,
    min_labelled: int = 0,
    algorithm: object | None = None,
) -> FeatureSetChoice:
    """Ask ``clients`` which feature sets they hold (round 0 of ``job_id``; see the module
    docstring) and choose with :func:`choose_feature_set`; with ``time_range`` or
    ``min_labelled``, the clients that do not meet them for the chosen version are left out.
    Gateways whose protocol version lacks a request of the job (:func:`job_requests` of
    ``algorithm``; without it, any version behind this aggregator's) are left out, each with
    the version it needs and one log line."""
    versions = getattr(engine, "peer_versions", {})
    needs = job_capabilities(algorithm)

    def survey(version: str, asked: Sequence[str]) -> dict[str, DataShapeRequest]:
        # The capabilities go to every gateway known to read them; one of unknown version gets
        # the survey every version reads (it is checked by its answer's version alone).
        body = DataShapeRequest(
            version, labels=False, time_range=time_range, min_labelled=min_labelled, capabilities=needs
        )
        plain = replace(body, capabilities=())
        return {c: body if (v := versions.get(c)) is not None and can_write(body, v) else plain for c in asked}

    result = engine.run_round(
        job_id,
        0,
        survey(requested, clients),
        clients,
        deadline_s=deadline_s,
        min_replies=0,
        expect=DataShape,
        refusals_expected=True,
    )
    requests = job_requests(algorithm)
    behind = {
        c: gap
        for c in [*result.replies, *result.errors]
        if (gap := version_gap(versions.get(c, PROTOCOL_VERSION), requests))
    }
    for client, gap in sorted(behind.items()):
        log.warning(
            f"gateway {client} left out of job {job_id}: {gap}",
            extra={"job": job_id, "client": client, "protocol_version": versions.get(client)},
        )
    answered = {c: m for c, m in result.replies.items() if c not in behind}
    held: dict[str, tuple[str, ...]] = {c: (requested,) for c in answered} if requested else {}
    fits_any = [] if requested else sorted(answered)
    reasons = {**result.failures(), **behind}
    for client, error in result.errors.items():
        if error.code == MISMATCH and error.feature_sets and client not in behind:
            held[client] = error.feature_sets
            del reasons[client]
    choice = choose_feature_set(held, fits_any=fits_any, left_out=reasons, requested=requested)
    unchecked = [c for c in choice.clients if c not in answered]
    if (time_range is None and not min_labelled) or not unchecked:
        return choice
    again = engine.run_round(
        job_id,
        0,
        survey(choice.version, unchecked),
        unchecked,
        deadline_s=deadline_s,
        min_replies=0,
        expect=DataShape,
        refusals_expected=True,
    )
    refused = again.failures()
    if len(refused) == len(choice.clients):
        why = "; ".join(f"{c}: {reason}" for c, reason in sorted(refused.items()))
        raise TrainingError(f"no gateway can train on feature set {choice.version} under the job's rules: {why}")
    return replace(
        choice,
        clients=tuple(c for c in choice.clients if c not in refused),
        left_out=dict(sorted({**choice.left_out, **refused}.items())),
    )
