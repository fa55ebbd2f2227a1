"""Two builds' answers to the same problems, compared pair by pair: one test for the verdict
and for the power the report states. Pure.

                         golden right   golden wrong
    candidate right           ·          gained (c)
    candidate wrong       lost (b)           ·

Only the problems answered differently tell two builds apart. With no drop each of those
m = b + c is as likely lost as gained, so b ~ Binomial(m, 1/2): McNemar's exact test,
one-sided, since only a drop is a regression. The eval fails when b reaches the critical
count for m at `alpha` and the drop (b - c) / n is over the tolerance (0 unless configured).

The power stated with it is that same rule's, computed exactly under this model (the one
the simulation test draws from): of the golden's k right answers each is lost with
probability (flips/2 + drop) * n/k, and of its n - k wrong ones each is gained with
probability (flips/2) * n/(n - k); `flips` is the share of answers that change by chance
(batch nondeterminism), as many gained as lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

ALPHA = 0.05
POWER = 0.8
TEST = "one-sided exact McNemar test on paired answers"
NEGLIGIBLE = 1e-12
"""Probability mass left out of the power sums."""


@dataclass(frozen=True)
class Pairs:
    """The golden's and a candidate's answers to the same n problems, compared."""

    n: int
    right: int
    """The golden's right answers."""
    lost: int
    """Right in the golden, wrong now."""
    gained: int
    """Wrong in the golden, right now."""

    @property
    def drop(self) -> float:
        return (self.lost - self.gained) / self.n if self.n else 0.0

    @property
    def golden_accuracy(self) -> float:
        return self.right / self.n if self.n else 0.0

    @property
    def accuracy(self) -> float:
        return (self.right - self.lost + self.gained) / self.n if self.n else 0.0

    @property
    def flips(self) -> float:
        """The share of answers that changed by chance, as the gains show it: under the model,
        a gain is chance alone, and chance changes answers both ways alike."""
        return 2 * self.gained / self.n if self.n else 0.0


def pairs(golden_right: Sequence[bool], got_right: Sequence[bool]) -> Pairs:
    """Pairs from per-problem rightness, golden and candidate, in the same order."""
    both = list(zip(golden_right, got_right, strict=True))
    return Pairs(
        n=len(both),
        right=sum(g for g, _ in both),
        lost=sum(g and not c for g, c in both),
        gained=sum(c and not g for g, c in both),
    )


def _ways(m: int, lost: int) -> int:
    """The ways to lose at least `lost` of m: the sum of C(m, j) for j >= lost."""
    return sum(math.comb(m, j) for j in range(max(lost, 0), m + 1))


def p_value(lost: int, gained: int) -> float:
    """P(at least `lost` of the lost + gained are lost | no drop), exactly."""
    m = lost + gained
    return _ways(m, lost) / (1 << m)


@cache
def critical(m: int, alpha: float = ALPHA) -> int:
    """The fewest lost answers, of m answered differently, that chance alone reaches at most
    `alpha` of the time (exact); m + 1 when none does."""
    limit = Fraction(str(alpha)) * (1 << m)
    ways = 0
    for lost in range(m, -1, -1):
        ways += math.comb(m, lost)
        if ways > limit:
            return lost + 1
    return 0


def _binomial(n: int, p: float) -> Iterator[tuple[int, float]]:
    """(k, P(K = k)) for K ~ Binomial(n, p), leaving out k of negligible probability."""
    if p <= 0.0 or n == 0:
        yield 0, 1.0
        return
    if p >= 1.0:
        yield n, 1.0
        return
    lp, lq = math.log(p), math.log1p(-p)
    for k in range(n + 1):
        log = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp
        mass = math.exp(log + (n - k) * lq)
        if mass > NEGLIGIBLE:
            yield k, mass


