"""A gateway's model versions only go forward, and only a signed rollback goes back.

``ModelManager`` records the highest version it has accepted per model id (``accepted.json``
next to the model files); a validly signed but older (or already replaced) bundle is a replay
and is refused. A rollback is a signed instruction naming the gateway, the model it replaces
and the previous model it returns to; unsigned, forged, misaddressed, stale or replayed ones
change nothing."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from edge_client.models import ACCEPTED, ModelManager
from edge_client.training_data import ClientData
from shared.model.bundle import ModelBundle, sign_rollback
from shared.protocol.messages.deployment import ModelRollback
from shared.signing import SigningKey

FSV = "fs-versions"
KEY = SigningKey.from_seed(bytes(range(32)))


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = np.where(X[:, 0] > 0, "push", "rest")
    return [
        aggregator.simulate(
            FedForest(n_trees=n, max_depth=3, secure_aggregation=False, feature_set_version=FSV),
            [ClientData("c", X, y)],
        )
        for n in (2, 3, 4)
    ]


def bundle(model, version: int, model_id: str = "act", key: SigningKey = KEY) -> bytes:
    return ModelBundle.create(model, model_id=model_id, version=version, signing_key=key).to_bytes()


def manager(tmp_path, client: str = "gw-1") -> ModelManager:
    out = ModelManager(tmp_path / "models", client, [KEY.verify_key], feature_set_version=lambda: FSV, engine="numpy")
    out.load()
    return out


def back(
    client: str = "gw-1",
    to: tuple[str, int] = ("act", 1),
    replaces: tuple[str, int] = ("act", 2),
    key: SigningKey = KEY,
    **extra,
) -> ModelRollback:
    return sign_rollback(
        key,
        client=client,
        model_id=to[0],
        version=to[1],
        replaces_model_id=replaces[0],
        replaces_version=replaces[1],
        **extra,
    )


def running(m: ModelManager) -> str:
    return m.current.label if m.current else "-"


def test_replayed_older_version_is_refused_and_stays_refused_after_a_restart(tmp_path, models) -> None:
    a, b, c = models
    old = bundle(a, 1)  # captured off the wire when v1 was deployed
    gw = manager(tmp_path)
    assert gw.install(old).state == "active"
    assert gw.install(bundle(b, 2)).state == "active"
    refused = gw.install(old)
    assert refused.state == "rejected" and running(gw) == "act:v2"
    assert refused.reason.startswith("downgrade: act:v1 is older than act:v2 already accepted")
    assert "signed rollback" in refused.reason
    assert json.loads((tmp_path / "models" / ACCEPTED).read_text())["versions"] == {"act": 2}

    restarted = manager(tmp_path)
    assert running(restarted) == "act:v2"
    assert restarted.install(old).state == "rejected" and running(restarted) == "act:v2"
    # the identical content again is the idempotent "unchanged" (an aggregator retrying a deploy)
    assert restarted.install(bundle(b, 2)).state == "unchanged"
    assert restarted.install(bundle(c, 3)).state == "active"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [
        "accepted.json",
        "active.bundle",
        "previous.bundle",
    ]  # no temp files


def test_versions_are_monotonic_per_model_id(tmp_path, models) -> None:
    """A new model id has no history, so any version of it is accepted; switching model ids
    does not reset another id's floor."""
    a, b, c = models
    gw = manager(tmp_path)
    assert gw.install(bundle(b, 5)).state == "active"
    assert gw.install(bundle(a, 1, model_id="falls")).state == "active"  # another model, its first version
    assert gw.install(bundle(c, 2, model_id="falls")).state == "active"
    replay = gw.install(bundle(b, 5))  # act:v5 was accepted and replaced: a replay
    assert replay.state == "rejected" and replay.reason.startswith("downgrade: act:v5 was already accepted")
    assert gw.install(bundle(a, 4)).state == "rejected"
    assert gw.install(bundle(a, 6)).state == "active" and running(gw) == "act:v6"
    assert json.loads((tmp_path / "models" / ACCEPTED).read_text())["versions"] == {"act": 6, "falls": 2}


def test_a_lost_record_is_rebuilt_from_the_stored_models(tmp_path, models) -> None:
    a, b, _ = models
    gw = manager(tmp_path)
    gw.install(bundle(a, 1))
    gw.install(bundle(b, 2))
    (tmp_path / "models" / ACCEPTED).unlink()
    restarted = manager(tmp_path)
    assert restarted.install(bundle(a, 1)).state == "rejected"
    (tmp_path / "models" / ACCEPTED).write_text("{not json")
    corrupted = manager(tmp_path)
    assert "accepted.json" in corrupted.last_error
    assert corrupted.install(bundle(a, 1)).state == "rejected" and running(corrupted) == "act:v2"


