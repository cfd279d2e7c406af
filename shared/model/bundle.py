"""A signed, self-describing model bundle: what the aggregator pushes and a gateway installs.

A bundle carries the model (``TreeEnsemble.to_cbor()`` bytes, kept as an opaque byte string), the
facts a gateway needs to decide whether the model is for it (id, version, algorithm, feature-set
version, kind, target client), a self-test (a few float32 input rows and the outputs
``predict_raw`` gave for them on the aggregator) and an Ed25519 signature by the aggregator's key
(``shared.signing``). Gateways verify the signature with the aggregator's public key before they
use a model; only the public key is on the gateway.

Order of checks on a gateway (``open_bundle`` does all of it)::

    bundle = ModelBundle.from_bytes(payload, max_bytes=...)  # envelope only; model not parsed
    bundle.verify(trusted_keys)          # BadSignature: not from our aggregator, or altered
    bundle.check_compatible(my_feature_set_version)  # IncompatibleBundle
    model = bundle.model()               # decode + validate the (now authenticated) model
    bundle.self_test()                   # SelfTestFailed: this engine disagrees with the aggregator

The hostile-input part stays small: before the signature is checked only the envelope (a flat
map of scalars, two small arrays and two byte strings) is decoded, with the hardened codec.

What is signed: ``SIGNED_DOMAIN`` followed by every field except ``signature`` in a fixed
order, each framed as ``name, type, length, value`` (see ``signed_payload``). This encoding is
WheelFed's own and independent of how cbor2 happens to encode things, so a gateway with another
cbor2 version still verifies, and it is injective (two different bundles never share it). The
key id is a signed field too.

Rollbacks are signed with the same key and framing under another domain (``ROLLBACK_DOMAIN``),
so neither signature can stand in for the other: ``sign_rollback`` on the aggregator,
``verify_rollback`` on the gateway (which then decides whether the instruction still applies,
``edge_client.models``).
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, Union

import numpy as np

from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.errors import DecodeError, MessageTooLarge
from shared.protocol.messages.deployment import ModelRollback
from shared.signing import BadSignature, SigningKey, VerifyKey

from .ensemble import KINDS, TreeEnsemble
from .errors import ModelValidationError
from .inputs import client_index, model_inputs, uses_client_index

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ROLLBACK_DOMAIN",
    "SIGNED_DOMAIN",
    "BadSignature",
    "BundleError",
    "IncompatibleBundle",
    "ModelBundle",
    "SelfTestFailed",
    "open_bundle",
    "rollback_payload",
    "sign_rollback",
    "verify_rollback",
]

FORMAT_NAME = "wheelfed.model-bundle"
FORMAT_VERSION = 1
#: Prefix of every signed payload, so a bundle signature can never pass for any other signature.
SIGNED_DOMAIN = f"{FORMAT_NAME}/v{FORMAT_VERSION}\x00".encode()
#: Prefix of every signed rollback: a rollback signature is never a bundle signature, nor the reverse.
ROLLBACK_DOMAIN = b"wheelfed.model-rollback/v1\x00"
#: Default tolerance of ``self_test`` (the numpy engine reproduces outputs bit-exactly).
SELF_TEST_ATOL = 1e-9

_KEY_ID = re.compile(r"[0-9a-f]{16}\Z")
_WIRE_KEYS = ("format", "format_version")


class BundleError(ValueError):
    """A model bundle is malformed, truncated, inconsistent or not usable here."""


class IncompatibleBundle(BundleError):
    """A valid bundle that is not for this gateway (other feature set or other client)."""


class SelfTestFailed(BundleError):
    """The engine on this gateway does not reproduce the aggregator's self-test outputs."""


Engine = Union[Callable[[np.ndarray], Any], Any]


