"""What a run will cost, said before it starts (`candidates`)."""

from __future__ import annotations

import json
from collections.abc import Callable

from typer.testing import CliRunner

from helpers import History, probe_order
from llm_bisect.cli import cli
from llm_bisect.cost import SAMPLES, estimate, search_cost
from llm_bisect.posterior import EXACT, Policy


def test_the_search_cost_is_the_bisections_own_probes_ends_included() -> None:
    for n in (2, 5, 16, 100):
        culprits = sorted({max(1, min(n, round(1 + j * (n - 1) / (SAMPLES - 1))))
                           for j in range(SAMPLES)})  # fmt: skip
        want = sum(len(probe_order(n, c)) for c in culprits) / len(culprits)
        assert search_cost(n, EXACT, 1) == (want, want), n


def test_weighed_verdicts_and_slots_cost_what_the_search_makes_of_them() -> None:
    exact, auto = estimate(100, EXACT), estimate(100, Policy())
    assert auto.search > exact.search  # re-probes for confidence, even when nothing lies
    four = estimate(100, EXACT, slots=4)
    assert four.rounds < exact.rounds and four.search >= exact.search
    bare = estimate(100, EXACT, confirm=False, localize=False, decisive=False)
    assert bare.starts == exact.search and exact.starts == exact.search + 5
    assert "about 3.7 h at 20 min a start" in estimate(16, EXACT).line(20)  # 11 starts


def test_candidates_says_the_runs_cost_in_starts_and_time(
    history: Callable[..., History],
) -> None:
    h = history({9: "degenerate-reasoning"}, n=16)
    config = h.config(confirm=False, probe={"early_stop": False})
    result = CliRunner().invoke(cli, ["candidates", str(config), "--start-minutes", "30"])
    assert result.exit_code == 0, result.output
    assert (
        "expected: about 8 server starts (6 search probes, the ends included; 2 localisation) "
        "if no verdict lies; about 4.0 h at 30 min a start" in result.output
    ), result.output
    result = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    expected = json.loads(result.output)["expected"]
    assert expected == {"starts": 8.0, "search_probes": 6.0, "search_rounds": 6.0,
                        "confirm": 0, "decisive": 0, "localize": 2, "hours": None}  # fmt: skip