def test_unsigned_forged_and_misaddressed_rollbacks_change_nothing(tmp_path, models) -> None:
    a, b, _ = models
    gw = manager(tmp_path)
    gw.install(bundle(a, 1))
    gw.install(bundle(b, 2))
    good = back()
    for request, reason in (
        (ModelRollback("unsigned, as before"), "unsigned"),
        (back(key=SigningKey.generate()), "trusts only"),
        (replace(good, replaces_version=3), "altered"),
        (replace(good, signature=bytes(64)), "altered"),
        (back(client="gw-2"), "for gw-2, not for gw-1"),
    ):
        status = gw.rollback(request)
        assert status.state == "rejected" and reason in status.reason, status
        assert running(gw) == "act:v2"
    assert (gw.status("x").active_version, gw.status("x").previous_version) == (2, 1)


def test_signed_rollback_to_the_previous_model_and_its_replays(tmp_path, models) -> None:
    a, b, c = models
    gw = manager(tmp_path)
    gw.install(bundle(a, 1))
    gw.install(bundle(b, 2))
    request = back(reason="misses transfers")
    status = gw.rollback(request)
    assert (status.state, status.active_version, status.previous_version) == ("active", 1, 2)
    assert status.reason == "rolled back: misses transfers"

    # the same message again (a retry, or a replay): already applied, nothing happens
    again = gw.rollback(request)
    assert again.state == "unchanged" and "already applied" in again.reason and running(gw) == "act:v1"
    # a replayed push of v2 cannot undo the rollback
    assert gw.install(bundle(b, 2)).reason.startswith("downgrade: act:v2 was already accepted")

    # after v3, the old rollback (act:v2 -> act:v1) names a model this gateway no longer runs
    assert gw.install(bundle(c, 3)).state == "active"
    restarted = manager(tmp_path)
    stale = restarted.rollback(request)
    assert stale.state == "rejected" and running(restarted) == "act:v3"
    assert "replayed" in stale.reason

    # a fresh rollback v3 -> v1, then forward again v1 -> v3 (the previous model, by instruction)
    assert restarted.rollback(back(replaces=("act", 3))).state == "active" and running(restarted) == "act:v1"
    assert restarted.rollback(back(to=("act", 3), replaces=("act", 1))).state == "active"
    assert running(restarted) == "act:v3"
    # an older rollback that matches the models again (act:v3 -> act:v1) is still refused: issued earlier
    old = back(replaces=("act", 3), issued_ns=request.issued_ns + 1)
    refused = restarted.rollback(old)
    assert refused.state == "rejected" and "replayed" in refused.reason and running(restarted) == "act:v3"


def test_rollback_that_no_longer_matches_the_models_is_refused(tmp_path, models) -> None:
    a, b, c = models
    gw = manager(tmp_path)
    gw.install(bundle(a, 1))
    gw.install(bundle(b, 2))
    wrong_target = gw.rollback(back(to=("act", 0)))
    assert wrong_target.state == "rejected" and "previous model is act:v1, not act:v0" in wrong_target.reason
    wrong_current = gw.rollback(back(replaces=("act", 7)))
    assert wrong_current.state == "rejected" and "runs act:v2, not act:v7" in wrong_current.reason
    assert running(gw) == "act:v2"
    empty = manager(tmp_path / "empty")
    assert empty.rollback(back()).state == "unchanged"
    assert "no previous model" in empty.rollback(back()).reason


def test_a_rollback_from_an_aggregator_whose_clock_was_set_back_is_refused_and_says_why(tmp_path, models) -> None:
    """The aggregator's wall clock orders rollbacks: one signed after the clock was stepped back
    looks like a replay. It is refused with the reason (nothing changes, nothing is applied
    twice), and the same instruction signed once the clock is right again goes through."""
    a, b, c = models
    gw = manager(tmp_path)
    for version, model in ((1, a), (2, b), (3, c)):
        gw.install(bundle(model, version))
    first = back(to=("act", 2), replaces=("act", 3))
    assert gw.rollback(first).state == "active" and running(gw) == "act:v2"
    hour = 3600 * 10**9
    behind = gw.rollback(back(to=("act", 3), replaces=("act", 2), issued_ns=first.issued_ns - hour))
    assert behind.state == "rejected" and running(gw) == "act:v2"
    assert "aggregator's clock is behind" in behind.reason
    assert gw.rollback(back(to=("act", 3), replaces=("act", 2), issued_ns=first.issued_ns + 1)).state == "active"
    assert running(gw) == "act:v3"
