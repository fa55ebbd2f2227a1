#!/usr/bin/env python3
"""Whether the exact search (`search.flake: 0`) could be the posterior search at a lie rate
of 0: the 300 worlds of tests/data/search/today.json (recorded by
scripts/record_search_sequences.py: both modes, k slots, skips, builds whose verdict flips)
replayed through the posterior search at rate 0 and 1e-9, each world's probe sequence and
answer compared with the recorded one. Prints one line per search.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bisect"))

from llm_bisect.model import Candidate, Verdict  # noqa: E402
from llm_bisect.posterior import Policy  # noqa: E402
from llm_bisect.search import Answer, Mode, Plan, plan_batch  # noqa: E402

TODAY = ROOT / "tests" / "data" / "search" / "today.json"


@dataclass(frozen=True)
class Posterior(Policy):
    """The posterior search whatever the rate (a rate of 0 otherwise means the exact one)."""

    @property
    def exact(self) -> bool:
        return False


def replay(case: dict[str, Any], policy: Policy) -> tuple[list[list[int]], Answer]:
    """As tests/test_posterior.py replays a recorded world."""
    n, culprit, mode = case["n"], case["culprit"], Mode(case["mode"])
    skips, flaky = set(case["skips"]), set(case["flaky"])
    seq = tuple(Candidate(f"{i:040x}") for i in range(n))
    plan = Plan(mode, seq)
    seen: dict[str, list[Verdict]] = {}
    rounds: list[list[int]] = []
    while True:
        batch = plan_batch(plan, seen, case["k"], reprobe=case["reprobe"], policy=policy)
        if isinstance(batch, Answer):
            return rounds, batch
        rounds.append([int(c.commit, 16) for c in batch])
        for i in rounds[-1]:
            v = Verdict.SKIP if i in skips else mode.new_state if i >= culprit else mode.old_state
            if i in flaky and len(seen.get(seq[i].commit, [])) % 2 == 0 and v is not Verdict.SKIP:
                v = mode.old_state if v is mode.new_state else mode.new_state
            seen.setdefault(seq[i].commit, []).append(v)


def main() -> None:
    cases = json.loads(TODAY.read_text())
    searches = [
        ("exact (flake: 0)", Policy(flake=0.0)),
        ("posterior, rate 0", Posterior(flake=0.0)),
        ("posterior, rate 1e-9", Posterior(flake=1e-9)),
    ]
    for label, policy in searches:
        tally: Counter[str] = Counter()
        for case in cases:
            flips = any(i in case["flaky"] for r in case["rounds"] for i in r)
            world = ("k=1" if case["k"] == 1 else "k>1") + (", flips" if flips else ", clean")
            try:
                rounds, answer = replay(case, policy)
            except ValueError:  # the verdicts contradict each other and the lie rate is 0
                tally[f"{world}: raises"] += 1
                continue
            tally[f"{world}: {'same' if rounds == case['rounds'] else 'other'} sequence"] += 1
            culprit = None if answer.culprit is None else int(answer.culprit.commit, 16)
            if (answer.status.value, culprit) != (case["status"], case["answer"]):
                tally[f"answer {case['status']} -> {answer.status.value}"] += 1
        print(f"{label}: " + "; ".join(f"{k} {v}" for k, v in sorted(tally.items())))


if __name__ == "__main__":
    main()
