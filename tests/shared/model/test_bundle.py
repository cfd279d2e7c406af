"""shared.model.bundle: signed model bundles round-trip, and every alteration is refused."""

from __future__ import annotations

import hashlib
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from shared.model import TreeBuilder, TreeEnsemble, model_inputs
from shared.model.bundle import (
    FORMAT_NAME,
    SIGNED_DOMAIN,
    BadSignature,
    BundleError,
    IncompatibleBundle,
    ModelBundle,
    SelfTestFailed,
    open_bundle,
    rollback_payload,
    sign_rollback,
    verify_rollback,
)
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.messages.deployment import ModelRollback
from shared.protocol.codec import dumps_value, loads_value
from shared.signing import SigningKey
from tests.shared.model.strategies import ensembles

KEY = SigningKey.from_seed(bytes(range(32)))
OTHER_KEY = SigningKey.from_seed(bytes(range(1, 33)))
MAX = 1 << 20


def forest() -> TreeEnsemble:
    builder = TreeBuilder([0.0, 0.0, 0.0])
    builder.split(0, 0, 0.1, left_value=[0.1, 0.2, 0.7], right_value=[0.0, 0.5, 0.5])
    builder.split(1, 1, categories=[0, 4], left_value=[1 / 3, 2 / 3, 0.0], right_value=[0.5, 0.25, 0.25])
    builder.split(2, 2, -1.5, default_left=True, left_value=[0.9, 0.05, 0.05], right_value=[0.2, 0.2, 0.6])
    return TreeEnsemble(
        trees=(builder.build(),),
        kind="forest",
        link="identity",
        n_outputs=3,
        feature_names=("acc_mean", "side", "gyro_z"),
        feature_set_version="fs-3",
        classes=("rest", "push", "turn"),
        metadata={"algorithm": "fedforest", "n_trees": 1},
    )


def boosted() -> TreeEnsemble:
    trees = []
    for k in range(2):
        builder = TreeBuilder(0.0)
        builder.split(0, k, 0.25 + k, left_value=-0.5, right_value=0.75)
        builder.split(1, 1 - k, 1.0 / 3.0, left_value=0.1, right_value=-0.2)
        trees.append(builder.build())
    return TreeEnsemble(
        trees=tuple(trees),
        kind="boosted",
        link="softmax",
        n_outputs=2,
        feature_names=("a", "b"),
        tree_output=np.array([0, 1], dtype=np.int32),
        base_score=np.array([0.1, -0.1]),
        feature_set_version="fs-3",
        classes=("x", "y"),
        metadata={"algorithm": "fedscs-xgb"},
    )


def client_split_forest() -> TreeEnsemble:
    """Trained with client-indicator splits: one extra input, the client index (NaN = unknown)."""
    builder = TreeBuilder([0.5, 0.5])
    builder.split(0, 1, 0.5, default_left=True, left_value=[0.9, 0.1], right_value=[0.5, 0.5])  # client < 0.5 (gw-1)
    builder.split(2, 0, 2.0, left_value=[0.2, 0.8], right_value=[0.7, 0.3])
    return TreeEnsemble(
        trees=(builder.build(),),
        kind="forest",
        link="identity",
        n_outputs=2,
        feature_names=("speed", "client"),
        feature_set_version="fs-3",
        classes=("a", "b"),
        metadata={"algorithm": "fedforest", "client_splits": 1, "clients": "gw-1,gw-2"},
    )


def make(model: TreeEnsemble | None = None, **kwargs) -> ModelBundle:
    options = {"model_id": "activity", "version": 7, "signing_key": KEY, "created": 1_700_000_000.5}
    options.update(kwargs)
    return ModelBundle.create(forest() if model is None else model, **options)


def resign(bundle: ModelBundle, key: SigningKey = KEY, **changes) -> ModelBundle:
    unsigned = replace(bundle, **changes, signature=b"")
    return replace(unsigned, signature=key.sign(unsigned.signed_payload()))


