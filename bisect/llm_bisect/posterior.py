"""The culprit's posterior: verdicts that may lie in; how likely each candidate is to be the
first in the new state, and the probe(s) that would tell most, out. Pure: no I/O, no clock.

    hypotheses   c = 0 ......... 1 .. n-1 .......... c = n
                 the old end     candidate c is     the new end is in the old state
                 is new already  the first new one  (no change in this range)

A probe of candidate i truly shows the new state iff i >= c. A verdict lies at a rate that
depends on what the build truly is: a good build reads bad with `false_bad`, a bad one reads
good with `false_good` (a flaky start makes a bad build look good more often than the
reverse). Every server start is one observation; `skip` carries none, an `unsure` start
what most of its repeats said (runner.history; a tie, none). The rates are known
(`search.flake: 0.05`) or learnt from the run itself (`auto`): a grid of rate pairs under a
prior that favours small ones, each weighted by how well it explains every verdict seen —
the ends probed again, re-probes that disagree, confirmation trials, and `calibrate`'s
restarts of the good build (`Policy.calibrated`).

The likelihood of c depends only on which observed candidates lie at or after it, so the
hypotheses fall into segments between observed candidates, one likelihood each: the
posterior is a few numbers, whatever n is.

    observed       G        G     B        B
    index       0  1  2  3  4  5  6  7  8  9
    segments   [0][ 1 ..... 4 ][5  6][7 .. 9][10]

Hypotheses that only never-tested candidates separate form one group (`groups`): no probe
can tell them apart, and a group that holds the confidence is an ambiguous answer.

Verdicts known from elsewhere (`Known`: a nightly CI eval, a colleague's try, an earlier run)
are observations at their own fixed lie rate, outside the rate grid: they narrow the range
before the first start, but the search probes the culprit and its parent here before it
answers (search.posterior_batch).

Confirmation's trials are evidence too (`Trial`): the new end with candidate i taken back
(`revert`) is truly new unless i is the culprit (or nothing changed); the old end with it
made (`pick`) is truly new only if i is the culprit (or the old end was new already). Such
a trial tells c = i from its neighbours, so i - 1 and i become segment edges:

    revert of i     ... new  new | old | new  new ... | old (c = n)
    hypotheses       c < i - 1     c = i   c > i
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from .model import Verdict

RATE_GRID: tuple[tuple[float, float], ...] = (
    (0.0, 0.30),
    (0.002, 0.15),
    (0.01, 0.15),
    (0.03, 0.12),
    (0.06, 0.10),
    (0.1, 0.08),
    (0.18, 0.06),
    (0.3, 0.04),
    (0.4, 0.02),
    (0.5, 0.01),
)
"""`flake: auto`: the lie rates a run may have and how likely each is before any verdict
(false_bad and false_good independently; false_bad only up to FALSE_BAD_MOST). Most runs lie
rarely; the run's own verdicts move the weight (bench_noise.py measures the choice)."""

FALSE_BAD_MOST = 0.18
"""The most often a good build's start may read bad under `flake: auto`: a bad build may read
good on up to half its starts (an intermittent regression: a race, a kernel picked by timing),
but a good one reading bad that often is a broken check, which `calibrate` shows. The bound
makes the two tellable apart: a range of coin-flip verdicts is a bad build reading good half
the time, not good builds reading bad 40 % of the time (bench_noise.py, `int0.5`: 45 % of runs
without an answer with both rates up to 0.5, 10 % so)."""

CONFIRM_FLOOR = 0.5
"""`Policy.confirming`: the least posterior at which the search stops for a confirmation
(below it, a probe tells more than the two trials would)."""

END_PRIOR = 0.02
"""How likely, before any verdict, each end is to be wrong (the good end already bad, the
bad end good): small, since the user says so, but never nil, so an end that contradicts
itself is probed again before the run says so."""


