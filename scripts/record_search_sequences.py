"""Record the deterministic search's probe sequences in tests/data/search/today.json.

The test that `search.flake: 0` reproduces today's search replays them. Run once, before
the posterior search landed: `python scripts/record_search_sequences.py`.
"""

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bisect"))

from llm_bisect.model import Candidate, Verdict
from llm_bisect.search import Mode, Plan, plan_batch

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "search" / "today.json"


class World:
    """One seeded history: a culprit, untestable commits and builds whose verdict flips."""

    def __init__(self, rng: random.Random) -> None:
        self.n = rng.choice([2, 3, 5, 9, 17, 40, 100, 257, 600])
        self.mode = rng.choice([Mode.REGRESSION, Mode.FIX])
        self.k = rng.choice([1, 1, 1, 2, 4])
        self.reprobe = rng.choice([False, True])
        self.culprit = rng.randint(1, self.n - 1)
        n = self.n
        self.skips = (
            sorted(rng.sample(range(1, n - 1), min(n - 2, rng.choice([0, 0, 1, 3]))))
            if n > 2
            else []
        )
        self.flaky = sorted(rng.sample(range(n), min(n, rng.choice([0, 0, 1, 2]))))
        self.seq = tuple(Candidate(f"{i:040x}") for i in range(n))
        self.seen: dict[str, list[Verdict]] = {}

    def truth(self, i: int) -> Verdict:
        if i in self.skips:
            return Verdict.SKIP
        mode = self.mode
        v = mode.new_state if i >= self.culprit else mode.old_state
        if i in self.flaky and len(self.seen.get(self.seq[i].commit, [])) % 2 == 0:
            v = mode.old_state if v is mode.new_state else mode.new_state
        return v

    def replay(self) -> dict[str, object]:
        plan = Plan(self.mode, self.seq)
        order: list[list[int]] = []
        while isinstance(batch := plan_batch(plan, self.seen, self.k, reprobe=self.reprobe), list):
            idx = [int(c.commit, 16) for c in batch]
            order.append(idx)
            for i in idx:
                self.seen.setdefault(self.seq[i].commit, []).append(self.truth(i))
            if len(order) > 200:
                raise SystemExit("stalled")
        answer = None if batch.culprit is None else int(batch.culprit.commit, 16)
        return {
            "n": self.n,
            "mode": self.mode.value,
            "k": self.k,
            "reprobe": self.reprobe,
            "culprit": self.culprit,
            "skips": self.skips,
            "flaky": self.flaky,
            "rounds": order,
            "status": batch.status.value,
            "answer": answer,
        }


def main() -> None:
    rng = random.Random(20261204)
    cases = [World(rng).replay() for _ in range(300)]
    OUT.write_text(json.dumps(cases, separators=(",", ":")))
    print(len(cases), "worlds recorded")


if __name__ == "__main__":
    main()