# --- round trip ------------------------------------------------------------------------------------
@pytest.mark.parametrize("build", [forest, boosted, client_split_forest])
def test_round_trip(build) -> None:
    model = build()
    bundle = make(model)
    data = bundle.to_bytes()
    back = ModelBundle.from_bytes(data, max_bytes=MAX)
    assert back == bundle and back.to_bytes() == data
    assert back.verify(KEY.verify_key) == KEY.verify_key
    back.check_compatible("fs-3")
    assert back.model() == model
    assert back.self_test() == 0.0
    assert back.sha256 == bundle.sha256 == hashlib.sha256(data).digest()
    assert (back.model_id, back.version, back.kind, back.feature_set_version, back.target) == (
        "activity",
        7,
        model.kind,
        "fs-3",
        "",
    )
    assert back.algorithm == model.metadata["algorithm"] and back.created == 1_700_000_000.5
    assert back.key_id == KEY.key_id and len(back.signature) == 64
    assert back.model_cbor == model.to_cbor()


def test_open_bundle_does_every_check() -> None:
    data = make().to_bytes()
    bundle, model = open_bundle(
        data,
        trusted_keys=[OTHER_KEY.verify_key, KEY.verify_key],
        max_bytes=MAX,
        feature_set_version="fs-3",
        client_id="gw-1",
    )
    assert model == forest() and bundle.model_id == "activity"
    with pytest.raises(IncompatibleBundle):
        open_bundle(data, trusted_keys=KEY.verify_key, max_bytes=MAX, feature_set_version="fs-4")
    with pytest.raises(BadSignature):
        open_bundle(data, trusted_keys=OTHER_KEY.verify_key, max_bytes=MAX)


def test_self_test_inputs_and_outputs() -> None:
    model = forest()
    bundle = make(model, n_self_test=12, rng_seed=3)
    X = bundle.self_test_inputs
    assert X.dtype == np.float32 and X.shape == (12, 3)
    assert bundle.self_test_outputs.dtype == np.float64 and bundle.self_test_outputs.shape == (12, 3)
    np.testing.assert_array_equal(bundle.self_test_outputs, model.predict_raw(model_inputs(model, X)))
    assert len(np.unique(model.leaves(X))) >= 3  # rows drawn around the thresholds reach several leaves
    assert not X.flags.writeable and not bundle.self_test_outputs.flags.writeable
    assert make(model, n_self_test=12, rng_seed=3) == bundle  # deterministic
    assert make(model, n_self_test=12, rng_seed=4).self_test_inputs.tolist() != X.tolist()


def test_wire_layout() -> None:
    wire = loads_value(make().to_bytes())
    assert wire["format"] == FORMAT_NAME and wire["format_version"] == 1
    assert set(wire) == {"format", "format_version", *(f.name for f in fields(ModelBundle))}
    assert isinstance(wire["model_cbor"], bytes) and isinstance(wire["signature"], bytes)


def test_signed_payload_covers_every_field() -> None:
    bundle = make()
    payload = bundle.signed_payload()
    assert payload.startswith(SIGNED_DOMAIN) and bundle.signature not in payload
    changes = {
        "model_id": "activity2",
        "version": 8,
        "algorithm": "other",
        "feature_set_version": "fs-4",
        "kind": "single",
        "target": "gw-1",
        "created": 1_700_000_000.25,
        "model_cbor": bundle.model_cbor + b"\x00",
        "self_test_inputs": bundle.self_test_inputs[::-1].copy(),
        "self_test_outputs": bundle.self_test_outputs + 1e-12,
        "key_id": OTHER_KEY.key_id,
    }
    assert set(changes) == {f.name for f in fields(ModelBundle)} - {"signature"}
    for name, value in changes.items():
        changed = replace(bundle, **{name: value})
        assert changed.signed_payload() != payload, name
        with pytest.raises(BadSignature):
            changed.verify([KEY.verify_key, OTHER_KEY.verify_key])


