"""What the server takes from a gateway's word, and how far: window counts it credits, and the
faults it counts instead of logging each.

A gateway's status says how many windows it stores and how many of them are labelled; the
server sums the labelled ones into the fleet's total, which ``/metrics`` shows and retraining
schedules count new windows from (``min_new_windows``). A gateway could lie, so the server
credits a count no faster than a gateway records windows: between two statuses of a gateway,
its credited stored windows grow by at most ``rate`` windows per second of the server's
monotonic clock (:data:`MAX_WINDOWS_PER_S`), its credited labelled windows are at most its
credited stored ones, and a decrease is taken at once. A jump from 0 to 10**9 labelled windows
is credited over the time 10**9 real windows would take, so it starts no retraining job by
itself. The first status of a gateway the registry has never seen is credited at most
``first`` windows (``ServerConfig.new_gateway_windows``, default :data:`NEW_GATEWAY_WINDOWS` =
0): the server has no time of its own over which the gateway could have recorded them, and an
id is cheap, so a new id credited in full could start a scheduled job by lying. From that first
status on, a new gateway's credit grows like any other's, so the windows it recorded before
joining are credited over the time they would take to record (10,000 windows: under three
hours at the default rate). After a restart the credit continues from the stored counts, timed
from the restart.

An honest gateway that imports recordings faster than real time is credited its new windows
over that time too; labelling windows it already stores is credited at once.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

__all__ = ["MAX_WINDOWS_PER_S", "NEW_GATEWAY_WINDOWS", "Credit", "FaultLog", "credit_counts"]

#: The most windows per second a gateway is credited: the default pipeline makes one window per
#: 2 s step (0.5 per second); this leaves room for a step twice as short.
MAX_WINDOWS_PER_S = 1.0
#: The most windows the first status of a gateway never seen before is credited with.
NEW_GATEWAY_WINDOWS = 0


@dataclass(frozen=True)
class Credit:
    """A gateway's credited counts: ``windows`` stored, ``labelled`` of them, as of ``at``
    (seconds on the server's monotonic clock)."""

    windows: int
    labelled: int
    at: float


def credit_counts(
    previous: Credit | None,
    windows: int,
    labelled: int,
    now: float,
    rate: float = MAX_WINDOWS_PER_S,
    first: int = NEW_GATEWAY_WINDOWS,
) -> Credit:
    """The credit after a status reporting ``windows`` and ``labelled`` at monotonic ``now``.

    Parameters
    ----------
    previous : Credit or None
        The gateway's credit before; None for a gateway never seen (credited at most ``first``).
    windows, labelled : int
        What the status reports (the decoder keeps them in ``[0, MAX_WINDOW_COUNT]``).
    now : float
        The server's monotonic clock when the status arrived.
    rate : float
        Windows per second the credited stored windows may grow by.
    first : int
        The most windows a gateway never seen is credited with at its first status.

    Examples
    --------
    >>> credit_counts(None, 10**9, 10**9, now=0.0)  # a new id: nothing yet
    Credit(windows=0, labelled=0, at=0.0)
    >>> first = credit_counts(None, 100, 80, now=0.0, first=100)
    >>> credit_counts(first, 10**9, 10**9, now=60.0)  # a minute later: at most 60 more
    Credit(windows=160, labelled=160, at=60.0)
    >>> credit_counts(first, 50, 10, now=1.0)  # fewer: taken at once
    Credit(windows=50, labelled=10, at=1.0)
    """
    if previous is None:
        credited = min(windows, max(first, 0))
        return Credit(credited, min(labelled, credited), now)
    allowed = previous.windows + int(rate * max(0.0, now - previous.at))
    credited = min(windows, allowed)
    return Credit(credited, min(labelled, credited), now)


class FaultLog:
    """Faults of gateway input counted by kind; the first of each kind is logged as one line
    (no traceback), the rest only counted (``counts``, shown by ``/metrics``)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def note(self, kind: str, detail: str, **extra: str) -> None:
        """Count one fault of ``kind``; log it if it is the first of its kind.

        Examples
        --------
        >>> faults = FaultLog(logging.getLogger("example"))
        >>> for _ in range(3):
        ...     faults.note("status:ValueError", "bad count")
        >>> faults.counts["status:ValueError"]
        3
        """
        with self._lock:
            self.counts[kind] += 1
            first = self.counts[kind] == 1
        if first:
            self._log.warning(
                "%s: %s (further ones are counted in /metrics, wheelfed_gateway_faults_total)",
                kind,
                detail[:200],
                extra={"fault": kind, **extra},
            )
