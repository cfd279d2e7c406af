"""The gateway's models on disk and in memory: verify, persist, activate, roll back.

Two files in the model directory, written atomically (temp file + fsync + rename):
``active.bundle`` (what runs) and ``previous.bundle`` (what ran before; a rollback swaps them).
At start the gateway loads ``active.bundle`` -- no network needed -- and falls back to the
previous one if the active one no longer passes its checks.

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

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from shared.model import TreeEnsemble, client_index
from shared.model.bundle import BundleError, ModelBundle, open_bundle
from shared.protocol.errors import DecodeError
from shared.protocol.messages.deployment import ModelStatus
from shared.signing import BadSignature, VerifyKey

from .engines import Engine, EnginePreference, choose_engine

log = logging.getLogger(__name__)

__all__ = ["InstalledModel", "ModelDirError", "ModelManager", "NO_TRUSTED_KEY", "check_model_dir"]

#: Largest bundle a gateway accepts.
MAX_BUNDLE_BYTES = 64 << 20
ACTIVE, PREVIOUS = "active.bundle", "previous.bundle"
NO_TRUSTED_KEY = ("no_trusted_key: this gateway was started without --trust, so it cannot verify a model; "
                  "restart it with --trust aggregator.pub")


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
        raise ModelDirError(f"the model directory {directory} {what} (permission denied; pushed models are kept "
                            "there): give the gateway's user write access, or pass another --model-dir")


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

    def __init__(self, directory: str | Path, client_id: str, keys: Iterable[VerifyKey], *,
                 feature_set_version: Callable[[], str] = lambda: "", engine: EnginePreference = "auto") -> None:
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

    @property
    def current(self) -> InstalledModel | None:
        return self._current

    def status(self, state: str, reason: str = "") -> ModelStatus:
        current = self._current
        return ModelStatus(state, current.bundle.model_id if current else "", current.bundle.version if current else -1,
                           self._previous_version, reason)

    # -- checks ----------------------------------------------------------------------------------

    def _open(self, data: bytes) -> InstalledModel:
        """Every check of the module docstring; raises ``BundleError``/``BadSignature``/...."""
        fsv = self.feature_set_version() or None
        bundle, model = open_bundle(data, trusted_keys=self.keys, max_bytes=MAX_BUNDLE_BYTES,
                                    feature_set_version=fsv, client_id=self.client_id)
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
                log.warning("the stored model cannot be verified without --trust and is not loaded (windows are "
                            "still collected); restart with --trust aggregator.pub to run it",
                            extra={"model": label, "file": str(self.directory / stored[0])})
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
        if current is not None and (current.bundle.model_id, current.bundle.version) == \
                (installed.bundle.model_id, installed.bundle.version):
            if current.bundle.model_cbor == installed.bundle.model_cbor:
                return self.status("unchanged", "this model is already active")
            return self.status("rejected", f"{installed.label} is already active with different content: a "
                                           "version number must not be reused")
        with self._lock:
            if (self.directory / ACTIVE).exists():
                os.replace(self.directory / ACTIVE, self.directory / PREVIOUS)
            _write_atomically(self.directory / ACTIVE, data)
            self._previous_version = current.bundle.version if current else -1
            self._current = installed
        log.info("model activated", extra={"model": installed.label, "engine": installed.engine.name})
        return self.status("active")

    def rollback(self, reason: str = "") -> ModelStatus:
        """Swap active and previous (the previous model must still pass every check)."""
        previous = self.directory / PREVIOUS
        if not previous.exists():
            return self.status("unchanged", "there is no previous model to roll back to")
        if not self.keys:
            return self.status("rejected", NO_TRUSTED_KEY)
        try:
            installed = self._open(previous.read_bytes())
        except (BundleError, BadSignature, DecodeError, ValueError) as exc:
            return self.status("rejected", f"the previous model no longer passes its checks: {exc}")
        with self._lock:
            active = self.directory / ACTIVE
            swap = self.directory / "swap.bundle"
            os.replace(previous, swap)
            if active.exists():
                os.replace(active, previous)
            os.replace(swap, active)
            self._previous_version = self._current.bundle.version if self._current else -1
            self._current = installed
        log.warning("model rolled back", extra={"model": installed.label, "reason": reason})
        return self.status("active", f"rolled back: {reason}" if reason else "rolled back")

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
