"""A simulated thinking model: 600 words of reasoning before each answer, one token budget for
both channels, `enable_thinking` honoured, and one prompt it never stops reasoning on.

With the default checks its good build is good (the budgets grow until the good build
finishes, and are recorded in the golden), and its broken builds are found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from helpers import History
from llm_bisect.checks.canary import CanaryDetails
from llm_bisect.checks.eval import EvalDetails
from llm_bisect.cli import cli
from llm_bisect.config import CHAT_PROMPTS
from llm_bisect.services.bisection import check_one
from llm_bisect.services.golden import record_golden
from llm_bisect.services.setup import setup
from llm_bisect.terminal import TerminalProgress

UNCLOSED = CHAT_PROMPTS[1]
THINKING = {"thinking": 600, "unclosed": [UNCLOSED]}
FAULTS = ["none", "degenerate-reasoning", "null-content", "numerics"]
CAUGHT = {
    "none": set(),
    "degenerate-reasoning": {"canary", "logprobs", "eval"},
    "null-content": {"canary", "expect", "eval"},
    "numerics": {"logprobs", "eval"},
}


def thinking_history(history: Any, faults: list[str] = FAULTS) -> History:
    h: History = history(dict(enumerate(faults)), n=len(faults) - 1, settings=THINKING)
    return h


def test_a_thinking_model_gets_budgets_that_fit_and_its_faults_are_found(
    tmp_path: Path, history: Any
) -> None:
    h = thinking_history(history)
    config = h.config(checks=[{"type": t} for t in ("canary", "expect", "logprobs", "eval")])
    s = setup(config, {})
    golden_file = tmp_path / "golden.json"
    golden = record_golden(s, h.shas[0], golden_file, tmp_path / "g")
    canary = golden.checks.canary
    assert canary is not None
    budgets = {c.prompt: (c.max_tokens, c.finish_reason) for c in canary.cases}
    # 600 words do not fit 256 tokens: doubled until the good build finished.
    assert {b for p, b in budgets.items() if p != UNCLOSED} == {(1024, "stop")}, budgets
    # The prompt it never stops reasoning on is cut at the cap, with no content.
    assert budgets[UNCLOSED] == (16384, "length")
    assert golden.checks.eval and golden.checks.eval.cut_share == 0
    assert set(golden.checks.eval.budgets) == {1024}
    assert json.loads(golden_file.read_text())["checks"]["canary"]["cases"][0]["max_tokens"] == 1024

    for i, fault in enumerate(FAULTS):
        s = setup(config, {})
        _, outcome = check_one(
            s, h.shas[i], tmp_path / fault, TerminalProgress(), golden_file, whole=True
        )  # every check: this table is about what each catches
        failed = {c.name for c in outcome.checks if not c.passed}
        assert failed == CAUGHT[fault], (fault, outcome.reason)
        canary_result = next(c for c in outcome.checks if c.name == "canary")
        assert isinstance(canary_result.details, CanaryDetails)
        unclosed = next(c for c in canary_result.details.cases if c.prompt == UNCLOSED)
        assert unclosed.finish_reason == "length"
        if fault == "none":
            assert unclosed.problems == []  # cut on every build: never evidence
            evaluated = next(c for c in outcome.checks if c.name == "eval")
            assert isinstance(evaluated.details, EvalDetails)
            assert set(evaluated.details.finish_reasons) == {"stop"}
        if fault == "null-content":
            assert "content is null" in canary_result.evidence


def test_the_good_end_of_a_thinking_model_is_good_in_a_run_with_defaults(
    tmp_path: Path, history: Any
) -> None:
    h = thinking_history(
        history, ["none", "none", "none", "degenerate-reasoning", "degenerate-reasoning"]
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(h.config()), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == h.shas[3]
    assert doc["probes"][0]["commit"] == h.shas[0] and doc["probes"][0]["verdict"] == "good"
    (warning,) = [w for w in doc["warnings"] if w.startswith("canary")]
    assert UNCLOSED[:40] in warning and "cut at 16384 tokens" in warning


def test_without_a_golden_the_rules_are_absolute_and_budgets_still_grow(
    tmp_path: Path, history: Any
) -> None:
    h = thinking_history(history, ["none", "null-content"])
    checks = [{"type": "canary", "prompts": [CHAT_PROMPTS[0]]}, {"type": "expect"}]
    config = str(h.config(checks=checks))
    said = {}
    for sha, name in zip(h.shas, ("good", "bad"), strict=True):
        out = str(tmp_path / name)
        said[name] = CliRunner().invoke(cli, ["check", config, "--candidate", sha, "--out", out])
    assert said["good"].exit_code == 0, said["good"].output
    assert said["bad"].exit_code == 1, said["bad"].output
    bad = said["bad"]
    assert "judged without a golden" in bad.output and "chat_template_kwargs" in bad.output


def test_enable_thinking_false_reaches_the_server(tmp_path: Path, history: Any) -> None:
    h = thinking_history(history, ["none"] * 2)
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    checks = [{"type": "canary", **off}, {"type": "expect", **off}]
    s = setup(h.config(checks=checks), {})
    golden = record_golden(s, h.shas[0], tmp_path / "golden.json", tmp_path / "g")
    assert golden.checks.canary is not None
    assert all(c.max_tokens == 256 and c.reasoning is None for c in golden.checks.canary.cases)
