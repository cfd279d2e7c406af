"""``wheelfed train``'s progress display: one rewritten line with a bar and an ETA on a terminal,
one line per round (with the ETA) in a log."""

from __future__ import annotations

import io

from aggregator.jobs import StepProgress
from aggregator.cli.progress import ProgressDisplay, clock, unit_of


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def step(k: int, total: int = 10, seconds: float = 2.0) -> StepProgress:
    return StepProgress("job-1", "fedscs_xgb", k, total, 3, 3, {"train_loss": 0.5}, seconds)


def test_clock() -> None:
    assert [clock(s) for s in (0, 4.6, 75.2, 3725)] == ["0:00", "0:05", "1:15", "1:02:05"]


def test_a_log_gets_one_line_per_round_with_the_eta() -> None:
    out, now = io.StringIO(), Clock()
    display = ProgressDisplay(out, tty=False, now=now)
    now.t += 7  # the opening took 5 s, the first round 2 s: the ETA counts rounds only
    display(step(1))
    now.t += 2
    display(step(2, seconds=4.0))
    display.finish()
    lines = out.getvalue().splitlines()
    assert lines == [
        step(1).line() + " | elapsed 0:07, ETA 0:18",
        step(2, seconds=4.0).line() + " | elapsed 0:09, ETA 0:24",
    ]


def test_a_terminal_gets_one_rewritten_line_that_never_wraps() -> None:
    out, now = io.StringIO(), Clock()
    display = ProgressDisplay(out, tty=True, columns=200, bar_cells=10, now=now)
    now.t += 3
    display(step(4))
    display(step(5))
    display.finish()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    last = text.split("\r")[-1]
    assert last == "[#####-----] 5/10 boosting rounds | elapsed 0:03, ETA 0:10 | " + step(5).detail() + "\x1b[K\n"
    narrow = io.StringIO()
    ProgressDisplay(narrow, tty=True, columns=40, now=now)(step(1))
    assert len(narrow.getvalue().removeprefix("\r").removesuffix("\x1b[K")) == 39


def test_units_read_either_spelling_of_the_algorithm() -> None:
    assert unit_of("fedscs_xgb") == unit_of("fedscs-xgb") == "boosting rounds"
    assert (unit_of("fedforest"), unit_of("fedga-tree"), unit_of("vertical_forest")) == (
        "levels",
        "generations",
        "steps",
    )
