"""The clock, passed in: whatever reads the time or waits takes one, the real one at the
edge (tests pass their own, and a fake never waits).

    monotonic()  durations and deadlines
    time()       the wall clock: the stamps a person reads (the journal, result.json)
    sleep(s)     a wait
"""

from __future__ import annotations

import time
from typing import Final, Protocol


class Clock(Protocol):
    """What reads the time or waits (see the module docstring)."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """This machine's clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM: Final[Clock] = SystemClock()
