"""The gateway's models on disk and in memory: verify, persist, activate, roll back.

Three files in the model directory, each written atomically (temp file + fsync + rename):
``active.bundle`` (what runs), ``previous.bundle`` (what ran before; a rollback swaps them) and
``accepted.json`` (per model id the highest version ever activated here, and the issue time of
the last rollback applied). At start the gateway loads ``active.bundle`` -- no network needed --
and falls back to the previous one if the active one no longer passes its checks.

Versions only go forward, per model id. A signature says who made a bundle, not that it is
still wanted: anyone who recorded the push of v1 could send it again to a gateway running v2.
So a bundle whose version is at most the highest one accepted for its model id is refused as a
downgrade -- unless it is the very model running now (same id, version and model bytes), which
is the idempotent "unchanged" of a retried deploy. A new model id has no history: its first
version is accepted, and switching to it leaves the other ids' records alone, so a replay of an
id's earlier releases stays refused. ``accepted.json`` is written after the new active file, and
at start it is raised to the versions of the stored bundles, so a crash in between or a lost
record never lowers the floor below what is on disk.

Going back is only by a signed rollback (``shared.model.bundle.sign_rollback``), which names this
gateway, the model it replaces and the previous model it returns to. It applies only if those
are exactly this gateway's active and previous models, and only if it was issued after the last
rollback applied here (the aggregator's clock, recorded in ``accepted.json``). A replayed copy
therefore does nothing: right after it was applied the models are already swapped ("already
applied"); after a later deploy it names a model no longer running; and after the models
happen to match again (rolled back and forward) it is older than the rollback that did that.

A pushed bundle must pass, in this order, before it replaces anything (``shared.model.bundle``):
the aggregator's signature (the gateway holds only public keys), its target (a personalised
model for another gateway is refused), its feature-set version (when the gateway knows its own),
decoding + validation of the model, and the self-test (this gateway's engine must reproduce the
aggregator's outputs on the bundled inputs). A rejected bundle changes nothing: the previous
model keeps running, and the status says why.

The swap is one reference assignment under a lock: the predictor reads ``current`` once per
window, so a window is always scored by one whole model.

A gateway without trusted keys (started without ``--trust``) can verify nothing, so it runs
nothing: a push is refused with the reason (``no_trusted_key: ...``, shown by the aggregator),
and a model stored by an earlier run is not loaded -- its signature is what proves the file was
not replaced on disk -- but stays where it is for the next start with ``--trust``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from shared.model import TreeEnsemble, client_index
from shared.model.bundle import BundleError, ModelBundle, open_bundle, verify_rollback
from shared.protocol.errors import DecodeError
from shared.protocol.messages.deployment import ModelRollback, ModelState, ModelStatus
from shared.signing import BadSignature, VerifyKey

from .engines import Engine, EnginePreference, choose_engine

log = logging.getLogger(__name__)

__all__ = ["ACCEPTED", "InstalledModel", "ModelDirError", "ModelManager", "NO_TRUSTED_KEY", "check_model_dir"]

#: Largest bundle a gateway accepts.
MAX_BUNDLE_BYTES = 64 << 20
ACTIVE, PREVIOUS, ACCEPTED = "active.bundle", "previous.bundle", "accepted.json"
NO_TRUSTED_KEY = (
    "no_trusted_key: this gateway was started without --trust, so it cannot verify a model; "
    "restart it with --trust aggregator.pub"
)


class ModelDirError(Exception):
    """The model directory cannot be created or written: a push could never be kept."""


def check_model_dir(directory: Path) -> None:
    """Raise ``ModelDirError`` unless ``directory`` is, or can be made, a writable folder --
    without creating anything, so a gateway can check it before it opens its store."""
    existing = directory
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ModelDirError(f"cannot create the model directory {directory}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == directory else f"cannot be created in {existing}"
        raise ModelDirError(
            f"the model directory {directory} {what} (permission denied; pushed models are kept "
            "there): give the gateway's user write access, or pass another --model-dir"
        )


@dataclass(frozen=True, eq=False)
class InstalledModel:
    """A verified model ready to run: its bundle, the decoded model, the engine, and this
    gateway's client index in the model's fleet (for client-indicator splits; -1 if none)."""

    bundle: ModelBundle
    model: TreeEnsemble
    engine: Engine
    client_index: int

    @property
    def label(self) -> str:
        return f"{self.bundle.model_id}:v{self.bundle.version}"

    @cached_property
    def class_names(self) -> tuple[str, ...]:
        """The model's classes as the strings predictions carry."""
        return tuple(str(c) for c in self.model.classes)