@dataclass(frozen=True)
class Trial:
    """A confirmation trial as evidence (`services/confirm.py`): the new end with candidate
    `commit` taken back (`revert`), or the old end with it made (`pick`), and its verdict."""

    commit: str
    kind: str
    """`revert` or `pick`."""
    verdict: Verdict
    slot: int | None = None
    """The slot its server ran on (slot evidence); None where not known (an older journal)."""
    began: float | None = None
    """When its server started (wall clock, as the run's probes); None where not known."""
    place: str = ""
    """Its node and GPUs as its fingerprint says (Start.place); "" where not known."""

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "commit": self.commit, "kind": self.kind, "verdict": self.verdict.value
        }  # fmt: skip
        if self.slot is not None:
            data["slot"] = self.slot
        if self.began is not None:
            data["began"] = self.began
        if self.place:
            data["place"] = self.place
        return data

    @property
    def start(self) -> Start:
        return Start(self.slot, self.began, self.place)

    @classmethod
    def from_json(cls, data: object) -> Trial:
        """The trial to_json wrote; ValueError for anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"trial {data!r} is not a mapping")
        commit, kind, verdict = data.get("commit"), data.get("kind"), data.get("verdict")
        if not isinstance(commit, str) or kind not in ("revert", "pick"):
            raise ValueError(f"trial {data!r} names no commit, or no revert or pick")
        if verdict not in (Verdict.GOOD.value, Verdict.BAD.value):
            raise ValueError(f"trial verdict {verdict!r} is not good or bad")
        slot, began, place = data.get("slot"), data.get("began"), data.get("place") or ""
        if slot is not None and not (isinstance(slot, int) and not isinstance(slot, bool)):
            raise ValueError(f"trial slot {slot!r} is not a slot")
        if began is not None and not (
            isinstance(began, int | float) and not isinstance(began, bool)
        ):
            raise ValueError(f"trial start {began!r} is not a time")
        if not isinstance(place, str):
            raise ValueError(f"trial place {place!r} is not a place")
        when = None if began is None else float(began)
        return cls(commit, str(kind), Verdict(verdict), slot, when, place)


@dataclass(frozen=True)
class Start:
    """Where and when one verdict's server started (slot evidence): lies cluster by place (a
    bad GPU lies on every start it serves) and in time (a node in a bad state lies for several
    starts in a row), so the verdicts that settle an answer must not all come from one."""

    slot: int | None = None
    """The slot (a GPU set, a host, a node) it ran on; None: not known, a place of its own."""
    began: float | None = None
    """When it started; None: not known."""
    place: str = ""
    """The node and its GPUs it ran on, as the probe's fingerprint says (places.place_key);
    "" where it does not say: its slot is its place. On Slurm and Kubernetes a slot is no
    place (slot k's jobs land on other nodes, and two slots may land on one): the node is."""

    @property
    def where(self) -> tuple[str, object] | None:
        """What `_groups` groups it by: its place where known, else its slot (None: neither,
        a place of its own)."""
        if self.place:
            return ("place", self.place)
        return None if self.slot is None else ("slot", self.slot)


KNOWN_RATE = 0.1
"""How often a verdict known from elsewhere lies where its file does not say
(`candidates.known_verdicts`): another node, another setup, a check of its own."""


@dataclass(frozen=True)
class Known:
    """A verdict known from elsewhere (`candidates.known_verdicts`: a nightly CI eval, a
    colleague's try, an earlier run): weighed at its own lie rate, never this run's, and never
    the last word on the culprit or its parent (the search probes them here first)."""

    commit: str
    verdict: Verdict
    """good or bad."""
    source: str
    """Where it comes from, as its file says (free text)."""
    rate: float = KNOWN_RATE
    """How often such a verdict lies (both ways), in (0, 0.5)."""

    def to_json(self) -> dict[str, object]:
        return {
            "commit": self.commit, "verdict": self.verdict.value, "source": self.source,
            "rate": self.rate,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: object) -> Known:
        """The known verdict to_json wrote; ValueError for anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"known verdict {data!r} is not a mapping")
        commit, verdict = data.get("commit"), data.get("verdict")
        source, rate = data.get("source"), data.get("rate", KNOWN_RATE)
        if not isinstance(commit, str) or not isinstance(source, str):
            raise ValueError(f"known verdict {data!r} names no commit or source")
        if verdict not in (Verdict.GOOD.value, Verdict.BAD.value):
            raise ValueError(f"known verdict {verdict!r} is not good or bad")
        if not (isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < 0.5):
            raise ValueError(f"known verdict rate {rate!r} is not in (0, 0.5)")
        return cls(commit, Verdict(verdict), source, float(rate))


@dataclass(frozen=True)
class Rates:
    """How often a verdict lies, by what the build truly is."""

    false_bad: float
    """A good build's verdict reads bad."""
    false_good: float
    """A bad build's verdict reads good."""


@dataclass(frozen=True)
class Policy:
    """How the search weighs verdicts and when it stops (`search` in the config)."""

    flake: float | None = None
    """The lie rate per verdict (both ways); None: learnt from the run (`auto`); 0: verdicts
    are facts (the deterministic bisection)."""
    confidence: float = 0.99
    """The posterior the answer needs."""
    max_probes: int | None = None
    """The most probes of one search (None: `budget(n)`)."""
    batch: str = "joint"
    """k slots: `joint` (the batch of greatest information together) or `quantiles`."""
    evidence: tuple[Trial, ...] = ()
    """Confirmation trials weighed with the verdicts."""
    looks: tuple[tuple[str, bool], ...] = ()
    """The confirmations weighed so far, in order: each culprit looked at and whether its
    trials bore it out (services/stages.py Confirm; a resume goes on from them)."""
    calibrated: tuple[int, int] = (0, 0)
    """`calibrate`'s restarts of the good build (flagged, all): under `flake: auto` they weigh
    the rate at which a good build's start reads bad, as the run's own verdicts do."""
    confirming: bool = False
    """A confirmation follows the search and its trials are weighed (`confirm`, regression
    mode): the search stops once a revert and a pick that agree would carry its answer to
    the confidence (`decide`), and the answer waits for them. Off once trials are weighed."""
    known: tuple[Known, ...] = ()
    """Verdicts known from elsewhere (`candidates.known_verdicts`), weighed at their own
    rates before the first start; the culprit and its parent are still probed here."""
    prior: tuple[tuple[str, float], ...] = ()
    """Prior weights of candidates by commit (`search.priors`: from the files each touches
    against those the good end's server loaded, priors.py); a commit not named weighs 1."""

    @property
    def exact(self) -> bool:
        """Whether verdicts are taken as facts (today's bisection, probe for probe)."""
        return self.flake == 0

    def grid(self) -> tuple[tuple[Rates, float], ...]:
        """The rate pairs considered and their prior weights (summing to 1)."""
        if self.flake is not None:
            return ((Rates(self.flake, self.flake), 1.0),)
        flagged, starts = self.calibrated
        pairs = [
            (Rates(a, b), wa * wb * a**flagged * (1 - a) ** (starts - flagged))
            for (a, wa), (b, wb) in product(RATE_GRID, RATE_GRID)
            if a <= FALSE_BAD_MOST
        ]
        total = sum(w for _, w in pairs)
        return tuple((r, w / total) for r, w in pairs)

    def budget(self, n: int, rates: Rates | None = None) -> int:
        """The most probes of a search of n candidates: `max_probes` as set, else budget(n),
        widened where the run's own verdicts point to a high lie rate (`rates`, their
        posterior mean: an intermittent regression, a bad build reading good on many starts,
        needs more starts per bit)."""
        if self.max_probes is not None:
            return self.max_probes
        return budget(n) if rates is None else math.ceil(budget(n) * widened(rates))

    def to_json(self) -> dict[str, object]:
        """As the journal and result.json hold it (`evidence` only where there is some)."""
        data: dict[str, object] = {
            "flake": "auto" if self.flake is None else self.flake,
            "confidence": self.confidence,
            "max_probes": self.max_probes,
            "batch": self.batch,
        }
        if self.evidence:
            data["evidence"] = [t.to_json() for t in self.evidence]
        if self.looks:
            data["looks"] = [{"commit": c, "confirmed": ok} for c, ok in self.looks]
        if self.calibrated != (0, 0):
            data["calibrated"] = list(self.calibrated)
        if self.confirming:
            data["confirming"] = True
        if self.known:
            data["known"] = [k.to_json() for k in self.known]
        if self.prior:
            data["prior"] = dict(self.prior)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Policy:
        """The policy to_json wrote; ValueError for anything else."""
        flake, confidence = data.get("flake"), data.get("confidence")
        max_probes, batch = data.get("max_probes"), data.get("batch", "joint")
        if flake != "auto" and not (
            isinstance(flake, int | float) and not isinstance(flake, bool) and 0 <= flake < 0.5
        ):
            raise ValueError(f"flake {flake!r} is not a lie rate or auto")
        if not (isinstance(confidence, float) and 0.5 < confidence < 1):
            raise ValueError(f"confidence {confidence!r} is not in (0.5, 1)")
        if max_probes is not None and not (
            isinstance(max_probes, int) and not isinstance(max_probes, bool) and max_probes >= 2
        ):
            raise ValueError(f"max_probes {max_probes!r} is not a count")
        if batch not in ("joint", "quantiles"):
            raise ValueError(f"batch {batch!r} is not joint or quantiles")
        evidence, confirming = data.get("evidence", []), data.get("confirming", False)
        if not isinstance(evidence, list):
            raise ValueError(f"evidence {evidence!r} is not a list")
        if not isinstance(confirming, bool):
            raise ValueError(f"confirming {confirming!r} is not true or false")
        known = data.get("known", [])
        if not isinstance(known, list):
            raise ValueError(f"known {known!r} is not a list")
        return cls(
            None if flake == "auto" else float(flake),
            confidence,
            max_probes,
            str(batch),
            tuple(Trial.from_json(t) for t in evidence),
            _looks(data.get("looks", [])),
            _calibrated(data.get("calibrated", [0, 0])),
            confirming,
            tuple(Known.from_json(k) for k in known),
            _prior(data.get("prior", {})),
        )


def _prior(data: object) -> tuple[tuple[str, float], ...]:
    """Policy.prior as to_json wrote it; ValueError for anything else."""
    if not isinstance(data, Mapping) or not all(
        isinstance(c, str) and isinstance(w, int | float) and not isinstance(w, bool) and w > 0
        for c, w in data.items()
    ):
        raise ValueError(f"prior {data!r} is not commits with positive weights")
    return tuple((str(c), float(w)) for c, w in data.items())


def _calibrated(data: object) -> tuple[int, int]:
    """Policy.calibrated as to_json wrote it; ValueError for anything else."""
    if not (
        isinstance(data, list)
        and len(data) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in data)
        and data[0] <= data[1]
    ):
        raise ValueError(f"calibrated {data!r} is not [flagged, starts]")
    return (data[0], data[1])


