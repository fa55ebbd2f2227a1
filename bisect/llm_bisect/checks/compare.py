"""Token and logprob comparison of a candidate's output with the golden's. Pure.

    golden     t0 t1 t2 t3 t4 t5 ...
    candidate  t0 t1 t2 u3 u4 ...        first divergence at 3
                          └─ close if u3 is in the golden's top-k at 3 and t3 in the
                             candidate's (the rule vLLM's model tests use); else not close

That rule stops at the first divergence and forgives one plausible swap, so
the golden's own continuation is also scored under the candidate (teacher
forcing): a Δlogprob at every position, even after the texts part ways.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One generated position: the token (an id, or its text), its logprob, the top-k."""

    token: str
    logprob: float
    top: Mapping[str, float]


@dataclass(frozen=True)
class Divergence:
    """How a candidate's greedy output compares with the golden's for one prompt."""

    first: int | None
    """First position where the tokens differ; None when they never do."""
    close: bool
    """True when identical, or the first differing tokens sit in each other's top-k."""
    agreement: float
    """Share of golden positions whose token the candidate matched, up to the divergence."""
    max_abs_delta: float
    """Largest |Δlogprob| over agreeing positions."""
    mean_abs_delta: float


def diverge(golden: Sequence[Step], candidate: Sequence[Step]) -> Divergence:
    """Compare two greedy outputs position by position."""
    deltas: list[float] = []
    first: int | None = None
    close = True
    for i, (g, c) in enumerate(zip(golden, candidate, strict=False)):
        if g.token != c.token:
            first = i
            close = g.token in c.top and c.token in g.top
            break
        deltas.append(abs(g.logprob - c.logprob))
    else:
        if len(golden) != len(candidate):
            first = min(len(golden), len(candidate))  # one stopped early: the stop differs
    agreeing = first if first is not None else len(golden)
    return Divergence(
        first=first,
        close=close,
        agreement=agreeing / len(golden) if golden else 1.0,
        max_abs_delta=max(deltas, default=0.0),
        mean_abs_delta=sum(deltas) / len(deltas) if deltas else 0.0,
    )


def teacher_deltas(golden: Sequence[float], candidate: Sequence[float | None]) -> list[float]:
    """|Δlogprob| of the golden continuation's tokens, golden vs candidate, per position."""
    return [abs(g - c) for g, c in zip(golden, candidate, strict=False) if c is not None]