@dataclass(frozen=True, eq=False)
class ModelBundle:
    """One signed model release. Build with ``create`` (aggregator) or ``from_bytes`` (gateway)."""

    model_id: str
    version: int
    algorithm: str
    feature_set_version: str
    kind: str
    target: str  # "" = the whole fleet, else the client id of a personalised model
    created: float  # Unix time, seconds
    model_cbor: bytes  # TreeEnsemble.to_cbor()
    self_test_inputs: np.ndarray  # float32 (n_rows, n_input_features)
    self_test_outputs: np.ndarray  # float64 (n_rows, n_outputs): predict_raw on the aggregator
    key_id: str  # shared.signing key id of the signing key
    signature: bytes  # Ed25519 over signed_payload(); b"" while unsigned

    def __post_init__(self) -> None:
        _check_fields(self)
        for name in ("self_test_inputs", "self_test_outputs"):
            array = np.array(getattr(self, name), dtype=getattr(self, name).dtype.newbyteorder("="), copy=True)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    # --- aggregator side ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        model: TreeEnsemble,
        *,
        model_id: str,
        version: int,
        signing_key: SigningKey,
        target: str = "",
        n_self_test: int = 8,
        rng_seed: int = 0,
        algorithm: str | None = None,
        created: float | None = None,
    ) -> ModelBundle:
        """Bundle and sign ``model``. ``algorithm`` defaults to ``model.metadata["algorithm"]``
        (else the model's kind); the self-test rows are drawn around the model's own split
        thresholds and category codes so that they exercise many paths."""
        if not isinstance(model, TreeEnsemble):
            raise TypeError(f"model must be a TreeEnsemble, got {type(model).__name__}")
        if not isinstance(signing_key, SigningKey):
            raise TypeError(f"signing_key must be a shared.signing.SigningKey, got {type(signing_key).__name__}")
        if type(n_self_test) is not int or n_self_test < 1:
            raise ValueError(f"n_self_test must be an int >= 1, got {n_self_test!r}")
        inputs = _self_test_rows(model, n_self_test, np.random.default_rng(rng_seed))
        outputs = _raw_outputs(model, inputs, target, None)
        unsigned = cls(
            model_id=model_id,
            version=version,
            algorithm=str(model.metadata.get("algorithm") or model.kind) if algorithm is None else algorithm,
            feature_set_version=model.feature_set_version,
            kind=model.kind,
            target=target,
            created=float(time.time() if created is None else created),
            model_cbor=model.to_cbor(),
            self_test_inputs=inputs,
            self_test_outputs=outputs,
            key_id=signing_key.key_id,
            signature=b"",
        )
        return replace(unsigned, signature=signing_key.sign(unsigned.signed_payload()))

    # --- bytes ------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The bundle as one CBOR map (the hardened codec's encoding)."""
        cached = self.__dict__.get("_bytes")
        if cached is None:
            cached = dumps_value(
                {
                    "format": FORMAT_NAME,
                    "format_version": FORMAT_VERSION,
                    **{f.name: getattr(self, f.name) for f in fields(self)},
                }
            )
            self.__dict__["_bytes"] = cached
        return cached

    @classmethod
    def from_bytes(cls, data: bytes, *, max_bytes: int) -> ModelBundle:
        """Decode (hostile input; nothing beyond the envelope is parsed) and type-check a bundle.
        Does NOT check the signature: call ``verify`` before using anything in it."""
        try:
            obj = loads_value(data, max_bytes=max_bytes)
        except MessageTooLarge as exc:
            raise BundleError(f"model bundle refused: {exc} (raise max_bytes if such models are expected)") from exc
        except DecodeError as exc:
            raise BundleError(
                f"model bundle is not well-formed CBOR ({type(exc).__name__}: {exc}); it was truncated or "
                "corrupted in transit, or is not a model bundle: fetch it again"
            ) from exc
        if not isinstance(obj, dict):
            raise BundleError(f"a model bundle is a CBOR map, got {type(obj).__name__}")
        expected = {*_WIRE_KEYS, *(f.name for f in fields(cls))}
        missing, extra = sorted(expected - set(obj)), sorted(set(obj) - expected)
        if missing or extra:
            raise BundleError(f"not a {FORMAT_NAME}: missing keys {missing}, unexpected keys {extra}")
        if obj["format"] != FORMAT_NAME or type(obj["format"]) is not str:
            raise BundleError(f"not a model bundle: format is {obj['format']!r}, expected {FORMAT_NAME!r}")
        if type(obj["format_version"]) is not int or obj["format_version"] != FORMAT_VERSION:
            raise BundleError(
                f"model bundle format version {obj['format_version']!r} is not supported (this gateway reads "
                f"version {FORMAT_VERSION}): update the gateway software"
            )
        return cls(**{f.name: obj[f.name] for f in fields(cls)})

    @property
    def sha256(self) -> bytes:
        """SHA-256 of ``to_bytes()`` (32 bytes, as ``ModelAnnouncement.sha256`` carries it)."""
        return hashlib.sha256(self.to_bytes()).digest()

    # --- signature ----------------------------------------------------------------------------------
    def signed_payload(self) -> bytes:
        """The exact bytes the signature covers: ``SIGNED_DOMAIN`` + every field but the signature."""
        out = [SIGNED_DOMAIN]
        for f in fields(self):
            if f.name != "signature":
                out.append(_frame(f.name, getattr(self, f.name)))
        return b"".join(out)

    def verify(self, keys: VerifyKey | Iterable[VerifyKey]) -> VerifyKey:
        """Check the signature against the trusted key with this bundle's key id (one key, or
        several during a key rotation); returns that key. Raises ``BadSignature``."""
        key = _trusted_key(keys, self.key_id, self._name(), "the bundle")
        if not self.signature:
            raise BadSignature(f"{self._name()} is not signed")
        try:
            key.verify(self.signed_payload(), self.signature)
        except BadSignature as exc:
            raise BadSignature(f"{self._name()}: {exc}; do not use it") from None
        return key

    # --- use ------------------------------------------------------------------------------------
    def check_compatible(self, feature_set_version: str) -> None:
        """Raise ``IncompatibleBundle`` unless the model expects the gateway's feature set."""
        if self.feature_set_version != feature_set_version:
            raise IncompatibleBundle(
                f"{self._name()} expects feature set {self.feature_set_version!r} but this gateway computes "
                f"{feature_set_version!r}: update the gateway's feature pipeline, or have the aggregator "
                f"train a model for {feature_set_version!r}"
            )

    def check_target(self, client_id: str) -> None:
        """Raise ``IncompatibleBundle`` if this is a personalised model for another client."""
        if self.target and self.target != client_id:
            raise IncompatibleBundle(
                f"{self._name()} is personalised for client {self.target!r}, not for {client_id!r}: "
                "check the MQTT topic / routing"
            )

    def model(self) -> TreeEnsemble:
        """Decode and fully validate the model, and check it matches the bundle's header."""
        cached = self.__dict__.get("_model")
        if cached is not None:
            return cached
        try:
            model = TreeEnsemble.from_cbor(self.model_cbor, max_bytes=len(self.model_cbor))
        except (DecodeError, ModelValidationError) as exc:
            raise BundleError(f"{self._name()}: the model inside does not decode or validate: {exc}") from exc
        if model.kind != self.kind or model.feature_set_version != self.feature_set_version:
            raise BundleError(
                f"{self._name()}: header says kind {self.kind!r} / feature set {self.feature_set_version!r} "
                f"but the model is {model.kind!r} / {model.feature_set_version!r} (aggregator bug)"
            )
        n_in = _n_input_features(model)
        if self.self_test_inputs.shape[1] != n_in or self.self_test_outputs.shape[1] != model.n_outputs:
            raise BundleError(
                f"{self._name()}: self-test has {self.self_test_inputs.shape[1]} inputs / "
                f"{self.self_test_outputs.shape[1]} outputs per row, the model takes {n_in} / gives "
                f"{model.n_outputs} (aggregator bug)"
            )
        self.__dict__["_model"] = model
        return model

    def self_test(self, engine: Engine | None = None, *, atol: float = SELF_TEST_ATOL) -> float:
        """Recompute the self-test outputs and compare within ``atol``; returns the largest
        absolute difference, raises ``SelfTestFailed``. ``engine`` (default: the numpy engine,
        ``TreeEnsemble.predict_raw``) is a callable or has ``predict_raw``; it receives
        ``model_inputs(model, inputs, client index of target)`` (float64, (n_rows, n_features))."""
        model = self.model()
        expected = self.self_test_outputs
        try:
            got = np.asarray(_raw_outputs(model, self.self_test_inputs, self.target, engine), dtype=np.float64)
        except (ValueError, TypeError, IndexError) as exc:
            raise SelfTestFailed(f"{self._name()}: the engine failed on the self-test rows: {exc}") from exc
        if got.shape != expected.shape:
            raise SelfTestFailed(
                f"{self._name()}: the engine returned shape {got.shape} for the self-test, expected {expected.shape}"
            )
        both_nan = np.isnan(got) & np.isnan(expected)
        diff = np.where(both_nan, 0.0, np.abs(got - expected))
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = float(diff.max()) if diff.size else 0.0
        if not worst <= atol:
            row, col = np.unravel_index(int(np.argmax(diff)), diff.shape)
            raise SelfTestFailed(
                f"{self._name()}: self-test failed: row {row} output {col} is {got[row, col]!r}, the aggregator "
                f"computed {expected[row, col]!r} (max |difference| {worst:.3g} > {atol:g}); this gateway's "
                "inference disagrees with the aggregator's, do not use the model"
            )
        return worst

    # --- misc ---------------------------------------------------------------------------------------
    def _name(self) -> str:
        return f"model bundle {self.model_id!r} v{self.version}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelBundle):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # unhashable: equality compares the encoded bundles

    def __repr__(self) -> str:
        target = f", target={self.target!r}" if self.target else ""
        return (
            f"ModelBundle(model_id={self.model_id!r}, version={self.version}, algorithm={self.algorithm!r}, "
            f"kind={self.kind!r}, feature_set_version={self.feature_set_version!r}{target}, "
            f"key_id={self.key_id!r}, {len(self.model_cbor)} model bytes)"
        )


