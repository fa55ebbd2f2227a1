"""What a run will cost, said before it starts (`candidates`), while it runs (`[i/~N]`) and
after (report.md): one figure, the search's own as the bench runs it."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from helpers import History, probe_order
from llm_bisect.cli import artifacts_said, cli
from llm_bisect.cost import PostRun, _one, estimate, positions, search_cost
from llm_bisect.launchers import Artifact, price
from llm_bisect.model import Candidate, Verdict
from llm_bisect.posterior import EXACT, Policy, cheapest
from llm_bisect.search import Mode, Plan, plan_batch

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench_noise.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_noise", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_noise", module)
    spec.loader.exec_module(module)
    return module


def test_the_search_cost_is_the_bisections_own_probes_ends_included() -> None:
    for n in (2, 5, 16, 100):
        culprits = positions(n)
        want = sum(len(probe_order(n, c)) for c in culprits) / len(culprits)
        assert search_cost(n, EXACT, 1) == (want, want), n


@pytest.mark.parametrize(("n", "k"), [(12, 1), (12, 4), (40, 2)])
def test_the_expected_starts_are_the_benchs_for_the_configs_search(n: int, k: int) -> None:
    """The posterior search as shipped (`flake: auto`, its confirmation weighed where it stops
    for it), every verdict true: the estimate makes, culprit by culprit, the starts and
    rounds bench_noise's `auto` makes at lie 0 (its trials included)."""
    b = bench()
    policy = replace(Policy(), confirming=True)
    for c in positions(n)[:: max(1, len(positions(n)) // 6)]:
        run = b.searched(b.World(n, c, 0.0, 7), "auto", k)
        probes, rounds, trials = _one(n, c, policy, k)
        assert (probes + trials, rounds, trials) == (run.probes, run.rounds, run.trials), c
    # a culprit's revert reads good on two starts: two looks of two trials when none lies, or
    # one look, the revert twice at once beside the pick, where three slots are clear of the
    # culprit's and its parent's verdicts
    confirm = estimate(n, policy, slots=k).confirm
    assert confirm == 4 if k < 3 else 3 <= confirm <= 4


def test_later_builds_further_culprits_and_nodes_are_in_the_figure() -> None:
    policy = replace(Policy(), confirming=True)
    one = estimate(12, policy)
    more = estimate(12, policy, post=PostRun(later=2, culprits=3), nodes=2)
    assert more.starts == one.starts + 2  # each later build is a start
    assert more.worst >= one.worst + 2 + 2 * (one.worst - one.stages)  # two more searches
    assert more.node_hours(30) == pytest.approx(more.starts * 2 * 0.5)
    said = more.line(30)
    assert f"expected: about {more.starts:.0f} server starts" in said
    assert "2 later build(s)" in said and f"at most {more.worst} with 2 further culprit(s)" in said
    assert f"{more.node_hours(30):.1f} node-hours (2 nodes a start)" in said
    exact = estimate(16, EXACT)
    assert exact.confirm == 2 and exact.starts == exact.search + 5  # trials after the search


def test_the_figure_says_what_lies_the_search_allows_and_what_they_may_cost() -> None:
    # `flake: auto`: a bad build may read good on half its starts (an intermittent
    # regression), and where its verdicts point to that the search may probe on far longer
    auto = estimate(100, replace(Policy(), confirming=True))
    said = auto.line(None)
    assert "a good build reading bad on up to 18% of its starts, a bad one reading good on up " \
        "to 50% (an intermittent regression): at most 36 search probes at a rate of 0.1, up " \
        "to 152 where its verdicts point to the widest" in said  # fmt: skip
    assert auto.to_json(None)["lies"] == {
        "false_bad": 0.18, "false_good": 0.5, "search_probes_most": 36,
        "search_probes_widest": 152, "learnt": True,
    }  # fmt: skip
    known = estimate(100, Policy(flake=0.05)).line(None)
    assert known.endswith("if verdicts lie (search.flake 0.05, each way): at most 36 search probes")
    assert "lie," not in estimate(100, EXACT).line(None)  # facts: no lie rate at all


def test_candidates_says_the_lies_it_allows(history: Callable[..., History]) -> None:
    h = history({9: "degenerate-reasoning"}, n=16)
    config = h.config(confirm=False, probe={"early_stop": False}, search={"flake": "auto"})
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    assert result.exit_code == 0, result.output
    assert "a bad one reading good on up to 50% (an intermittent regression)" in result.output
    listed = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    assert json.loads(listed.output)["expected"]["lies"]["false_good"] == 0.5


def test_an_artifact_it_could_not_tell_of_is_not_counted_as_there() -> None:
    """A cluster or registry out of reach: `unknown` rows are said as such, never as present."""
    arts = [Artifact("a", True), Artifact("b", None, reason="refused"), Artifact("c", False)]
    assert artifacts_said(arts, "an artifact") == (
        "3 candidates, 1 with an artifact, 1 unknown (could not tell)"
    )
    assert artifacts_said(arts[:1], "an artifact") == "1 candidates, 1 with an artifact"


def test_an_artifacts_price_orders_the_node_a_download_and_a_build() -> None:
    assert price(Artifact("img", True, local=True, ready=True)) == 0  # in the engine
    assert price(Artifact("c", True, local=True, route="overlay: x", ready=True)) == 0  # cached
    assert price(Artifact("img", True, size=10, ready=True)) == 1  # a pull
    assert price(Artifact("img", True, size=10, route="image: x", ready=True)) == 1
    assert price(Artifact("d", True, route="overlay: x", ready=True)) == 0  # cached, no image yet
    assert price(Artifact("c", True, local=True, route="wheel: x", ready=True)) == 1
    assert price(Artifact("c", True, local=True, route="overlay: x")) == 2  # from source


def test_candidates_says_the_runs_cost_in_starts_node_hours_and_time(
    history: Callable[..., History],
) -> None:
    h = history({9: "degenerate-reasoning"}, n=16)
    config = h.config(confirm=False, probe={"early_stop": False})
    result = CliRunner().invoke(cli, ["candidates", str(config), "--start-minutes", "30"])
    assert result.exit_code == 0, result.output
    assert (
        "expected: about 8 server starts (6 search probes, the ends included; 2 localisation), "
        "at most 8, if no verdict lies; at 30 min a start: about 4.0 h, 4.0 node-hours "
        "(1 node a start), at most 4.0 node-hours" in result.output
    ), result.output
    assert "at most 6 probes" not in result.output  # one figure: no second, other count
    result = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    expected = json.loads(result.output)["expected"]
    assert expected == {"starts": 8.0, "worst": 8, "search_probes": 6.0, "search_rounds": 6.0,
                        "confirm": 0.0, "decisive": 0, "localize": 2, "later": 0,
                        "further_culprits": 0, "nodes": 1, "hours": None, "node_hours": None,
                        "worst_node_hours": None}  # fmt: skip


def test_run_progress_and_report_give_the_figure_candidates_gave(
    history: Callable[..., History], tmp_path: Path
) -> None:
    """`[i/~N]`: N is the expected starts `candidates` printed, from the first probe on, with
    the confirmation and the later build counted; the report sets the starts made against it."""
    h = history({5: "degenerate-reasoning"}, n=8)
    config = h.config(bad=h.shas[-2], candidates={"later": [h.shas[-1]]}, localize=False)
    listed = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    expected = json.loads(listed.output)["expected"]
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = f"expected: about {expected['starts']:.0f} server starts"
    assert said in result.output and f"at most {expected['worst']}" in result.output
    totals = {int(t) for t in re.findall(r"\[\d+/~(\d+)\]", result.output)}
    assert totals == {round(expected["starts"])}, result.output
    report = (out / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("> cost: "))
    made = int(line.split()[2])
    assert made <= expected["worst"] and "1 later" in line and "2 confirmation" in line, line
    assert f"expected about {expected['starts']:.0f}, at most {expected['worst']}" in line
    assert "node-hours (1 node a start" in line
    page = (out / "report.html").read_text()  # its top says the same
    assert f"cost: {made} server starts" in page and f"at most {expected['worst']}" in page


# Cost-aware choice: of candidates that tell nearly as much, the cheapest artifact first.


def _plan(n: int) -> tuple[Plan, tuple[Candidate, ...]]:
    seq = tuple(Candidate(f"{i:040x}") for i in range(n))
    return Plan(Mode.REGRESSION, seq), seq


def test_of_candidates_that_tell_nearly_as_much_the_cheapest_is_probed() -> None:
    plan, seq = _plan(17)
    seen = {seq[0].commit: [Verdict.GOOD], seq[16].commit: [Verdict.BAD]}
    assert plan_batch(plan, seen, 1) == [seq[8]]  # the midpoint, as ever
    # the midpoint a build from source, 7 a download, 6 an image on the node: 6 still tells
    # 0.95 of a bit (6 of 16 one side), so it goes
    costs = {c.commit: 2.0 for c in seq} | {seq[7].commit: 1.0, seq[6].commit: 0.0}
    assert plan_batch(plan, seen, 1, costs=costs) == [seq[6]]
    # 3 is on the node too, but tells too little (0.7 of a bit): the midpoint's build goes
    far = {c.commit: 2.0 for c in seq} | {seq[3].commit: 0.0}
    assert plan_batch(plan, seen, 1, costs=far) == [seq[8]]
    # the posterior search weighs it the same way
    auto = replace(Policy(), confirming=True)
    assert plan_batch(plan, seen, 1, policy=auto) == [seq[8]]
    assert plan_batch(plan, seen, 1, policy=auto, costs=costs) == [seq[6]]
    assert plan_batch(plan, seen, 1, policy=auto, costs=far) == [seq[8]]


def test_cheapest_keeps_the_gains_within_ten_percent_of_the_best() -> None:
    scored = [(1.0, 8), (0.95, 6), (0.85, 4)]
    assert cheapest(scored, None) == [(1.0, 8)]
    assert cheapest(scored, {8: 2, 6: 1, 4: 0}) == [(0.95, 6)]
    assert cheapest(scored, {8: 0, 6: 0}) == [(1.0, 8), (0.95, 6)]  # then the better gain


def test_the_progress_denominator_is_the_figure_until_the_run_passes_it() -> None:
    """`[i/~N]` starts at the expected starts and holds while the search's own (pessimistic)
    count of what is left would raise it; it grows once the starts made and the stages
    after the search pass the figure."""
    from io import StringIO

    from rich.console import Console

    from llm_bisect.model import ProbeOutcome
    from llm_bisect.terminal import Terminal, TerminalProgress

    plan, seq = _plan(13)
    cost = estimate(
        12, EXACT, post=PostRun(later=1)
    )  # the search, then its 2 trials and 4 more starts
    err = StringIO()
    progress = TerminalProgress(Terminal(err=err), console=Console(file=StringIO()))
    progress.estimate = lambda _: cost
    progress.planned(plan, 0)
    figure = round(cost.starts)
    assert f"expected: about {figure} server starts" in err.getvalue()
    after = figure - round(cost.search)
    for i, c in enumerate(seq[: figure - after + 2]):
        progress.phase(c, "starting", 0.0)
        progress.finished(c, ProbeOutcome(c.commit, Verdict.GOOD, "", (), {"total": 1.0}))
        progress.narrowed(12 - i, 8)  # a count of what is left that would raise N at once
        assert progress.total == max(figure, i + 1 + after), i
    assert f"[1/~{figure}]" in err.getvalue() and f"[2/~{figure}]" in err.getvalue()
