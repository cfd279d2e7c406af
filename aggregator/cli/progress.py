"""Training progress on the terminal: a bar with an ETA on a TTY, one line per round otherwise.

A job reports one ``StepProgress`` per boosting round or forest level. On a terminal the
display rewrites a single line (``\\r``) -- bar, steps done of total, elapsed time, ETA, then the
step's ``StepProgress.detail()`` (who answered, metrics) -- cut to the terminal's width so that
it never wraps (a wrapped line cannot be rewritten); the facts that matter come first. In a log
or a pipe every step is its own line with the same facts, because ``\\r`` there would only
garble the file.

The ETA is the mean duration of the steps so far times the steps left: the opening rounds
(secure aggregation keys, the fleet's shape and bin edges) are not steps and do not skew it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from aggregator.algorithm_table import algorithm_row

__all__ = ["ProgressDisplay", "clock", "unit_of"]


def unit_of(algorithm: str) -> str:
    """What one step of ``algorithm`` (either spelling) is, for "4/10 boosting rounds"; "steps"
    for one outside the algorithm table.

    Examples
    --------
    >>> unit_of("fedscs_xgb"), unit_of("fedforest"), unit_of("vertical_forest")
    ('boosting rounds', 'levels', 'steps')
    """
    try:
        return algorithm_row(algorithm).step_unit
    except ValueError:
        return "steps"


def clock(seconds: float) -> str:
    """``75.2`` as ``1:15``, ``3725`` as ``1:02:05``."""
    minutes, secs = divmod(int(round(max(seconds, 0.0))), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class ProgressDisplay:
    """Call it with every ``StepProgress`` (it is the job's ``progress`` callback); ``finish``
    ends the rewritten line before anything else is printed.

    ``tty``: rewrite one line (else a line per step); ``columns``: the terminal's width (read
    from the terminal when None); ``now``: the clock, replaceable in tests.
    """

    stream: TextIO
    tty: bool
    columns: int | None = None
    bar_cells: int = 20
    now: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    _step_seconds: float = field(default=0.0, init=False)
    _steps_seen: int = field(default=0, init=False)
    _open_line: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.started = self.now()

    def __call__(self, progress) -> None:
        self._step_seconds += progress.elapsed_s
        self._steps_seen += 1
        done, total = progress.step, max(progress.total, 1)
        eta = self._step_seconds / self._steps_seen * max(total - done, 0)
        timing = f"elapsed {clock(self.now() - self.started)}, ETA {clock(eta)}"
        if not self.tty:
            print(f"{progress.line()} | {timing}", file=self.stream, flush=True)
            return
        filled = round(self.bar_cells * min(done / total, 1.0))
        text = (
            f"[{'#' * filled}{'-' * (self.bar_cells - filled)}] {done}/{progress.total} "
            f"{unit_of(progress.algorithm)} | {timing} | {progress.detail()}"
        )
        width = (self.columns or shutil.get_terminal_size().columns) - 1
        self.stream.write(f"\r{text[:width]}\x1b[K")
        self.stream.flush()
        self._open_line = True

    def finish(self) -> None:
        """End the rewritten line (no-op when nothing is open)."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
