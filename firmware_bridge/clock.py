"""The gateway clock used for receive times: integer microseconds since the Unix epoch.

Wall-clock (not monotonic) so that receive times in a recording mean something to a human and
line up with the gateway's logs; frame timestamps come from the sensors' own common clock.
"""

from __future__ import annotations

import time


def wall_clock_us() -> int:
    return time.time_ns() // 1000
