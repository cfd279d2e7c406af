"""Child process for the kill -9 test: writes windows into a WindowStore as fast as it can.

    python -m tests.edge_client.store_crash_writer DB PROGRESS FIRST_INDEX [LABELS]

Window i is fully determined by i (see ``window``), so the parent can check every stored row.
After each ``add`` returns, i is appended to PROGRESS with a raw ``os.write`` (no buffering, so a
SIGKILL cannot lose an already-reported index). Every 25 windows an annotation over the last 25
windows arrives — after its windows, and overlapping the next one so that the disagreement rule
is exercised — and retention (small bounds) keeps deleting old windows and forgetting annotations.
With LABELS, the index of an annotation's last window (see ``annotation``) is appended to it the
same way after each ``label_range`` returns.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from edge_client.store import RetentionPolicy, WindowRecord, WindowStore

N_FEATURES = 64
STEP_US = 2_000_000
WINDOW_US = 4_000_000
WINDOWS_PER_SESSION = 400
FEATURE_SET = "crash-test-1"
RETENTION = RetentionPolicy(max_windows=1500, check_every=200)


def session_of(i: int) -> str:
    return f"s{i // WINDOWS_PER_SESSION}"


def window(i: int) -> WindowRecord:
    return WindowRecord(
        session_of(i),
        i * STEP_US,
        i * STEP_US + WINDOW_US,
        np.arange(N_FEATURES, dtype=np.float64) * 0.5 + i,
        FEATURE_SET,
    )


def annotation(last: int) -> tuple[int, int, str]:
    """(start_us, end_us, label) of the annotation made after window ``last`` (``last % 25 == 24``)."""
    return (last - 24) * STEP_US, last * STEP_US + WINDOW_US, f"L{(last // 25) % 3}"


def main(db: str, progress: str, first: int, labels: str | None = None) -> None:
    fd = os.open(progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    labels_fd = None if labels is None else os.open(labels, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = WindowStore(db, retention=RETENTION)
    i = first
    while True:
        store.add(window(i))
        os.write(fd, b"%d\n" % i)
        if i % 25 == 24:
            store.label_range(session_of(i), *annotation(i))
            if labels_fd is not None:
                os.write(labels_fd, b"%d\n" % i)
        i += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