class ModelManager:
    """Models of one gateway (``client_id``) in ``directory``, trusted by ``keys``."""

    def __init__(
        self,
        directory: str | Path,
        client_id: str,
        keys: Iterable[VerifyKey],
        *,
        feature_set_version: Callable[[], str] = lambda: "",
        engine: EnginePreference = "auto",
    ) -> None:
        self.directory = Path(directory)
        check_model_dir(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.client_id = client_id
        self.keys = list(keys)
        self.feature_set_version = feature_set_version
        self.engine_preference = engine
        self._lock = threading.Lock()
        self._current: InstalledModel | None = None
        self._previous_version = -1
        self.last_error = ""
        self._accepted, self._last_rollback_ns = self._read_record()

    @property
    def current(self) -> InstalledModel | None:
        return self._current

    def status(self, state: ModelState, reason: str = "") -> ModelStatus:
        current = self._current
        return ModelStatus(
            state,
            current.bundle.model_id if current else "",
            current.bundle.version if current else -1,
            self._previous_version,
            reason,
        )

    # -- checks ----------------------------------------------------------------------------------

    def _open(self, data: bytes) -> InstalledModel:
        """Every check of the module docstring; raises ``BundleError``/``BadSignature``/...."""
        fsv = self.feature_set_version() or None
        bundle, model = open_bundle(
            data, trusted_keys=self.keys, max_bytes=MAX_BUNDLE_BYTES, feature_set_version=fsv, client_id=self.client_id
        )
        engine = choose_engine(model, model.n_features, self.engine_preference)
        if engine.name != "numpy":
            bundle.self_test(engine.raw)  # the engine that will run must reproduce the outputs too
        return InstalledModel(bundle, model, engine, client_index(model, self.client_id))

    # -- operations ------------------------------------------------------------------------------

    def load(self) -> InstalledModel | None:
        """At start: the stored active model, else the previous one (logged), else none."""
        if not self.keys:
            stored = [name for name in (ACTIVE, PREVIOUS) if (self.directory / name).exists()]
            if stored:
                label = self._label_of(stored[0])
                self.last_error = f"{label} not loaded: {NO_TRUSTED_KEY}"
                log.warning(
                    "the stored model cannot be verified without --trust and is not loaded (windows are "
                    "still collected); restart with --trust aggregator.pub to run it",
                    extra={"model": label, "file": str(self.directory / stored[0])},
                )
            return None
        for name in (ACTIVE, PREVIOUS):
            path = self.directory / name
            if not path.exists():
                continue
            try:
                installed = self._open(path.read_bytes())
            except (BundleError, BadSignature, DecodeError, ValueError, OSError) as exc:
                log.error("stored model unusable", extra={"file": str(path), "error": str(exc)})
                self.last_error = f"{name}: {exc}"
                continue
            with self._lock:
                self._current = installed
                self._previous_version = self._version_of(PREVIOUS) if name == ACTIVE else -1
            log.info("model loaded", extra={"model": installed.label, "engine": installed.engine.name})
            return installed
        return None

    def install(self, data: bytes) -> ModelStatus:
        """Verify and activate a pushed bundle; the previous model stays if anything fails."""
        if not self.keys:
            self.last_error = NO_TRUSTED_KEY
            log.warning("model push refused: no trusted key (start the gateway with --trust)")
            return self.status("rejected", NO_TRUSTED_KEY)
        try:
            installed = self._open(data)
        except (BundleError, BadSignature, DecodeError, ValueError) as exc:
            self.last_error = str(exc)
            log.warning("model rejected", extra={"error": str(exc)})
            return self.status("rejected", f"{type(exc).__name__}: {exc}")
        current = self._current
        if current is not None and (current.bundle.model_id, current.bundle.version) == (
            installed.bundle.model_id,
            installed.bundle.version,
        ):
            if current.bundle.model_cbor == installed.bundle.model_cbor:
                return self.status("unchanged", "this model is already active")
            return self.status(
                "rejected",
                f"{installed.label} is already active with different content: a version number must not be reused",
            )
        downgrade = self._downgrade(installed.bundle)
        if downgrade:
            self.last_error = downgrade
            log.warning("model refused as a downgrade", extra={"model": installed.label, "error": downgrade})
            return self.status("rejected", downgrade)
        with self._lock:
            if (self.directory / ACTIVE).exists():
                os.replace(self.directory / ACTIVE, self.directory / PREVIOUS)
            _write_atomically(self.directory / ACTIVE, data)
            self._previous_version = current.bundle.version if current else -1
            self._current = installed
            self._accepted[installed.bundle.model_id] = installed.bundle.version
            self._write_record()
        log.info("model activated", extra={"model": installed.label, "engine": installed.engine.name})
        return self.status("active")

    def _downgrade(self, bundle: ModelBundle) -> str:
        """Why ``bundle`` is refused as a replayed or older release, or "" if it is newer."""
        highest = self._accepted.get(bundle.model_id, -1)
        label = f"{bundle.model_id}:v{bundle.version}"
        if bundle.version < highest:
            return (
                f"downgrade: {label} is older than {bundle.model_id}:v{highest} already accepted on this "
                "gateway; roll back with a signed rollback instead (wheelfed model rollback), or deploy a "
                "newer version"
            )
        if bundle.version == highest:
            runs = self._current.label if self._current else "no model"
            return (
                f"downgrade: {label} was already accepted on this gateway and since replaced ({runs} runs "
                "now); to run it again roll back with a signed rollback (wheelfed model rollback), or "
                "deploy a newer version"
            )
        return ""

    def rollback(self, request: ModelRollback) -> ModelStatus:
        """Apply a signed rollback: swap active and previous if it is for this gateway, newer
        than the last one applied, and names exactly the active and previous models (which must
        still pass every check). Anything else changes nothing and says why (module docstring)."""
        if not self.keys:
            return self.status("rejected", NO_TRUSTED_KEY)
        refusal = self._rollback_refusal(request)
        if refusal:
            state, reason = refusal
            log.warning("rollback not applied", extra={"state": state, "reason": reason})
            return self.status(state, reason)
        leaving = (request.replaces_model_id, request.replaces_version)
        target = (request.model_id, request.version)
        previous = self.directory / PREVIOUS
        try:
            installed = self._open(previous.read_bytes())
        except (BundleError, BadSignature, DecodeError, ValueError) as exc:
            return self.status("rejected", f"the previous model no longer passes its checks: {exc}")
        if _key(installed.bundle) != target:
            return self.status(
                "rejected",
                f"stale: this gateway's previous model is {installed.label}, not {_label(target)}; nothing changed",
            )
        with self._lock:
            active = self.directory / ACTIVE
            swap = self.directory / "swap.bundle"
            os.replace(previous, swap)
            if active.exists():
                os.replace(active, previous)
            os.replace(swap, active)
            self._previous_version = leaving[1]
            self._current = installed
            self._last_rollback_ns = request.issued_ns
            self._write_record()
        log.warning("model rolled back", extra={"model": installed.label, "reason": request.reason})
        return self.status("active", f"rolled back: {request.reason}" if request.reason else "rolled back")

    def _rollback_refusal(self, request: ModelRollback) -> tuple[ModelState, str] | None:
        """``(state, reason)`` if ``request`` must not be applied, checked from the signature to
        the models it names (the previous model itself is checked by ``rollback``)."""
        try:
            verify_rollback(request, self.keys)
        except BadSignature as exc:
            return "rejected", str(exc)
        if request.client != self.client_id:
            return "rejected", f"misaddressed: this rollback is for {request.client}, not for {self.client_id}"
        current = self._current
        runs = _key(current.bundle) if current else None
        target, leaving = (request.model_id, request.version), (request.replaces_model_id, request.replaces_version)
        if request.issued_ns <= self._last_rollback_ns:
            if request.issued_ns == self._last_rollback_ns and runs == target:
                return "unchanged", f"already applied: this rollback made {_label(target)} active"
            last = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self._last_rollback_ns / 1e9))
            return "rejected", (
                f"replayed: this rollback ({_label(leaving)} -> {_label(target)}) was issued no later "
                f"than the last rollback applied here ({last}); nothing changed. If it is new, the "
                "aggregator's clock is behind: correct it and ask again"
            )
        if not (self.directory / PREVIOUS).exists():
            return "unchanged", "there is no previous model to roll back to"
        if runs != leaving:
            return "rejected", (
                f"stale: this gateway runs {_label(runs) if runs else 'no model'}, not "
                f"{_label(leaving)}; nothing changed (the answer tells the registry what it runs: "
                "ask again)"
            )
        return None

    # -- the record of accepted versions -----------------------------------------------------------

    def _read_record(self) -> tuple[dict[str, int], int]:
        """``accepted.json`` raised to the versions of the stored bundles (their envelopes only:
        whoever can write this folder can replace the models anyway). An unreadable record is
        rebuilt from them, and ``last_error`` says so."""
        accepted: dict[str, int] = {}
        last_rollback_ns = 0
        path = self.directory / ACCEPTED
        if path.exists():
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                accepted = {str(k): int(v) for k, v in record["versions"].items()}
                last_rollback_ns = int(record["last_rollback_ns"])
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                self.last_error = f"{ACCEPTED} unreadable ({exc}); rebuilt from the stored models"
                log.error(
                    "record of accepted model versions unreadable; rebuilt from the stored models",
                    extra={"file": str(path), "error": str(exc)},
                )
        for name in (ACTIVE, PREVIOUS):
            bundle = self._unverified(name)
            if bundle is not None:
                accepted[bundle.model_id] = max(accepted.get(bundle.model_id, -1), bundle.version)
        return accepted, last_rollback_ns

    def _write_record(self) -> None:
        record = {"versions": dict(sorted(self._accepted.items())), "last_rollback_ns": self._last_rollback_ns}
        _write_atomically(self.directory / ACCEPTED, (json.dumps(record, indent=1) + "\n").encode())

    def _version_of(self, name: str) -> int:
        bundle = self._unverified(name)
        return -1 if bundle is None else bundle.version

    def _label_of(self, name: str) -> str:
        bundle = self._unverified(name)
        return name if bundle is None else f"{bundle.model_id}:v{bundle.version}"

    def _unverified(self, name: str) -> ModelBundle | None:
        """A stored bundle's envelope, for naming it only: nothing in it is trusted."""
        try:
            return ModelBundle.from_bytes((self.directory / name).read_bytes(), max_bytes=MAX_BUNDLE_BYTES)
        except (BundleError, DecodeError, ValueError, OSError):
            return None


def _key(bundle: ModelBundle) -> tuple[str, int]:
    return bundle.model_id, bundle.version


def _label(key: tuple[str, int]) -> str:
    return f"{key[0]}:v{key[1]}"


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
