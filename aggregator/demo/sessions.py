"""The demo's recorded sessions: real seglearn subjects, labelled only at the start.

Each subject's session (series in a per-subject random order, so "the first minutes" cover
different exercises on different gateways) keeps the label track of its first
``labelled_fraction`` only -- clipped at that point -- plus, arriving later in the stream, the
next ``later_fraction`` (annotations a carer enters afterwards: what periodic retraining uses).
Everything after is an unlabelled live stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from firmware_bridge.frames import Annotation
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.recording import LabelRecord, Recording
from firmware_bridge.replay import schedule

__all__ = ["Session", "prepare_sessions"]

#: Per-subject series order (any fixed seed; recorded in each recording's metadata).
SERIES_SEED = 7


@dataclass(frozen=True, eq=False)
class Session:
    """One gateway's replay: its recording (label track cut), and the stream positions (seconds
    from the start) where the first and the later labels end."""

    client_id: str
    path: Path
    recording: Recording
    duration_s: float
    first_labels_end_s: float
    later_labels_end_s: float


def _clip_labels(recording: Recording, until_us: int) -> list[LabelRecord]:
    out = []
    for record in recording.label_records:
        a = record.annotation
        if a.start_us >= until_us:
            continue
        end = a.end_us if a.end_us is None else min(a.end_us, until_us)
        out.append(LabelRecord(record.time_us, Annotation(a.label, a.start_us, end, a.annotation_id, a.source_id)))
    return out


def prepare_sessions(out_dir: Path, n_subjects: int, labelled_fraction: float, later_fraction: float) -> list[Session]:
    """Import the bundled recordings and cut their label tracks (see the module docstring)."""
    paths = seglearn_watch.import_all(out_dir, shuffle_seed=SERIES_SEED)[:n_subjects]
    sessions = []
    for i, path in enumerate(paths):
        full = Recording.load(path)
        plan = schedule(full)
        first_us, last_us = plan[0].at_us, plan[-1].at_us
        duration = (last_us - first_us) / 1e6
        cut1 = first_us + int(labelled_fraction * (last_us - first_us))
        cut2 = first_us + int((labelled_fraction + later_fraction) * (last_us - first_us))
        recording = replace(full, label_records=_clip_labels(full, cut2))
        sessions.append(
            Session(f"gw-{i + 1:02d}", path, recording, duration, (cut1 - first_us) / 1e6, (cut2 - first_us) / 1e6)
        )
    return sessions
