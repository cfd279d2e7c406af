"""Waiting for threads in link tests without fixed sleeps."""

from __future__ import annotations

import time
from typing import Callable

WAIT_S = 5.0


def wait_for(cond: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