# --- rejection ---------------------------------------------------------------------------------------
def test_every_single_byte_change_is_rejected() -> None:
    data = make(boosted()).to_bytes()
    assert len(data) < 4000  # keeps this exhaustive test quick
    for position in range(len(data)):
        for flip in (0x01, 0x80):
            tampered = bytearray(data)
            tampered[position] ^= flip
            with pytest.raises((BundleError, BadSignature)):
                ModelBundle.from_bytes(bytes(tampered), max_bytes=MAX).verify(KEY.verify_key)


def test_truncated_bundles_are_rejected() -> None:
    data = make().to_bytes()
    for length in range(len(data)):
        with pytest.raises(BundleError, match="truncated|empty"):
            ModelBundle.from_bytes(data[:length], max_bytes=MAX)
    with pytest.raises(BundleError, match="truncated"):
        ModelBundle.from_bytes(data + b"\x00", max_bytes=MAX)  # trailing bytes


def test_wrong_key_rejected() -> None:
    bundle = make()
    with pytest.raises(BadSignature, match=f"signed with key {KEY.key_id}.*trusts only {OTHER_KEY.key_id}"):
        bundle.verify(OTHER_KEY.verify_key)
    assert bundle.verify([OTHER_KEY.verify_key, KEY.verify_key]) == KEY.verify_key  # key rotation


def test_forged_key_id_rejected() -> None:
    """An attacker signs with their own key but claims the aggregator's key id."""
    forged = resign(make(), key=OTHER_KEY, key_id=KEY.key_id)
    with pytest.raises(BadSignature, match="does not verify"):
        forged.verify(KEY.verify_key)


def test_unsigned_and_bad_signatures_rejected() -> None:
    bundle = make()
    with pytest.raises(BadSignature, match="not signed"):
        replace(bundle, signature=b"").verify(KEY.verify_key)
    with pytest.raises(BadSignature, match="64 bytes"):
        replace(bundle, signature=bundle.signature[:63]).verify(KEY.verify_key)


def test_size_limit() -> None:
    data = make().to_bytes()
    with pytest.raises(BundleError, match="max_bytes"):
        ModelBundle.from_bytes(data, max_bytes=len(data) - 1)
    assert ModelBundle.from_bytes(data, max_bytes=len(data)) == make()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda w: w.update(format="wheelfed.tree-ensemble"), "not a model bundle"),
        (lambda w: w.update(format_version=2), "update the gateway"),
        (lambda w: w.pop("target"), "missing keys \\['target'\\]"),
        (lambda w: w.update(extra=1), "unexpected keys \\['extra'\\]"),
        (lambda w: w.update(version=True), "'version'"),
        (lambda w: w.update(version=-1), "'version'"),
        (lambda w: w.update(created=5), "'created'"),
        (lambda w: w.update(created=float("nan")), "'created'"),
        (lambda w: w.update(kind="stump"), "'kind'"),
        (lambda w: w.update(key_id="ABC"), "'key_id'"),
        (lambda w: w.update(model_id=""), "'model_id'"),
        (lambda w: w.update(model_cbor="text"), "'model_cbor'"),
        (lambda w: w.update(signature=[1, 2]), "'signature'"),
        (lambda w: w.update(self_test_inputs=w["self_test_inputs"].astype(np.float64)), "'self_test_inputs'"),
        (lambda w: w.update(self_test_outputs=w["self_test_outputs"][:3]), "'self_test_outputs'"),
        (lambda w: w.update(self_test_outputs=w["self_test_outputs"].ravel()), "'self_test_outputs'"),
    ],
)
def test_malformed_envelopes_rejected(change, match: str) -> None:
    wire = loads_value(make().to_bytes())
    change(wire)
    with pytest.raises(BundleError, match=match):
        ModelBundle.from_bytes(dumps_value(wire), max_bytes=MAX)


def test_not_a_map_rejected() -> None:
    with pytest.raises(BundleError, match="CBOR map"):
        ModelBundle.from_bytes(dumps_value([1, 2]), max_bytes=MAX)