def _looks(data: object) -> tuple[tuple[str, bool], ...]:
    """Policy.looks as to_json wrote them; ValueError for anything else."""
    if not isinstance(data, list):
        raise ValueError(f"looks {data!r} is not a list")
    looks: list[tuple[str, bool]] = []
    for look in data:
        commit = look.get("commit") if isinstance(look, Mapping) else None
        ok = look.get("confirmed") if isinstance(look, Mapping) else None
        if not isinstance(commit, str) or not isinstance(ok, bool):
            raise ValueError(f"look {look!r} names no commit and whether it was confirmed")
        looks.append((commit, ok))
    return tuple(looks)


MAX_LOOKS = 5
"""The most confirmations of one run under the posterior search (services/stages.py);
LOOKS_PICKED - LOOKS_EACH more for a culprit whose reverts read good as often as bad."""
LOOKS_EACH = 3
"""The most confirmations of one culprit: a revert that stays bad on three starts is another
regression after it, not three lies (bench_noise.py: at a lie rate of 0.1, two looks a
culprit and three a run left 7.5 % of runs without an answer, three and five 3.2 %, for the
same probes)."""
LOOKS_PICKED = 5
"""The most confirmations of a culprit whose reverts read good at least as often as bad (its
picks may have read good, or its reverts not yet REVERTS_GOOD times: at a lie rate of 0.1 a
look fails on 1 in 5, and two of three looks confirmed left 8.7 % of runs without an
answer), as of one whose picks alone read good (the run's own trials point to an
intermittent regression: a bad build reads good on up to
half its starts, so a pick fails a look half the time; three such looks all fail 1 run in 8,
five 1 in 32). A culprit that breaks only with what came before it fails them all the same."""


def next_look(
    looks: Sequence[tuple[str, bool]], culprit: str, trials: Sequence[Trial] = ()
) -> tuple[int | None, bool]:
    """Which confirmation the posterior search's culprit gets, from the looks weighed so far
    (Policy.looks), and whether its trials are weighed and the search goes on after it:
    a culprit whose last look bore it out keeps that look (weighed already); one that failed
    LOOKS_EACH times (LOOKS_PICKED where `trials`, the weighed ones, show each of its reverts
    good: only its picks failed, or its reverts do not hold it yet), or a run with no look
    left, keeps its last look (None: it had none) and ends there; else a new look, on new
    starts. Pure."""
    if looks and looks[-1] == (culprit, True):
        return len(looks) - 1, False
    mine = [i for i, (c, _) in enumerate(looks) if c == culprit]
    extra = LOOKS_PICKED - LOOKS_EACH if _reverts_good(trials, culprit) else 0
    if len(mine) >= LOOKS_EACH + extra or len(looks) >= MAX_LOOKS + extra:
        return (mine[-1] if mine else None), False
    return len(looks), True


def _reverts_good(trials: Sequence[Trial], culprit: str) -> bool:
    """Whether the culprit's weighed trials hold a revert and no more of its reverts read bad
    than good: its change may explain the bad end, and a look failed on its pick (an
    intermittent regression reads good on up to half its starts; a lie) or its reverts are
    not yet enough (reverts_hold)."""
    goods, bads = revert_tally(trials, culprit)
    return goods + bads > 0 and goods >= bads


REVERTS_GOOD = 2
"""The starts on which a culprit's revert (the bad end without it) must read good, more of
them than read bad, before a look confirms it under the posterior search: with a second
regression after it the revert is truly bad, and one lying start would otherwise say
"confirmed" for a culprit whose revert alone leaves the bad end bad (bench_noise `two`, lie
0.05: 16 % of runs found with one culprit where there were two)."""


def reverts_hold(trials: Sequence[Trial], culprit: str) -> bool:
    """Whether the culprit's revert trials (`trials`: every one weighed or run, each once)
    read good on REVERTS_GOOD starts or more, and on more starts than read bad. Pure.

    >>> good, bad = (Trial("c", "revert", v) for v in (Verdict.GOOD, Verdict.BAD))
    >>> reverts_hold([good], "c"), reverts_hold([good, good], "c")
    (False, True)
    >>> reverts_hold([good, bad, good], "c"), reverts_hold([good, bad, bad, good], "c")
    (True, False)
    """
    goods, bads = revert_tally(trials, culprit)
    return goods >= REVERTS_GOOD and goods > bads


def reverts_at_once(clean: int, exact: bool) -> int:
    """The starts a look gives the culprit's revert at once, each on a slot of its own: two
    under the posterior search where `clean` (the slots none of the verdicts it checks ran
    on: the culprit's and its parent's) hold them and the pick (three or more: the
    REVERTS_GOOD reverts in one round, not in two looks; no trial where a verdict it checks
    ran, so one bad GPU or one burst still cannot give both), else one. Pure.

    >>> reverts_at_once(3, False), reverts_at_once(2, False), reverts_at_once(4, True)
    (2, 1, 1)
    """
    return REVERTS_GOOD if not exact and clean >= REVERTS_GOOD + 1 else 1


def revert_tally(trials: Sequence[Trial], culprit: str) -> tuple[int, int]:
    """How many of the culprit's revert trials read good, and how many read bad. Pure."""
    said = [t.verdict for t in trials if t.commit == culprit and t.kind == "revert"]
    return said.count(Verdict.GOOD), said.count(Verdict.BAD)


EXACT = Policy(flake=0.0)


def widened(rates: Rates) -> float:
    """How much a lie rate the verdicts point to widens the default budget: none up to 0.1,
    then in step with the rate, at most 4.2 times at 0.5 (bench_noise.py, an intermittent
    regression, `int0.5`: a verdict of a bad build reading good half the time tells about a
    third of a bit; at most 2.6 times left 12 % of runs without an answer on the budget)."""
    worst = max(rates.false_bad, rates.false_good)
    return 1.0 + WIDEN * max(0.0, min(worst, 0.5) - 0.1)


