"""What a person at the terminal sees: answers on stdout, progress and errors on stderr,
and (on a terminal) a live display of the probes in flight. Rendering only: the services
report through Progress (probe.py) and never print."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from .cost import Cost
from .model import Candidate, ProbeOutcome, Verdict
from .probe import CANCELLED
from .redact import Scrub
from .report.markdown import duration
from .search import Plan


def printable(text: str) -> str:
    """A text for one terminal line: control characters (escapes, CR) shown, not obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Terminal:
    """What a command prints: lines on stdout (answers) and stderr (progress, errors).

    Every line passes through the run's Scrub, so a secret a server echoed
    never reaches the screen or a CI log. Verdicts and errors are coloured where the stream
    is a terminal, unless NO_COLOR is set or TERM is dumb (FORCE_COLOR colours a pipe too).
    """

    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._out = out
        self._err = err
        self._environ = os.environ if environ is None else environ
        self.scrub = Scrub()
        self.closers: list[Callable[[], None]] = []
        """Called when the command ends, however it ends (a live progress line)."""

    def close(self) -> None:
        for close in self.closers:
            close()

    def mask(self, scrub: Scrub) -> None:
        """From now on, mask these secrets too."""
        self.scrub = self.scrub.with_secrets(scrub.secrets)

    def out(self, text: str) -> None:
        print(self.scrub.text(text), file=self._out or sys.stdout, flush=True)

    def say(self, text: str) -> None:
        print(self.scrub.text(text), file=self._err or sys.stderr, flush=True)

    def paint(self, text: str, colour: str) -> str:
        """`text` in `colour` (an SGR code) where stderr is a terminal; else as it is. For
        words llm-bisect writes itself (a verdict, `error:`), never for text from outside."""
        if self.coloured(self._err or sys.stderr):
            return f"\x1b[{colour}m{text}\x1b[0m"
        return text

    def error(self, message: str) -> None:
        self.say(f"llm-bisect: {self.paint('error:', RED)} {message}")

    def coloured(self, stream: TextIO) -> bool:
        """Whether to colour what goes to `stream` (https://no-color.org)."""
        if self._environ.get("NO_COLOR"):
            return False
        if self._environ.get("FORCE_COLOR"):
            return True
        isatty = getattr(stream, "isatty", None)
        return self._environ.get("TERM") != "dumb" and bool(isatty and isatty())


RED, GREEN, GREY, ORANGE = "1;31", "1;32", "90", "1;33"
VERDICT_COLOURS = {
    Verdict.GOOD: GREEN,
    Verdict.BAD: RED,
    Verdict.SKIP: GREY,
    Verdict.UNSURE: ORANGE,
}


@dataclass
class _Line:
    """One probe in flight, as the live display shows it."""

    step: int
    short: str
    phase: str
    since: float