# --- use -------------------------------------------------------------------------------------------
def test_feature_set_mismatch() -> None:
    bundle = make()
    bundle.check_compatible("fs-3")
    with pytest.raises(IncompatibleBundle, match="expects feature set 'fs-3'.*computes 'fs-4'"):
        bundle.check_compatible("fs-4")


def test_personalised_target() -> None:
    model = client_split_forest()
    bundle = ModelBundle.from_bytes(make(model, target="gw-2").to_bytes(), max_bytes=MAX)
    bundle.verify(KEY.verify_key)
    assert bundle.target == "gw-2" and "target='gw-2'" in repr(bundle)
    bundle.check_target("gw-2")
    with pytest.raises(IncompatibleBundle, match="personalised for client 'gw-2'"):
        bundle.check_target("gw-1")
    # Expected outputs use gw-2's client index (1), not the unknown-client NaN.
    X = bundle.self_test_inputs
    np.testing.assert_array_equal(bundle.self_test_outputs, model.predict_raw(model_inputs(model, X, 1)))
    assert bundle.self_test() == 0.0
    make(model).check_target("anyone")  # whole-fleet models suit every client
    with pytest.raises(BadSignature):  # the target is signed
        replace(bundle, target="gw-1").verify(KEY.verify_key)


def test_self_test_catches_wrong_expected_outputs() -> None:
    """Correctly signed, but the outputs do not match the model: the self-test must say so."""
    bundle = make()
    wrong = bundle.self_test_outputs.copy()
    wrong[2, 1] += 1e-6
    tampered = ModelBundle.from_bytes(resign(bundle, self_test_outputs=wrong).to_bytes(), max_bytes=MAX)
    tampered.verify(KEY.verify_key)  # the signature is fine ...
    with pytest.raises(SelfTestFailed, match="row 2 output 1"):  # ... the model is not what it claims
        tampered.self_test()
    with pytest.raises(SelfTestFailed):
        open_bundle(tampered.to_bytes(), trusted_keys=KEY.verify_key, max_bytes=MAX)


def test_self_test_with_other_engines() -> None:
    bundle = make(boosted())
    model = bundle.model()
    assert bundle.self_test(lambda X: model.predict_raw(X)) == 0.0

    class Engine:
        def predict_raw(self, X):
            return model.predict_raw(X).astype(np.float32)  # a float32 engine (e.g. TFLite)

    worst = bundle.self_test(Engine(), atol=1e-6)
    assert 0.0 <= worst <= 1e-6
    with pytest.raises(SelfTestFailed, match="shape"):
        bundle.self_test(lambda X: model.predict_raw(X)[:, :1])
    with pytest.raises(SelfTestFailed, match="row 0 output 0"):
        bundle.self_test(lambda X: model.predict_raw(X) + 1.0)
    with pytest.raises(SelfTestFailed):
        bundle.self_test(lambda X: np.full((X.shape[0], 2), np.nan))


def test_model_is_parsed_only_on_request() -> None:
    """Garbage model bytes under a valid signature pass the envelope checks, then fail in model()."""
    bundle = resign(make(), model_cbor=b"\xa1\x61")
    back = ModelBundle.from_bytes(bundle.to_bytes(), max_bytes=MAX)
    back.verify(KEY.verify_key)
    with pytest.raises(BundleError, match="does not decode or validate"):
        back.model()


def test_header_must_match_model() -> None:
    bundle = resign(make(), model_cbor=boosted().to_cbor())  # header says forest
    with pytest.raises(BundleError, match="aggregator bug"):
        bundle.model()


def test_create_arguments_checked() -> None:
    with pytest.raises(TypeError):
        ModelBundle.create(forest(), model_id="m", version=1, signing_key=KEY.verify_key)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        make(n_self_test=0)
    with pytest.raises(BundleError, match="'version'"):
        make(version=-1)
    assert make(algorithm="custom").algorithm == "custom"
    assert make(model=boosted(), target="gw-9").self_test() == 0.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=ensembles())
