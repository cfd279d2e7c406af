"""Writes that wait in memory while the disk under the window store is full.

A gateway cannot stop a wheelchair's sensors when its SD card fills up, and a window it fails to
store is a window lost for training. So the frame processor hands every write (a window, an
annotation's label range) to a ``StoreBacklog``: the write goes to the store at once if it can;
if the store says ``StoreFull`` the write waits here, and so does every later one -- in arrival
order, because a label applies to the windows stored before it and a window inserted after its
annotation is labelled on insert. Each new write first retries the waiting ones, so the store
catches up as soon as the operator makes room (or retention frees pages).

The wait is bounded (``max_pending`` writes, ~1.6 KB each for a 200-feature window): beyond it the
oldest waiting *window* is dropped and counted (labels are kept: they are small and they are
what makes windows useful). One warning line per episode, one line when it ends.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from .store import StoreFull, WindowRecord, WindowStore

log = logging.getLogger(__name__)

#: 3,600 windows: two hours of 2 s window steps, ~6 MB of 200-feature float64 windows in memory.
DEFAULT_MAX_PENDING = 3_600


@dataclass(frozen=True)
class WindowWrite:
    record: WindowRecord

    def apply(self, store: WindowStore) -> int | None:
        return store.add(self.record)


@dataclass(frozen=True)
class LabelWrite:
    session_id: str
    start_us: int
    end_us: int
    label: str

    def apply(self, store: WindowStore) -> int:
        return store.label_range(self.session_id, self.start_us, self.end_us, self.label)


PendingWrite = WindowWrite | LabelWrite


class Outcome(NamedTuple):
    """What became of a submitted write: stored now (with the store's return value) or waiting."""

    stored: bool
    result: int | None = None


class StoreBacklog:
    """Applies writes to ``store`` in arrival order; holds them while the disk is full."""

    def __init__(self, store: WindowStore, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.store = store
        self.max_pending = max_pending
        self._waiting: deque[PendingWrite] = deque()
        self.dropped_windows = 0  # windows given up because the wait overflowed
        self.late_windows = 0  # windows stored after waiting
        self.episodes = 0  # times the disk became full
        self._warned_overflow = False

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, write: PendingWrite) -> Outcome:
        """Store ``write`` now if the disk allows and nothing waits before it; else hold it."""
        if self._waiting and not self.flush():
            self._hold(write)
            return Outcome(False)
        try:
            return Outcome(True, write.apply(self.store))
        except StoreFull as exc:
            self._start_episode(exc)
            self._hold(write)
            return Outcome(False)

    def flush(self) -> bool:
        """Store what waits, oldest first; True when nothing waits any more."""
        stored = 0
        while self._waiting:
            try:
                self._waiting[0].apply(self.store)
            except StoreFull:
                return False
            self.late_windows += isinstance(self._waiting.popleft(), WindowWrite)
            stored += 1
        if stored:
            log.info(
                "window store has room again: the waiting windows and labels are stored",
                extra={"stored": stored, "dropped_windows": self.dropped_windows},
            )
            self._warned_overflow = False
        return True

    def _start_episode(self, exc: StoreFull) -> None:
        self.episodes += 1
        log.warning(
            "window store: disk full -- windows and labels wait in memory until there is room",
            extra={"reason": str(exc), "max_pending": self.max_pending},
        )

    def _hold(self, write: PendingWrite) -> None:
        self._waiting.append(write)
        if len(self._waiting) <= self.max_pending:
            return
        oldest = next((i for i, w in enumerate(self._waiting) if isinstance(w, WindowWrite)), None)
        if oldest is None:  # only labels wait: they are kept, and each is a few bytes
            return
        del self._waiting[oldest]
        self.dropped_windows += 1
        if not self._warned_overflow:
            self._warned_overflow = True
            log.warning(
                "window store still full: the oldest waiting windows are dropped (counted as unstored)",
                extra={"max_pending": self.max_pending},
            )