def rollback_payload(request: ModelRollback) -> bytes:
    """The exact bytes a rollback's signature covers: ``ROLLBACK_DOMAIN`` + every other field."""
    return ROLLBACK_DOMAIN + b"".join(
        _frame(f.name, getattr(request, f.name)) for f in fields(request) if f.name != "signature"
    )


def sign_rollback(
    signing_key: SigningKey,
    *,
    client: str,
    model_id: str,
    version: int,
    replaces_model_id: str,
    replaces_version: int,
    reason: str = "",
    issued_ns: int | None = None,
) -> ModelRollback:
    """The aggregator's signed instruction to gateway ``client``: replace ``replaces_model_id``
    v``replaces_version`` (what it runs) with ``model_id`` v``version`` (its previous model).
    Naming one gateway and both models is what keeps a replayed copy harmless (see
    ``edge_client.models.ModelManager.rollback``); ``issued_ns`` defaults to now."""
    if not isinstance(signing_key, SigningKey):
        raise TypeError(f"signing_key must be a shared.signing.SigningKey, got {type(signing_key).__name__}")
    if not client:
        raise ValueError("a rollback names the gateway it is for: client must not be empty")
    if not model_id or not replaces_model_id or version < 0 or replaces_version < 0:
        raise ValueError(
            f"a rollback names both models and versions: got {replaces_model_id!r} "
            f"v{replaces_version} -> {model_id!r} v{version}"
        )
    unsigned = ModelRollback(
        reason,
        model_id,
        version,
        replaces_model_id,
        replaces_version,
        client,
        time.time_ns() if issued_ns is None else issued_ns,
        signing_key.key_id,
        b"",
    )
    return replace(unsigned, signature=signing_key.sign(rollback_payload(unsigned)))