WIDEN = 8.0
"""widened's slope: the budget's growth per lie rate above 0.1."""


def budget(n: int) -> int:
    """The default most probes of a search of n candidates: four times what bisection needs
    without lies, and some for the ends (bench_noise.py, lie rate 0.1: three times left 19 %
    of searches without an answer, four times 6 %)."""
    return 4 * math.ceil(math.log2(max(n, 2))) + 8


def lies(rates: Rates, new: Verdict) -> tuple[float, float]:
    """How often a build truly in the new state reads old, and one truly old reads new, when
    `new` is the new state's verdict (bad when looking for a regression)."""
    if new is Verdict.BAD:
        return rates.false_good, rates.false_bad
    return rates.false_bad, rates.false_good


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _lse(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def _h(p: float) -> float:
    """Binary entropy, in bits."""
    if p <= 0 or p >= 1:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


@dataclass(frozen=True)
class Belief:
    """The posterior over the hypotheses 0..n (see the module docstring)."""

    n: int
    cuts: tuple[int, ...]
    """The observed candidates, sorted: segment j holds c in (cuts[j-1], cuts[j]]."""
    mass: tuple[float, ...]
    """Each segment's posterior mass (len(cuts) + 1 of them, summing to 1)."""
    weights: tuple[float, ...]
    """The prior weight of each hypothesis 0..n."""
    cum: tuple[float, ...]
    """cum[c]: the prior weight of hypotheses 0..c-1 (n + 2 of them)."""
    rates: Rates
    """The lie rates the verdicts point to (their posterior mean)."""
    rate_weights: tuple[tuple[Rates, float], ...]
    """Each rate pair's posterior weight."""
    before: tuple[float, ...] = ()
    """before[j]: the posterior mass of segments 0..j-1."""
    evidence: float = 0.0
    """The log likelihood of every verdict weighed, over the hypotheses and rates: how well
    the model explains them (placed_belief weighs its place hypotheses by it; its own also
    holds their priors)."""
    doubt: tuple[tuple[object, float], ...] = ()
    """Each place suspected of lying on its own (Start.where) and the posterior that it did
    (placed_belief); empty where no place's verdicts contradict another's."""

    def __post_init__(self) -> None:
        if not self.before:
            acc = [0.0]
            for m in self.mass:
                acc.append(acc[-1] + m)
            object.__setattr__(self, "before", tuple(acc))

    def _segment(self, c: int) -> int:
        return bisect.bisect_left(self.cuts, c)

    def _span(self, j: int) -> tuple[int, int]:
        """Segment j's hypotheses, first and last."""
        first = self.cuts[j - 1] + 1 if j > 0 else 0
        last = self.cuts[j] if j < len(self.cuts) else self.n
        return first, last

    def _share(self, first: int, last: int) -> float:
        return self.cum[last + 1] - self.cum[first]

    def of(self, c: int) -> float:
        """The posterior of hypothesis c."""
        j = self._segment(c)
        first, last = self._span(j)
        whole = self._share(first, last)
        return self.mass[j] * self.weights[c] / whole if whole > 0 else 0.0

    def of_range(self, first: int, last: int) -> float:
        """The posterior of hypotheses first..last."""
        return self.cdf(last) - (self.cdf(first - 1) if first > 0 else 0.0)

    def cdf(self, i: int) -> float:
        """P(c <= i): the chance that candidate i is truly in the new state."""
        if i < 0:
            return 0.0
        if i >= self.n:
            return 1.0
        j = self._segment(i)
        first, last = self._span(j)
        whole = self._share(first, last)
        part = self.mass[j] * self._share(first, i) / whole if whole > 0 else 0.0
        return self.before[j] + part

    def top(self) -> int:
        """The most likely hypothesis (the earliest of equals)."""
        best, best_p = 0, -1.0
        for j, m in enumerate(self.mass):
            first, last = self._span(j)
            whole = self._share(first, last)
            if whole <= 0:
                continue
            c = max(range(first, last + 1), key=lambda h: (self.weights[h], -h))
            p = m * self.weights[c] / whole
            if p > best_p + 1e-15:
                best, best_p = c, p
        return best

    def credible(self, level: float) -> tuple[int, ...]:
        """The fewest hypotheses holding `level` of the posterior, in order."""
        ranked = sorted(range(self.n + 1), key=lambda c: (-self.of(c), c))
        taken: list[int] = []
        total = 0.0
        for c in ranked:
            if total >= level - 1e-12:  # 0.4 + 0.4 + 0.1 sums to 0.8999999999999999
                break
            taken.append(c)
            total += self.of(c)
        return tuple(sorted(taken))


def _trial_new(kind: str, i: int, first: int, last: int, n: int) -> bool:
    """Whether a `kind` trial of candidate i is truly new-state under the hypotheses
    first..last (a segment over which it does not change: `believe` makes i - 1 and i edges)."""
    if kind == "revert":  # the new end without i: new while a change other than i remains
        return not (first == last == i) and last < n
    return first == last == i or last == 0  # pick: the old end with i


def believe(
    n: int,
    seen: Mapping[int, Sequence[Verdict]],
    new: Verdict,
    policy: Policy,
    weights: Sequence[float] | None = None,
    old_end_known: bool = False,
    trials: Sequence[tuple[int, str, Verdict]] = (),
    known: Sequence[tuple[int, Verdict, float]] = (),
) -> Belief:
    """The posterior from every probe of each candidate 0..n-1 (`seen`); `new`: the verdict of
    the new state (bad when looking for a regression). `weights`: prior weights of the
    candidates 1..n-1 (default uniform: the hook for weights by touched paths).
    `old_end_known`: the old end is taken as old (an untested merge base), c = 0 ruled out.
    `trials`: confirmation trials (candidate index, `revert` or `pick`, verdict) weighed with
    the probes; one of candidate 0 tells nothing and is left out. `known`: verdicts known from
    elsewhere (candidate index, verdict, its own lie rate, both ways): a fixed-rate term of
    each segment's likelihood, outside the rate grid (they say nothing of this run's rates)."""
    inner = list(weights) if weights is not None else [1.0] * (n - 1)
    if len(inner) != n - 1:
        raise ValueError("one prior weight per candidate between the ends")
    scale = (1 - 2 * END_PRIOR) / (sum(inner) or 1.0)
    prior = [0.0 if old_end_known else END_PRIOR, *(w * scale for w in inner), END_PRIOR]
    cum = [0.0]
    for w in prior:
        cum.append(cum[-1] + w)
    counts: dict[int, tuple[int, int]] = {}  # index -> (new-state verdicts, old-state verdicts)
    for i, verdicts in seen.items():
        shown_new = sum(1 for v in verdicts if v is new)
        shown_old = sum(1 for v in verdicts if v in (Verdict.GOOD, Verdict.BAD) and v is not new)
        if shown_new or shown_old:
            counts[i] = (shown_new, shown_old)
    weighed = [
        (i, kind, v) for i, kind, v in trials if 0 < i < n and v in (Verdict.GOOD, Verdict.BAD)
    ]
    edges = {e for i, _, _ in weighed for e in (0, i - 1, i, n - 1)}
    elsewhere = [(i, v, r) for i, v, r in known if 0 <= i < n and v in (Verdict.GOOD, Verdict.BAD)]
    cuts = tuple(sorted({*counts, *edges, *(i for i, _, _ in elsewhere)}))
    grid = policy.grid()
    obs = [counts.get(i, (0, 0)) for i in cuts]
    # the known verdicts' log likelihood at each cut were it truly old, truly new (fixed rates)
    fixed_old, fixed_new = [0.0] * len(cuts), [0.0] * len(cuts)
    for i, v, r in elsewhere:
        at = cuts.index(i)
        fixed_old[at] += _log(r) if v is new else _log(1 - r)
        fixed_new[at] += _log(1 - r) if v is new else _log(r)
    seg_first = [cuts[j - 1] + 1 if j > 0 else 0 for j in range(len(cuts) + 1)]
    seg_last = [cuts[j] if j < len(cuts) else n for j in range(len(cuts) + 1)]
    seg_prior = [_log(cum[b + 1] - cum[a]) for a, b in zip(seg_first, seg_last, strict=True)]
    per_rate: list[list[float]] = []  # log prior of the rate + log likelihood, per segment
    for rates, weight in grid:
        # truly new: a new-state verdict is right; truly old: an old-state verdict is right
        lie_new, lie_old = lies(rates, new)
        lo_lie, lo_ok = _log(lie_old), _log(1 - lie_old)
        ln_lie, ln_ok = _log(lie_new), _log(1 - lie_new)
        as_old = [(k_new * lo_lie if k_new else 0.0) + (k_old * lo_ok if k_old else 0.0) + f
                  for (k_new, k_old), f in zip(obs, fixed_old, strict=True)]  # fmt: skip
        as_new = [(k_new * ln_ok if k_new else 0.0) + (k_old * ln_lie if k_old else 0.0) + f
                  for (k_new, k_old), f in zip(obs, fixed_new, strict=True)]  # fmt: skip
        # segment j: cuts[:j] lie before c (truly old), cuts[j:] at or after it (truly new)
        tail = [0.0] * (len(cuts) + 1)
        for j in range(len(cuts) - 1, -1, -1):
            tail[j] = tail[j + 1] + as_new[j]
        head, row = 0.0, []
        lw = _log(weight)
        for j in range(len(cuts) + 1):
            told = 0.0
            for i, kind, v in weighed:
                if _trial_new(kind, i, seg_first[j], seg_last[j], n):
                    told += ln_ok if v is new else ln_lie
                else:
                    told += lo_lie if v is new else lo_ok
            row.append(lw + seg_prior[j] + head + tail[j] + told)
            if j < len(cuts):
                head += as_old[j]
        per_rate.append(row)
    seg_log = [_lse([row[j] for row in per_rate]) for j in range(len(cuts) + 1)]
    total = _lse(seg_log)
    if total == -math.inf:  # no rate pair explains the verdicts (flake 0 and a contradiction)
        raise ValueError("the verdicts contradict each other and the lie rate is 0")
    mass = tuple(math.exp(v - total) for v in seg_log)
    rate_post = [math.exp(_lse(row) - total) for row in per_rate]
    mean = Rates(
        sum(p * r.false_bad for p, (r, _) in zip(rate_post, grid, strict=True)),
        sum(p * r.false_good for p, (r, _) in zip(rate_post, grid, strict=True)),
    )
    return Belief(
        n,
        cuts,
        mass,
        tuple(prior),
        tuple(cum),
        mean,
        tuple((r, p) for (r, _), p in zip(grid, rate_post, strict=True)),
        evidence=total,
    )


PLACE_BAD = 0.03
"""The prior chance that any one place (a node and its GPUs, else a slot) is bad: its verdicts
follow the place, not the build (a bad GPU reads most builds bad, or reads them at random).
Places are bad independently: "no place is bad" weighs (1 - PLACE_BAD) ** places, "place p
alone" PLACE_BAD * (1 - PLACE_BAD) ** (places - 1), whatever the number of places."""

PLACES_TO_DOUBT = 3
"""The fewest places among which one may be doubted: with two, which one lies is a guess."""

PLACE_BIAS = (0.1, 0.5, 0.9)
"""How often a bad place's verdict reads new-state whatever the build: equally likely."""


def _suspects(observed: Sequence[tuple[int, Verdict, Start]], new: Verdict) -> list[object]:
    """The places (Start.where) one of whose verdicts contradicts another place's: new-state
    at or before a candidate another place read old-state, or old-state at or after one
    another place read new-state. Only those may be a bad place (placed_belief)."""
    n_max = 1 + max((i for i, _, _ in observed), default=0)
    first_new: dict[object, int] = {}
    last_old: dict[object, int] = {}
    for i, v, s in observed:
        if s.where is None or v not in (Verdict.GOOD, Verdict.BAD):
            continue
        if v is new:
            first_new[s.where] = min(first_new.get(s.where, i), i)
        else:
            last_old[s.where] = max(last_old.get(s.where, i), i)
    found: list[object] = []
    for p in dict.fromkeys([*first_new, *last_old]):
        others_old = max((at for q, at in last_old.items() if q != p), default=-1)
        others_new = min((at for q, at in first_new.items() if q != p), default=n_max)
        if first_new.get(p, n_max) <= others_old or last_old.get(p, -1) >= others_new:
            found.append(p)
    return found


def placed_belief(
    n: int,
    placed: Placed,
    new: Verdict,
    policy: Policy,
    weights: Sequence[float] | None = None,
    old_end_known: bool = False,
    known: Sequence[tuple[int, Verdict, float]] = (),
    among: int = 0,
) -> Belief:
    """The posterior (`believe`) where a place may be bad: a mixture of "no place lies on its
    own" and, for each place whose verdicts contradict another place's (`_suspects`), "this
    place's verdicts and trials follow the place, not the build" (read new-state at a rate
    of PLACE_BIAS, whatever the build), each at its prior PLACE_BAD, weighed by how well it
    explains the verdicts. Where fewer than PLACES_TO_DOUBT places served the verdicts (or
    the run's, `among`, where these are part of them: fragile's), or none contradicts
    another, it is `believe`'s. Pure.

        GPU 0   c4 bad  c4 bad  c2 bad        GPU 1   c4 good  c6 bad
        GPU 2   c4 good c5 good c6 bad        ⇒ GPU 0 doubted: c6, on GPUs 1 and 2"""
    observed, trials = placed.observed, placed.trials

    def seen_of(items: Sequence[tuple[int, Verdict, Start]]) -> dict[int, list[Verdict]]:
        seen: dict[int, list[Verdict]] = {}
        for i, v, _ in items:
            seen.setdefault(i, []).append(v)
        return seen

    plain = believe(n, seen_of(observed), new, policy, weights, old_end_known=old_end_known,
                    trials=[(i, k, v) for i, k, v, _ in trials], known=known)  # fmt: skip
    wheres = {s.where for _, _, s in observed} | {s.where for _, _, _, s in trials}
    wheres.discard(None)
    # two places that disagree tell no bad one apart (bench_noise, lie 0.1 on two slots: the
    # mixture left 6.0 % of runs without an answer, 3.7 % without it): three or more
    suspects = _suspects(observed, new) if max(among, len(wheres)) >= PLACES_TO_DOUBT else []
    if not suspects:
        return plain
    mixed: list[tuple[float, Belief, object]] = [
        (len(wheres) * _log(1 - PLACE_BAD) + plain.evidence, plain, None)
    ]
    pseudo = [(e, new, 0.5) for e in plain.cuts]  # keeps every cut; log 0.5 each, both ways
    for where in suspects:
        rest = [(i, v, s) for i, v, s in observed if s.where != where]
        theirs = [v for _, v, s in observed if s.where == where]
        theirs += [v for _, _, v, s in trials if s.where == where]
        k_new = sum(1 for v in theirs if v is new)
        k_old = sum(1 for v in theirs if v is not new and v in (Verdict.GOOD, Verdict.BAD))
        noise = _lse([_log(b) * k_new + _log(1 - b) * k_old - _log(len(PLACE_BIAS))
                      for b in PLACE_BIAS])  # fmt: skip
        try:
            b = believe(n, seen_of(rest), new, policy, weights, old_end_known=old_end_known,
                        trials=[(i, k, v) for i, k, v, s in trials if s.where != where],
                        known=[*known, *pseudo])  # fmt: skip
        except ValueError:
            continue
        alone = _log(PLACE_BAD) + (len(wheres) - 1) * _log(1 - PLACE_BAD)
        evidence = b.evidence - len(pseudo) * _log(0.5) + noise + alone
        mixed.append((evidence, b, where))
    total = _lse([e for e, _, _ in mixed])
    weighed = [(math.exp(e - total), b) for e, b, _ in mixed]
    return Belief(
        n,
        plain.cuts,
        tuple(sum(w * b.mass[j] for w, b in weighed) for j in range(len(plain.mass))),
        plain.weights,
        plain.cum,
        Rates(sum(w * b.rates.false_bad for w, b in weighed),
              sum(w * b.rates.false_good for w, b in weighed)),
        tuple((r, sum(w * b.rate_weights[g][1] for w, b in weighed))
              for g, (r, _) in enumerate(plain.rate_weights)),
        evidence=total,
        doubt=tuple((where, w) for (w, _), (_, _, where) in zip(weighed, mixed, strict=True)
                    if where is not None),
    )  # fmt: skip


def gain(p_new: float, rates: Rates, new: Verdict) -> float:
    """The expected information (bits) about the culprit of one verdict on a candidate that is
    truly new with probability `p_new`."""
    lie_new, lie_old = lies(rates, new)
    shows_new = p_new * (1 - lie_new) + (1 - p_new) * lie_old
    return _h(shows_new) - p_new * _h(lie_new) - (1 - p_new) * _h(lie_old)


@lru_cache(maxsize=256)
def _joint_likelihoods(m: int, lie_new: float, lie_old: float) -> tuple[tuple[float, ...], ...]:
    """For m verdicts at once, each outcome's likelihood (True: reads new, in product order)
    in each class j (the culprit between picks j-1 and j: picks[:j] truly old, picks[j:]
    truly new); what `_batch_gain` weighs by the classes' posterior. Pure, cached: it
    depends on the batch's size and the rates only."""
    rows = []
    for shown in product((True, False), repeat=m):
        row = []
        for j in range(m + 1):
            like = 1.0
            for at, reads_new in enumerate(shown):
                lie = lie_new if at >= j else lie_old
                like *= (1 - lie) if reads_new == (at >= j) else lie
            row.append(like)
        rows.append(tuple(row))
    return tuple(rows)


def _batch_gain(belief: Belief, chosen: Sequence[int], rates: Rates, new: Verdict) -> float:
    """The expected information of verdicts on all of `chosen` together (they are independent
    given the culprit): H(Y) - sum of H(Y_i | c)."""
    picks = sorted(chosen)
    lie_new, lie_old = lies(rates, new)
    # class j: c in (picks[j-1], picks[j]]: picks[:j] truly old, picks[j:] truly new
    edges = [belief.cdf(i) for i in picks]
    classes = [b - a for a, b in zip([0.0, *edges], [*edges, 1.0], strict=True)]
    weighed = [(j, w) for j, w in enumerate(classes) if w > 0]
    joint = 0.0
    for row in _joint_likelihoods(len(picks), lie_new, lie_old):
        p = sum(w * row[j] for j, w in weighed)
        if p > 0:
            joint -= p * math.log2(p)
    alone = sum(e * _h(lie_new) + (1 - e) * _h(lie_old) for e in edges)
    return joint - alone


JOINT_MOST = 6
"""The most probes a joint batch weighs together (its outcomes: 2 ** k); more slots take the
posterior's quantiles."""


@dataclass(frozen=True)
class Decision:
    """What the posterior says: go on (`probes`), or the answer."""

    probes: tuple[int, ...] = ()
    """Candidates to probe now (empty: the search is over, or waits for a running probe)."""
    answer: int | None = None
    """The hypothesis that holds the confidence (0: the old end is new already; n: no change)."""
    group: tuple[int, ...] = ()
    """When no probe can separate the likely hypotheses: the group holding the confidence."""
    exhausted: bool = False
    """The probe budget is spent below the confidence."""
    provisional: bool = False
    """`answer` holds less than the confidence: its confirmation's trials, which follow,
    would carry it there if they agree (`Policy.confirming`)."""


def groups(n: int, pool: frozenset[int]) -> list[tuple[int, int]]:
    """Runs of hypotheses no probe can separate (first, last): c and c+1 differ only in
    candidate c's truth, so they part only where c can still be probed (`pool`)."""
    runs: list[tuple[int, int]] = []
    first = 0
    for c in range(n):
        if c in pool:
            runs.append((first, c))
            first = c + 1
    runs.append((first, n))
    return runs


NEARLY = 0.9
"""Candidates that tell at least this share of the best one's information tell nearly as
much: among them the cheapest artifact goes first (cheapest)."""


def cheapest(
    scored: Sequence[tuple[float, int]], costs: Mapping[int, float] | None
) -> list[tuple[float, int]]:
    """Of (gain, candidate) pairs, those that tell nearly as much as the best (NEARLY) and
    cost least to make runnable (`costs`: an image on the node 0, a download 1, a build from
    source 2; a candidate not named costs 0); without costs, those of the best gain. Pure."""
    best = max(g for g, _ in scored)
    if not costs:
        return [(g, i) for g, i in scored if g >= best - 1e-12]
    near = [(g, i) for g, i in scored if g >= NEARLY * best - 1e-12]
    least = min(costs.get(i, 0) for _, i in near)
    return [(g, i) for g, i in near if costs.get(i, 0) == least]


@dataclass(frozen=True)
class BatchAsk:
    """What a batch is asked for (decide): up to `k` candidates besides those `running`,
    those `prefer`red first among equals, the cheapest where `costs` are given."""

    k: int = 1
    running: frozenset[int] = frozenset()
    prefer: frozenset[int] = frozenset()
    costs: Mapping[int, float] | None = None


def decide(
    belief: Belief,
    policy: Policy,
    new: Verdict,
    pool: frozenset[int],
    spent: int,
    ask: BatchAsk = BatchAsk(),
    closed: frozenset[int] = frozenset(),
) -> Decision:
    """The answer if one hypothesis (or a group no probe can split) holds the confidence, or
    the budget is spent; else up to k candidates of `pool` to probe besides those `running`,
    those that tell most about the culprit (a candidate may be probed again), the cheapest of
    those that tell nearly as much where `costs` are given (cheapest). `closed`: the
    candidates the search does not stop at for a confirmation (`Policy.confirming`: looked
    at already, next_look)."""
    k, running, prefer, costs = ask.k, ask.running, ask.prefer, ask.costs
    top = belief.top()
    if (
        belief.of(top) >= policy.confidence
        and (top in pool or top == belief.n)
        and (top == 0 or top - 1 in pool)
    ):
        return Decision(answer=top)
    if (
        policy.confirming
        and top not in closed
        and _confirmable(belief, top, pool, policy.confidence, new)
    ):
        return Decision(answer=top, provisional=True)
    for first, last in groups(belief.n, pool):
        if first < last and belief.of_range(first, last) >= policy.confidence:
            return Decision(group=tuple(range(first, last + 1)))
    if spent >= policy.budget(belief.n, belief.rates):
        return Decision(exhausted=True)
    free = sorted(pool - running)
    if not free or k <= 0:
        return Decision()
    rates = belief.rates
    if (policy.batch == "quantiles" and k > 1 and not running) or k + len(running) > JOINT_MOST:
        return Decision(probes=_quantiles(belief, free, min(k, len(free))))
    picks: list[int] = []
    for _ in range(min(k, len(free))):
        options = [i for i in _options(belief, free, k) if i not in picks]
        if not options:
            break
        base = [*running, *picks]
        scored = [(_batch_gain(belief, [*base, i], rates, new), i) for i in options]
        best = max(g for g, _ in scored)
        near = cheapest(scored, costs)
        ready = [(g, i) for g, i in scored if i in prefer and g >= 0.5 * best]
        choice = ready or near
        picks.append(min(choice, key=lambda gi: (-gi[0], abs(belief.cdf(gi[1]) - 0.5), gi[1]))[1])
    if len(picks) > 1:
        picks = _refined(belief, picks, _options(belief, free, k), running, prefer, rates, new)
    return Decision(probes=tuple(picks))


def _refined(
    belief: Belief,
    picks: Sequence[int],
    options: Sequence[int],
    running: frozenset[int],
    prefer: frozenset[int],
    rates: Rates,
    new: Verdict,
) -> list[int]:
    """The greedy batch (`decide`: the best probe, then the best beside it, ...) moved one
    probe at a time while that tells more together (_batch_gain): greedy takes the median
    first, and k probes tell most at about the k+1-quantiles (two slots, no lie: 1.5 bits for
    the median and a quartile, log2 3 = 1.58 for the thirds; a round in 7 of the search's).
    A preferred probe (a ready artifact) is only moved to another preferred one."""
    picks = list(picks)
    best = _batch_gain(belief, [*running, *picks], rates, new)
    for _ in range(4 * len(picks)):
        moved = False
        for at, was in enumerate(picks):
            rest = [*running, *picks[:at], *picks[at + 1 :]]
            for i in options:
                if i in picks or (was in prefer and i not in prefer):
                    continue
                got = _batch_gain(belief, [*rest, i], rates, new)
                if got > best + 1e-9:
                    best, picks[at], was, moved = got, i, i, True
        if not moved:
            break
    return picks


SPARE = 0.2
"""The most a probe of a batch may tell beside the others (bits) for `spare` to trade it for
a re-probe the answer will need (posterior.fragile)."""
SPARE_TOP = 0.4
"""The least posterior of the likeliest culprit at which `spare` looks for a re-probe it will
need (below it, a culprit's verdicts are not yet worth checking)."""


def spare(
    belief: Belief,
    picks: Sequence[int],
    running: frozenset[int],
    new: Verdict,
) -> int | None:
    """The probe of a batch of several that tells least beside the others, where it tells
    less than SPARE bits: its slot is better spent on a re-probe that the answer will need
    before it stands (posterior.fragile; search.posterior_batch), which would otherwise take a
    round of its own after the confirmation. None: each tells enough. Pure."""
    if not 2 <= len(picks) + len(running) <= JOINT_MOST or belief.of(belief.top()) < SPARE_TOP:
        return None  # more slots: the quantiles, each tells enough; no likely culprit yet
    rates = belief.rates
    whole = _batch_gain(belief, [*running, *picks], rates, new)
    told = [
        (whole - _batch_gain(belief, [*running, *(q for q in picks if q != p)], rates, new), p)
        for p in picks
    ]
    least, p = min(told)
    return p if least < SPARE else None


def confirmed(belief: Belief, c: int, new: Verdict = Verdict.BAD) -> float:
    """The posterior of candidate c once its revert (the new end without it) tests old and
    its pick (the old end with it) tests new, at the rates' posterior mean: the two trials
    tell c from every other hypothesis at once, where a probe tells c from one neighbour."""
    lie_new, lie_old = lies(belief.rates, new)
    p, old_new, none = belief.of(c), belief.of(0), belief.of(belief.n)
    rest = max(0.0, 1.0 - p - old_new - none)
    # revert: truly old when c is the culprit or nothing changed; pick: truly new when c is
    # the culprit or the old end was new already
    held = p * (1 - lie_old) * (1 - lie_new)
    total = (
        held
        + old_new * lie_new * (1 - lie_new)
        + none * (1 - lie_old) * lie_old
        + rest * lie_new * lie_old
    )
    return held / total if total > 0 else 0.0


def _confirmable(
    belief: Belief, c: int, pool: frozenset[int], confidence: float, new: Verdict
) -> bool:
    """Whether the search stops at c for its confirmation (`Policy.confirming`)."""
    if not 0 < c < belief.n or c not in pool or c - 1 not in pool:
        return False
    return belief.of(c) >= CONFIRM_FLOOR and confirmed(belief, c, new) >= confidence


def _options(belief: Belief, free: Sequence[int], k: int) -> list[int]:
    """The candidates worth scoring: every one in a small range, else those at the posterior's
    quantiles and every candidate observed already (a re-probe)."""
    if len(free) <= 48:
        return list(free)
    marks = 8 * (k + 1)
    cuts = set(belief.cuts)
    found = {i for i in free if i in cuts}
    cdfs = [belief.cdf(i) for i in free]
    for m in range(1, marks):
        at = bisect.bisect_left(cdfs, m / marks)
        for j in (at - 1, at):
            if 0 <= j < len(free):
                found.add(free[j])
    return sorted(found)


def _quantiles(belief: Belief, free: Sequence[int], k: int) -> tuple[int, ...]:
    """k candidates at the posterior's k+1-quantiles (the cheap batch)."""
    cdfs = [belief.cdf(i) for i in free]
    picks: list[int] = []
    for m in range(1, k + 1):
        target = m / (k + 1)
        at = min(range(len(free)), key=lambda j: (abs(cdfs[j] - target), free[j]))
        if free[at] not in picks:
            picks.append(free[at])
    return tuple(picks)


def disagreeing(
    seen: Mapping[int, Sequence[Verdict]], culprit: int, new: Verdict
) -> list[tuple[int, Verdict]]:
    """Every verdict that disagrees with `culprit` being the first new-state candidate."""
    old = Verdict.GOOD if new is Verdict.BAD else Verdict.BAD
    found: list[tuple[int, Verdict]] = []
    for i in sorted(seen):
        truth = new if i >= culprit else old
        for v in seen[i]:
            if v in (Verdict.GOOD, Verdict.BAD) and v is not truth:
                found.append((i, v))
    return found


BURST = 3
"""The most consecutive starts on one slot assumed to lie together (a node in a bad state:
thermal, ECC, a wedged driver): the verdicts that settle an answer never all come from one
such run of starts, nor all from one slot where there are several (`fragile`)."""

ROBUST = 0.5
"""The posterior the culprit keeps, at the least, on the evidence left once any one burst
(or, with several slots, any one slot) is taken away: more likely than every other
hypothesis together without it, so that burst or slot did not make the answer alone."""


def _groups(starts: Sequence[Start], decisive: Sequence[bool]) -> list[frozenset[int]]:
    """The sets of verdicts (by position in `starts`) that may have lied together and hold a
    decisive one: each run of BURST consecutive starts in one place, and, where verdicts come
    from more than one place, each place's whole. A place is the node and GPUs where the
    fingerprint says (Start.place: two slots on one node are one place), else the slot; a
    verdict with neither is a place of its own."""
    by_slot: dict[tuple[str, object], list[int]] = {}
    for at, s in enumerate(starts):
        if s.where is not None:
            by_slot.setdefault(s.where, []).append(at)
    found: list[frozenset[int]] = []
    for members in by_slot.values():
        ordered = sorted(members, key=lambda m: (starts[m].began is None, starts[m].began or 0, m))
        for first in range(max(1, len(ordered) - BURST + 1)):
            found.append(frozenset(ordered[first : first + BURST]))
        if len(by_slot) > 1:
            found.append(frozenset(ordered))
    unique = dict.fromkeys(g for g in found if any(decisive[m] for m in g))
    return list(unique)


@dataclass(frozen=True)
class Placed:
    """Each verdict and each trial with where and when it ran (fragile's evidence)."""

    observed: Sequence[tuple[int, Verdict, Start]]
    trials: Sequence[tuple[int, str, Verdict, Start]] = ()


def fragile(
    n: int,
    placed: Placed,
    new: Verdict,
    policy: Policy,
    c: int,
    old_end_known: bool = False,
    known: Sequence[tuple[int, Verdict, float]] = (),
    weights: Sequence[float] | None = None,
) -> tuple[int, ...]:
    """The candidates to probe again before culprit c is an answer (c = 0: the good end is
    already bad; c = n: no change in the range, the bad end good): those (c - 1, c) whose
    verdicts one burst of starts or one slot could have given (`_groups`: without that group's
    verdicts and trials, c holds less than ROBUST); empty where none could. The one most
    groups lean on first. `known`: verdicts known from elsewhere, weighed with what every group
    leaves (they ran on no slot here); `weights`: the candidates' prior weights. Pure.

        slot 0:  ... c-1 good │ c bad  revert good  pick bad │ c bad (again)
                              └──── one burst (BURST) ────┘
        without the burst, c-1 good and the second c bad still name c: robust."""
    observed, trials = placed.observed, placed.trials
    if not 0 <= c <= n:
        return ()
    items = [*((i, v, s) for i, v, s in observed), *((i, v, s) for i, _, v, s in trials)]
    starts = [s for _, _, s in items]
    kinds = [None] * len(observed) + [kind for _, kind, _, _ in trials]
    decisive = [
        (i in (c - 1, c)) if kind is None else i == c
        for (i, _, _), kind in zip(items, kinds, strict=True)
    ]
    leaned: dict[int, int] = {}
    among = len({s.where for s in starts} - {None})
    for group in _groups(starts, decisive):
        rest = Placed(
            [o for at, o in enumerate(observed) if at not in group],
            [t for at, t in enumerate(trials, len(observed)) if at not in group],
        )
        try:  # what the group leaves, a place among them doubted where it stands apart
            belief = placed_belief(n, rest, new, policy, weights, old_end_known, known, among)
        except ValueError:  # nothing left explains the rest: the group was needed
            held = 0.0
        else:
            held = belief.of(c)
        if held >= ROBUST:
            continue
        # the side the group leaves thinnest: c - 1 with the fewest good verdicts outside it,
        # or c with the fewest bad ones (a trial counts for c)
        inside = {c if kinds[at] is not None else items[at][0] for at in group if decisive[at]}
        # c - 1 with no verdict outside the group is the thinnest side, probed or not: under a
        # prior that weighs c above it, c's trials can name c before c - 1 was ever probed
        inside.add(c - 1)
        inside &= set(range(n))  # c = 0 (the good end already bad), c = n (no change): one end
        left = {i: sum(1 for at, (j, v, _) in enumerate(items) if at not in group
                       and (j if kinds[at] is None else c) == i and kinds[at] is None
                       and (v is new) == (i == c)) for i in inside}  # fmt: skip
        probed = {j for j, _, _ in items}
        thin = min(inside, key=lambda i: (left[i], i in probed, -i))
        leaned[thin] = leaned.get(thin, 0) + 1
    return tuple(sorted(leaned, key=lambda i: (-leaned[i], -i)))