class TerminalProgress:
    """What a person watching sees, on stderr: step i of ~N, the candidates left, each probe's
    phase and elapsed time, and an ETA from the probes so far.

    On a terminal, a live display (rich) keeps one ticking line per probe in flight (one per
    slot) and each finished probe leaves one line; elsewhere (CI logs, pipes) every phase is
    one plain line. Probes report from their own threads.
    """

    def __init__(
        self,
        term: Terminal | None = None,
        clock: Callable[[], float] = time.monotonic,
        console: Console | None = None,
    ) -> None:
        self.term = term or Terminal()
        self.clock = clock
        self.console = console or Console(file=sys.stderr, highlight=False)
        self.live: Live | None = None
        self.step = 0
        self.total = 0
        self.left: int | None = None
        self.probes_left: int | None = None
        self.durations: list[float] = []
        self.slots = 1
        self.flights: dict[str, _Line] = {}
        self.estimate: Callable[[Plan], Cost] | None = None
        """The run's cost (cost.of_config), given: N in `[i/~N]` is its expected starts, as
        `candidates` says, and grows only where the search needs more than that."""
        self.cost: Cost | None = None
        """The first plan's cost (a search again, a further culprit's: the same run)."""
        self._lock = threading.RLock()
        self.term.closers.append(self.close)

    def note(self, text: str) -> None:
        """A line from a launcher (pull progress) or the journal."""
        self.term.say(f"    {text}")

    def planned(self, plan: Plan, finished: int, from_journal: int = 0) -> None:
        resumed = (
            f", {from_journal} finished probe(s) resumed from the journal" if from_journal else ""
        )
        if self.estimate is None:
            self.step = finished
            self.total = plan.max_probes()
            self.term.say(
                f"{len(plan.candidates)} candidates, at most ~{self.total} probes "
                f"({plan.mode.value}){resumed}"
            )
            return
        if self.cost is None:  # the run's first search: its figure holds for the whole run
            self.cost = self.estimate(plan)
            self.step = finished
            self.term.say(f"{len(plan.candidates)} candidates ({plan.mode.value}){resumed}; "
                          f"{self.cost.line(None)}")  # fmt: skip
        self.step = max(self.step, finished)  # the search again (confirm): said once a run
        self.total = max(self.total, round(self.cost.starts))

    def narrowed(self, left: int, probes_left: int) -> None:
        with self._lock:
            self.left, self.probes_left = left, probes_left
            self.total = self.step - len(self.flights) + probes_left
            if self.cost is not None:  # the figure, until the starts so far and the stages
                # after the search pass it (the search's own count of what is left is a bound)
                after = round(self.cost.starts - self.cost.search)
                self.total = max(round(self.cost.starts), self.step + after)

    def eta(self) -> float | None:
        """Seconds until the answer at the mean probe time so far, `slots` at a time; None
        before a probe ended."""
        if not self.durations or self.probes_left is None:
            return None
        mean = sum(self.durations) / len(self.durations)
        now = self.clock()
        running = [max(0.0, mean - (now - f.since)) for f in self.flights.values()]
        waiting = max(0, self.probes_left - len(running))
        rounds = -(-waiting // max(1, self.slots))
        return max(running, default=0.0) + mean * rounds

    def _where(self) -> str:
        parts = []
        if self.left is not None:
            parts.append(f"{self.left} candidate(s) left")
        eta = self.eta()
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        return f" · {', '.join(parts)}" if parts else ""

    def _of(self, step: int) -> str:
        return f"[{step}/~{max(self.total, step)}]" if self.total else f"[{step}]"

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None:
        with self._lock:
            line = self.flights.get(candidate.commit)
            if line is None:
                self.step += 1
                line = self.flights[candidate.commit] = _Line(self.step, candidate.short, "", 0)
                self.slots = max(self.slots, len(self.flights))
            line.phase, line.since = phase, self.clock() - elapsed
            if not self.console.is_terminal:
                subject = printable(candidate.subject)[:60]
                self.term.say(
                    f"{self._of(line.step)} {line.short} {phase:<9} {elapsed:6.1f}s  "
                    f"{subject}{self._where()}"
                )
            elif self.live is None:
                self.live = Live(
                    _Ticking(self), console=self.console, refresh_per_second=2, transient=True
                )
                self.live.start()

    def status_lines(self) -> list[str]:
        """The live display: one line per probe in flight (step, probe, phase, elapsed), the
        candidates left and the ETA on the last."""
        with self._lock:
            now = self.clock()
            lines = [
                f"{self._of(f.step)} {f.short} {f.phase:<9} {now - f.since:6.1f}s"
                for f in sorted(self.flights.values(), key=lambda f: f.step)
            ]
            if lines:
                lines[-1] += self._where()
            return [self.term.scrub.text(line) for line in lines]

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None:
        with self._lock:
            line = self.flights.pop(candidate.commit, None)
            if line is None:
                self.step += 1
                step = self.step
            else:
                step = line.step
            if not self.flights:
                self.close()
            total = outcome.timings.get("total", 0.0)
            if outcome.timings and outcome.reason != CANCELLED:
                self.durations.append(total)
            verdict = outcome.verdict
            word = self.term.paint(verdict.value.upper(), VERDICT_COLOURS[verdict])
            pad = " " * (9 - len(verdict.value))
            self.term.say(
                f"{self._of(step)} {candidate.short} {word}{pad} "
                f"{total:6.1f}s  {printable(outcome.reason)[:100]}"
            )

    def close(self) -> None:
        """End the live display (no probe in flight, or the command ends)."""
        with self._lock:
            if self.live is not None:
                self.live.stop()
                self.live = None


class _Ticking:
    """The live display, rendered afresh each refresh so elapsed times tick."""

    def __init__(self, progress: TerminalProgress) -> None:
        self.progress = progress

    def __rich__(self) -> Group:
        return Group(
            *(
                Text(line, no_wrap=True, overflow="ellipsis")
                for line in self.progress.status_lines()
            )
        )