def verify_rollback(request: ModelRollback, keys: VerifyKey | Iterable[VerifyKey]) -> VerifyKey:
    """Check a rollback's signature against the trusted key with its key id; returns that key.
    Raises ``BadSignature`` -- for an unsigned rollback too, with a reason saying so."""
    what = "rollback"
    if not request.signature:
        raise BadSignature(
            "unsigned: this rollback carries no signature (sent by a WheelFed from before "
            "rollbacks were signed, or not by the aggregator); refused"
        )
    key = _trusted_key(keys, request.key_id, what, "the rollback")
    try:
        key.verify(rollback_payload(request), request.signature)
    except BadSignature as exc:
        raise BadSignature(f"{what}: {exc}; refused") from None
    return key


def open_bundle(
    data: bytes,
    *,
    trusted_keys: VerifyKey | Iterable[VerifyKey],
    max_bytes: int,
    feature_set_version: str | None = None,
    client_id: str | None = None,
    engine: Engine | None = None,
) -> tuple[ModelBundle, TreeEnsemble]:
    """A gateway's whole check, in the safe order: decode the envelope, verify the signature,
    check feature set / target (when given), decode the model, run the self-test."""
    bundle = ModelBundle.from_bytes(data, max_bytes=max_bytes)
    bundle.verify(trusted_keys)
    if feature_set_version is not None:
        bundle.check_compatible(feature_set_version)
    if client_id is not None:
        bundle.check_target(client_id)
    model = bundle.model()
    bundle.self_test(engine)
    return bundle, model


