"""Record the deterministic search's probe sequences (tests/data/search/today.json), for the test that `search.flake: 0` reproduces them exactly. Run once, before the posterior search landed: `python scripts/record_search_sequences.py`."""
import json, random, sys
sys.path.insert(0, "bisect")
from llm_bisect.model import Candidate, Verdict
from llm_bisect.search import Answer, Mode, Plan, plan_batch

rng = random.Random(20261204)
cases = []
for case in range(300):
    n = rng.choice([2, 3, 5, 9, 17, 40, 100, 257, 600])
    mode = rng.choice([Mode.REGRESSION, Mode.FIX])
    k = rng.choice([1, 1, 1, 2, 4])
    reprobe = rng.choice([False, True])
    culprit = rng.randint(1, n - 1)
    skips = sorted(rng.sample(range(1, n - 1), min(n - 2, rng.choice([0, 0, 1, 3])))) if n > 2 else []
    flaky = sorted(rng.sample(range(n), min(n, rng.choice([0, 0, 1, 2]))))
    seq = tuple(Candidate(f"{i:040x}") for i in range(n))
    plan = Plan(mode, seq)
    seen: dict[str, list[Verdict]] = {}
    order: list[list[int]] = []
    def truth(i: int) -> Verdict:
        if i in skips:
            return Verdict.SKIP
        v = mode.new_state if i >= culprit else mode.old_state
        if i in flaky and len(seen.get(seq[i].commit, [])) % 2 == 0:
            v = mode.old_state if v is mode.new_state else mode.new_state
        return v
    while isinstance(batch := plan_batch(plan, seen, k, reprobe=reprobe), list):
        idx = [int(c.commit, 16) for c in batch]
        order.append(idx)
        for i in idx:
            seen.setdefault(seq[i].commit, []).append(truth(i))
        if len(order) > 200:
            raise SystemExit("stalled")
    cases.append({"n": n, "mode": mode.value, "k": k, "reprobe": reprobe, "culprit": culprit,
                  "skips": skips, "flaky": flaky, "rounds": order, "status": batch.status.value,
                  "answer": None if batch.culprit is None else int(batch.culprit.commit, 16)})
json.dump(cases, open("tests/data/search/today.json", "w"), separators=(",", ":"))
print(len(cases), sum(len(c["rounds"]) for c in cases))