@dataclass(frozen=True)
class PairedTest:
    """The eval's decision: a drop beyond chance (exact McNemar, one-sided at `alpha`) and
    beyond `tolerance`."""

    alpha: float = ALPHA
    tolerance: float = 0.0

    def fails(self, p: Pairs) -> bool:
        m = p.lost + p.gained
        return p.n > 0 and p.lost >= critical(m, self.alpha) and p.drop > self.tolerance

    def power(self, n: int, right: int, drop: float, flips: float = 0.0) -> float:
        """How often this test fails a build that loses `drop` of the n answers beyond the
        `flips` that change by chance, given the golden's `right` answers (see the module)."""
        wrong = n - right
        if n == 0 or right == 0:
            return 0.0
        lose = min(1.0, (flips / 2 + drop) * n / right)
        gain = min(1.0, flips / 2 * n / wrong) if wrong else 0.0
        tail = [0.0] * (right + 2)  # tail[b] = P(at least b lost)
        for b, mass in _binomial(right, lose):
            tail[b] = mass
        for b in range(right, -1, -1):
            tail[b] += tail[b + 1]
        total = 0.0
        for gained, mass in _binomial(wrong, gain):
            total += mass * tail[_least_lost(self, n, right, gained)]
        return min(1.0, total)

    def detectable_drop(
        self, n: int, right: int, flips: float = 0.0, power: float = POWER
    ) -> float:
        """The smallest drop this test detects with `power`; 1.0 when none is."""
        return _detectable(self, n, right, flips, power)


@cache
def _least_lost(test: PairedTest, n: int, right: int, gained: int) -> int:
    """The fewest lost answers that fail `test`, with `gained` gained (right + 1: none)."""
    # Failing is upward closed in `lost`: critical(m + 1) <= critical(m) + 1.
    for lost in range(gained + 1, right + 1):
        if test.fails(Pairs(n, right, lost, gained)):
            return lost
    return right + 1


@cache
def _detectable(test: PairedTest, n: int, right: int, flips: float, power: float) -> float:
    high = right / n - flips / 2 if n else 0.0
    if high <= 0 or test.power(n, right, high, flips) < power:
        return 1.0
    low = 0.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        if test.power(n, right, mid, flips) >= power:
            high = mid
        else:
            low = mid
    return high


LOOKS = 4
SEQUENTIAL = (
    "exact McNemar test on paired answers, curtailed: asked in groups, stopped once no "
    "answer left could make it pass"
)


@dataclass(frozen=True)
class SequentialTest:
    """The eval asked in `looks` groups, stopping as soon as its verdict is settled.

        looks    1/4 n      2/4 n      3/4 n      n
        fail if  it fails even with every answer left gained            PairedTest

    After each of the first looks - 1 groups the answers so far are compared with the
    golden's, and every problem not asked yet is taken as gained (wrong in the golden, right
    now): the worst case for failing. When the whole set's PairedTest fails even so, it
    fails whatever the rest say, and the eval stops. Else the last look decides on the whole
    set. The verdict is always the one the whole set gives (`probe.early_stop` changes only
    what a probe costs, never its verdict): the error rates and the power stated are the
    PairedTest's own."""

    alpha: float = ALPHA
    tolerance: float = 0.0
    looks: int = LOOKS

    @property
    def final(self) -> PairedTest:
        """The whole set's test: the one a probe without early stop decides by."""
        return PairedTest(self.alpha, self.tolerance)

    def stops(self, p: Pairs, left: int) -> bool:
        """At an interim look, `left` problems not asked yet: the whole set fails even if
        every one of them were gained."""
        worst = Pairs(n=p.n + left, right=p.right, lost=p.lost, gained=p.gained + left)
        return p.n > 0 and self.final.fails(worst)

    def sizes(self, n: int) -> list[int]:
        """How many problems are answered at each look (the last: all n)."""
        return sorted({max(1, math.ceil(n * j / self.looks)) for j in range(1, self.looks + 1)})

    def decide(self, golden_right: Sequence[bool], got_right: Sequence[bool]) -> tuple[bool, int]:
        """(fails, problems answered when it decided), answers taken in order."""
        n = len(golden_right)
        for k in self.sizes(n)[:-1]:
            if self.stops(pairs(golden_right[:k], got_right[:k]), n - k):
                return True, k
        return self.final.fails(pairs(golden_right, got_right)), n