# --- helpers ----------------------------------------------------------------------------------------
_INT64 = (-(2**63), 2**63 - 1)


def _trusted_key(keys: VerifyKey | Iterable[VerifyKey], wanted: str, name: str, it: str) -> VerifyKey:
    """The trusted key with key id ``wanted`` (one key, or several during a key rotation), else
    ``BadSignature`` naming both ends: a rotated key is fixed by provisioning, a foreign one not."""
    trusted = [keys] if isinstance(keys, VerifyKey) else list(keys)
    if not trusted or not all(isinstance(key, VerifyKey) for key in trusted):
        raise TypeError("verify needs a VerifyKey or a non-empty collection of VerifyKeys")
    key = next((key for key in trusted if key.key_id == wanted), None)
    if key is None:
        raise BadSignature(
            f"{name} is signed with key {wanted or '(none)'}, but this gateway trusts only "
            f"{', '.join(k.key_id for k in trusted)}: if the aggregator's key was rotated, provision "
            f"its new public key file; otherwise {it} did not come from your aggregator"
        )
    return key


def _check_fields(bundle: ModelBundle) -> None:
    def fail(name: str, problem: str) -> None:
        raise BundleError(f"model bundle field {name!r}: {problem}")

    for name in ("model_id", "algorithm", "feature_set_version", "kind", "target", "key_id"):
        if type(getattr(bundle, name)) is not str:
            fail(name, f"expected str, got {type(getattr(bundle, name)).__name__}")
    if not bundle.model_id:
        fail("model_id", "must not be empty")
    if bundle.kind not in KINDS:
        fail("kind", f"must be one of {KINDS}, got {bundle.kind!r}")
    if not _KEY_ID.match(bundle.key_id):
        fail("key_id", f"must be 16 lowercase hex digits, got {bundle.key_id!r}")
    if type(bundle.version) is not int or not 0 <= bundle.version <= _INT64[1]:
        fail("version", f"must be an int in [0, 2**63), got {bundle.version!r}")
    if type(bundle.created) is not float or not math.isfinite(bundle.created):
        fail("created", f"must be a finite float (Unix time), got {bundle.created!r}")
    for name in ("model_cbor", "signature"):
        if type(getattr(bundle, name)) is not bytes:
            fail(name, f"expected bytes, got {type(getattr(bundle, name)).__name__}")
    if not bundle.model_cbor:
        fail("model_cbor", "is empty")
    inputs, outputs = bundle.self_test_inputs, bundle.self_test_outputs
    for name, array, dtype in (("self_test_inputs", inputs, np.float32), ("self_test_outputs", outputs, np.float64)):
        if not isinstance(array, np.ndarray) or array.dtype.newbyteorder("=") != np.dtype(dtype) or array.ndim != 2:
            got = f"{array.ndim}-D {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
            fail(name, f"expected a 2-D {np.dtype(dtype)} array, got {got}")
    if inputs.shape[0] != outputs.shape[0] or inputs.shape[0] == 0:
        fail("self_test_outputs", f"{outputs.shape[0]} rows for {inputs.shape[0]} input rows (need >= 1, equal)")


