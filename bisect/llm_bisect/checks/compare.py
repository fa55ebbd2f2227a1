"""Token and logprob comparison of a candidate's output with the golden's. Pure.

    golden     t0 t1 t2 t3 t4 t5 ...
    candidate  t0 t1 t2 u3 u4 ...        first divergence at 3
                          └─ close if u3 is in the golden's top-k at 3 and t3 in the
                             candidate's (the rule vLLM's model tests use); else not close

Where one output ends and the other goes on, that is the divergence, and it is not
close: nothing stands there to be in the other's top-k.

That rule stops at the first divergence and forgives one plausible swap, so
the golden's own continuation is also scored under the candidate (teacher
forcing): a Δlogprob at every position, even after the texts part ways. And
at each agreeing position the top-k alternatives are compared too, so a
change that moves the runners-up but leaves the greedy text intact still shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Step as Step  # the tokens compared: model.py owns them


@dataclass(frozen=True)
class Divergence:
    """How a candidate's greedy output compares with the golden's for one prompt."""

    first: int | None
    """First position where the tokens differ; None when they never do."""
    close: bool
    """True when identical, or the first differing tokens sit in each other's top-k; False
    when one output ends where the other goes on."""
    agreement: float
    """Share of golden positions whose token the candidate matched, up to the divergence."""
    max_abs_delta: float
    """Largest |Δlogprob| over agreeing positions."""
    mean_abs_delta: float
    topk_max_abs_delta: float = 0.0
    """Largest |Δlogprob| of an alternative in both top-k lists, over agreeing positions."""
    topk_overlap: float = 1.0
    """Mean share of the top-k alternatives both sides list, over agreeing positions."""
    at: tuple[Step, Step] | None = None
    """The golden's and the candidate's steps at the first divergence, when both have one."""
    deltas: tuple[float, ...] = ()
    """|Δlogprob| of the chosen token at each agreeing position, up to the divergence."""


def diverge(golden: Sequence[Step], candidate: Sequence[Step]) -> Divergence:
    """Compare two greedy outputs position by position."""
    deltas: list[float] = []
    top_deltas: list[float] = []
    overlaps: list[float] = []
    first: int | None = None
    at: tuple[Step, Step] | None = None
    close = True
    for i, (g, c) in enumerate(zip(golden, candidate, strict=False)):
        if g.token != c.token:
            first, at = i, (g, c)
            close = g.token in c.top and c.token in g.top
            break
        deltas += _delta(g.logprob, c.logprob)
        shared = g.top.keys() & c.top.keys()
        top_deltas += [d for t in shared for d in _delta(g.top[t], c.top[t])]
        if g.top or c.top:
            overlaps.append(len(shared) / max(len(g.top), len(c.top)))
    else:
        if len(golden) != len(candidate):  # one stopped where the other goes on
            first, close = min(len(golden), len(candidate)), False
    agreeing = first if first is not None else len(golden)
    return Divergence(
        first=first,
        close=close,
        agreement=agreeing / len(golden) if golden else 1.0,
        max_abs_delta=max(deltas, default=0.0),
        mean_abs_delta=sum(deltas) / len(deltas) if deltas else 0.0,
        topk_max_abs_delta=max(top_deltas, default=0.0),
        topk_overlap=sum(overlaps) / len(overlaps) if overlaps else 1.0,
        at=at,
        deltas=tuple(deltas),
    )


def _delta(golden: float, candidate: float) -> list[float]:
    """[|Δ|] where both are numbers; [] where either is NaN or infinite (`non_finite` names
    those: a difference of them is no figure)."""
    both = math.isfinite(golden) and math.isfinite(candidate)
    return [abs(golden - candidate)] if both else []


def teacher_deltas(
    golden: Sequence[float | None], candidate: Sequence[float | None]
) -> list[float]:
    """|Δlogprob| of the golden continuation's tokens, golden vs candidate, per position."""
    return [
        d
        for g, c in zip(golden, candidate, strict=False)
        if g is not None and c is not None
        for d in _delta(g, c)
    ]


def _broken(golden: float | None, candidate: float) -> bool:
    """A candidate value no logprob can be (NaN, +inf, -inf) where the golden's is not the
    same: -inf where the golden also gave probability 0 is agreement."""
    if math.isfinite(candidate):
        return False
    return not (candidate == -math.inf and golden == -math.inf)


def non_finite(
    golden: Sequence[Step],
    candidate: Sequence[Step],
    golden_teacher: Sequence[float | None] = (),
    teacher: Sequence[float | None] = (),
) -> list[int]:
    """Positions where the candidate's chosen logprob, a top-k logprob or its teacher-forced
    score of the golden's token is NaN or infinite and the golden's is not. Pure."""
    found = set()
    for i, c in enumerate(candidate):
        g = golden[i] if i < len(golden) else None
        mine = g.logprob if g is not None and g.token == c.token else None
        if _broken(mine, c.logprob) or any(
            _broken(g.top.get(t) if g is not None else None, v) for t, v in c.top.items()
        ):
            found.add(i)
    for i, c_score in enumerate(teacher):
        g_score = golden_teacher[i] if i < len(golden_teacher) else None
        if c_score is not None and _broken(g_score, c_score):
            found.add(i)
    return sorted(found)