def test_random_models_round_trip(model: TreeEnsemble) -> None:
    bundle = ModelBundle.from_bytes(make(model).to_bytes(), max_bytes=MAX)
    bundle.verify(KEY.verify_key)
    assert bundle.model() == model
    assert bundle.self_test() == 0.0


# --- signed rollbacks -------------------------------------------------------------------------------
def signed_rollback(**changes) -> ModelRollback:
    arguments = dict(
        client="gw-1",
        model_id="activity",
        version=1,
        replaces_model_id="activity",
        replaces_version=2,
        reason="misses transfers",
        issued_ns=1_700_000_000_000_000_000,
    )
    arguments.update(changes)
    return sign_rollback(KEY, **arguments)


def test_signed_rollback_round_trips_over_the_wire() -> None:
    request = signed_rollback()
    assert (
        request.client,
        request.model_id,
        request.version,
        request.replaces_model_id,
        request.replaces_version,
        request.key_id,
    ) == ("gw-1", "activity", 1, "activity", 2, KEY.key_id)
    received = decode_message(encode_message(Message.create(request, sender="aggregator"))).body
    assert received == request
    assert verify_rollback(received, [OTHER_KEY.verify_key, KEY.verify_key]) == KEY.verify_key


def test_every_field_of_a_rollback_is_signed() -> None:
    request = signed_rollback()
    other_values = {
        "reason": "other",
        "model_id": "falls",
        "version": 3,
        "replaces_model_id": "falls",
        "replaces_version": 9,
        "client": "gw-2",
        "issued_ns": request.issued_ns + 1,
    }
    assert set(other_values) == {f.name for f in fields(ModelRollback)} - {"key_id", "signature"}
    for name, value in other_values.items():
        with pytest.raises(BadSignature, match="altered"):
            verify_rollback(replace(request, **{name: value}), KEY.verify_key)


def test_unsigned_foreign_and_bundle_signed_rollbacks_refused() -> None:
    with pytest.raises(BadSignature, match="unsigned"):
        verify_rollback(ModelRollback("an old aggregator's rollback names nothing"), KEY.verify_key)
    foreign = sign_rollback(
        OTHER_KEY, client="gw-1", model_id="activity", version=1, replaces_model_id="activity", replaces_version=2
    )
    with pytest.raises(BadSignature, match="trusts only"):
        verify_rollback(foreign, KEY.verify_key)
    forged = replace(foreign, key_id=KEY.key_id)  # claims our key id, signed with another key
    with pytest.raises(BadSignature, match="altered"):
        verify_rollback(forged, KEY.verify_key)
    # domain separation: a signature the key made over anything else is no rollback signature
    request = signed_rollback()
    payload = rollback_payload(request)
    assert payload.startswith(b"wheelfed.model-rollback/v1\x00") and not payload.startswith(SIGNED_DOMAIN)
    bundle = ModelBundle.create(forest(), model_id="activity", version=1, signing_key=KEY)
    with pytest.raises(BadSignature):
        verify_rollback(replace(request, signature=bundle.signature), KEY.verify_key)


def test_rollback_numbers_out_of_the_signed_range_fail_at_decoding() -> None:
    """Versions and times are signed as int64; a bigger number is a decoding error, not a crash."""
    from shared.protocol.errors import DecodeError

    wire = encode_message(Message.create(signed_rollback(version=2**62), sender="aggregator"))
    big = wire.replace((2**62).to_bytes(8, "big"), (2**64 - 1).to_bytes(8, "big"))
    assert big != wire
    with pytest.raises(DecodeError, match="version"):
        decode_message(big)


def test_sign_rollback_arguments_checked() -> None:
    with pytest.raises(ValueError, match="client"):
        signed_rollback(client="")
    with pytest.raises(ValueError, match="version"):
        signed_rollback(version=-1)
    with pytest.raises(TypeError):
        sign_rollback(KEY.verify_key, client="gw-1", model_id="a", version=1, replaces_model_id="a", replaces_version=2)