def _frame(name: str, value: Any) -> bytes:
    """One field of the signed payload: name, a type byte, length-prefixed value bytes."""
    if type(value) is str:
        kind, data = b"s", value.encode("utf-8")
    elif type(value) is int:
        kind, data = b"i", struct.pack(">q", value)
    elif type(value) is float:
        kind, data = b"f", struct.pack(">d", value)
    elif type(value) is bytes:
        kind, data = b"b", value
    elif isinstance(value, np.ndarray):
        little = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        header = little.dtype.str.encode("ascii") + struct.pack(f">B{value.ndim}Q", value.ndim, *value.shape)
        kind, data = b"a", struct.pack(">H", len(header)) + header + little.tobytes()
    else:  # unreachable after _check_fields
        raise TypeError(f"cannot sign field {name!r} of type {type(value).__name__}")
    encoded = name.encode("ascii")
    return struct.pack(">H", len(encoded)) + encoded + kind + struct.pack(">Q", len(data)) + data


def _n_input_features(model: TreeEnsemble) -> int:
    """Columns a caller supplies: the client-index column is appended by ``model_inputs``."""
    return model.n_features - (1 if uses_client_index(model) else 0)


def _raw_outputs(model: TreeEnsemble, inputs: np.ndarray, target: str, engine: Engine | None) -> np.ndarray:
    X = model_inputs(model, inputs, client_index(model, target) if target else -1)
    if engine is None:
        out = model.predict_raw(X)
    elif callable(engine):
        out = engine(X)
    else:
        out = engine.predict_raw(X)
    return np.asarray(out, dtype=np.float64)


def _self_test_rows(model: TreeEnsemble, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """float32 rows whose values sit on, just below and just above the model's thresholds, on
    and off its category sets, with some NaN (missing) values: many different paths."""
    n_in = _n_input_features(model)
    thresholds: list[list[float]] = [[] for _ in range(n_in)]
    codes: list[list[int]] = [[] for _ in range(n_in)]
    for tree in model.trees:
        for node in np.flatnonzero(tree.feature >= 0):
            feature = int(tree.feature[node])
            if feature >= n_in:
                continue  # the client-index column
            if tree.is_categorical[node]:
                codes[feature].extend(
                    int(c) for c in tree.cat_values[tree.cat_offsets[node] : tree.cat_offsets[node + 1]]
                )
            else:
                thresholds[feature].append(float(tree.threshold[node]))
    rows = np.zeros((n_rows, n_in), dtype=np.float32)
    for j in range(n_in):
        for i in range(n_rows):
            choice = rng.random()
            if choice < 0.1:
                value = np.float32(np.nan)
            elif codes[j] and (not thresholds[j] or choice < 0.5):
                code = int(rng.choice(codes[j]))
                value = np.float32(code + (1 if rng.random() < 0.3 else 0))
            elif thresholds[j]:
                t = np.float32(rng.choice(thresholds[j]))
                step = rng.integers(-1, 2)
                value = t if step == 0 else np.nextafter(t, np.float32(np.inf if step > 0 else -np.inf))
                if not np.isfinite(value):
                    value = t
            else:
                value = np.float32(rng.normal())
            rows[i, j] = value
    return rows
