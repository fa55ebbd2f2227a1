"""The eval check: GSM8K-format problems, accuracy against the golden's.

Prompt formats and answer extraction are in gsm8k.py (`instruct`, or vLLM's own
few-shot `vllm`); where the problems come from is in dataset.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError
from ..model import CheckResult
from . import ChatEndpoint, map_concurrent
from .budget import Asked, Budget, ask
from .dataset import Problems
from .golden import EvalNoise, EvalSection
from .gsm8k import (
    Problem,
    default_tolerance,
    detectable_drop,
    extract,
    instruct_prompt,
    last_integer,
    vllm_prompt,
    wilson,
)
from .metrics import degeneration, excerpt

if TYPE_CHECKING:
    from .golden import Golden

NULL_SHARE_JUMP = 0.1
"""Bad when the share of null/empty content rises by more than this over the golden's."""


def score_answers(
    problems: Sequence[Problem],
    replies: Sequence[tuple[str | None, str | None]],
    cut: Sequence[bool] | None = None,
    extract: Callable[[str | None], str | None] = extract,
) -> dict[str, Any]:
    """Accuracy, Wilson interval, invalid, null-content and cut shares of (content, reasoning)."""
    n = len(problems)
    correct = invalid = null = 0
    answers = []
    for problem, (content, reasoning) in zip(problems, replies, strict=True):
        got = extract(content)
        if content is None or not content.strip():
            null += bool(extract(reasoning))  # the answer is there, in the wrong channel
        invalid += got is None
        correct += got == problem.answer
        answers.append(got)
    low, high = wilson(correct, n)
    return {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else 0.0,
        "wilson95": [low, high],
        "invalid_share": invalid / n if n else 0.0,
        "null_share": null / n if n else 0.0,
        "cut_share": sum(cut or ()) / n if n else 0.0,
        "answers": answers,
    }


def _unjudged(asked: Asked) -> bool:
    """Cut by the budget, and not degenerate: such an answer is neither right nor wrong."""
    reply = asked.reply
    return reply.cut and not (degeneration(reply.content) or degeneration(reply.reasoning))


def paired(
    problems: Sequence[Problem],
    golden: Sequence[str | None],
    got: Sequence[str | None],
    cut: Sequence[bool],
) -> tuple[int, float, float]:
    """(n, golden accuracy, candidate accuracy) over the problems whose answer was not cut:
    an answer the budget cut is not a wrong answer. Pure."""
    kept = [i for i, c in enumerate(cut) if not c]
    if not kept:
        return 0, 0.0, 0.0
    g = sum(golden[i] == problems[i].answer for i in kept) / len(kept)
    c = sum(got[i] == problems[i].answer for i in kept) / len(kept)
    return len(kept), g, c


class EvalCheck:
    """Bad when accuracy falls below the golden's beyond chance, or null content jumps."""

    name = "eval"
    needs_golden = True

    def __init__(
        self,
        problems: Problems,
        *,
        prompt_format: Literal["instruct", "vllm"] = "instruct",
        concurrency: int = 8,
        budget: Budget | None = None,
        tolerance: float | None = None,
        null_share_jump: float = NULL_SHARE_JUMP,
    ) -> None:
        self.problems = problems.asked
        self.shots = problems.shots
        self.prompt_format = prompt_format
        self.extract = last_integer if prompt_format == "vllm" else extract
        self.concurrency = concurrency
        self.budget = budget or Budget(256)
        self._configured_tolerance = tolerance
        self.null_share_jump = null_share_jump

    def _answers(self, endpoint: ChatEndpoint, budgets: Sequence[Budget]) -> list[Asked]:
        return map_concurrent(
            lambda pb: ask(endpoint, self.prompt(pb[0]), pb[1]),
            list(zip(self.problems, budgets, strict=True)),
            self.concurrency,
        )

    def prompt(self, problem: Problem) -> str:
        if self.prompt_format == "vllm":
            return vllm_prompt(problem.question, self.shots)
        return instruct_prompt(problem.question)

    def record(self, endpoint: ChatEndpoint) -> EvalSection:
        asked = self._answers(endpoint, [self.budget] * len(self.problems))
        scored = score_answers(
            self.problems,
            [(a.reply.content, a.reply.reasoning) for a in asked],
            [_unjudged(a) for a in asked],
            self.extract,
        )
        return EvalSection(**scored, budgets=[a.max_tokens for a in asked])

    def _tolerance(self, golden: Golden, n: int) -> dict[str, Any]:
        section = golden.checks.eval
        assert section is not None
        if self._configured_tolerance is not None:
            return {"value": self._configured_tolerance, "from": "config"}
        chance = default_tolerance(section.accuracy, n)
        noise = golden.calibration.eval if golden.calibration else None
        spread = noise.accuracy_spread if noise else 0.0
        if 2 * spread > chance:
            return {"value": 2 * spread, "from": f"calibration (spread {spread:.3f} x 2)"}
        return {"value": chance, "from": f"binomial, n={n}"}

    def thresholds(self, golden: Golden | None) -> dict[str, Any]:
        if golden is None or golden.checks.eval is None:
            return {}
        return {
            "accuracy_drop": self._tolerance(golden, golden.checks.eval.n),
            "null_share_jump": {"value": self.null_share_jump, "from": "config/default"},
        }

    def noise(self, results: Sequence[CheckResult]) -> EvalNoise:
        accs = [float(r.details["metrics"]["accuracy"]) for r in results if "metrics" in r.details]
        return EvalNoise(accuracy_spread=(max(accs) - min(accs)) if accs else 0.0, accuracies=accs)

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        gold = golden.checks.eval if golden else None
        if golden is None or gold is None:
            raise ValueError("the eval check needs a golden")
        if len(gold.answers) != len(self.problems):
            raise ConfigError(
                f"golden: its eval has {len(gold.answers)} problems, the config's "
                f"{len(self.problems)}; record it anew"
            )
        recorded = gold.budgets or [self.budget.start] * len(self.problems)
        asked = self._answers(endpoint, [self.budget.from_golden(b) for b in recorded])
        replies = [(a.reply.content, a.reply.reasoning) for a in asked]
        cut = [_unjudged(a) for a in asked]
        got = score_answers(self.problems, replies, cut, self.extract)
        n, gold_acc, acc = paired(self.problems, gold.answers, got["answers"], cut)
        drop = gold_acc - acc
        jump = got["null_share"] - gold.null_share
        tol_doc = self._tolerance(golden, n)
        tol = float(tol_doc["value"])
        failed = []
        if n and drop > tol:
            failed.append(
                f"accuracy {acc:.0%} vs golden {gold_acc:.0%} on the {n} answers that finished "
                f"(drop {drop:.0%} > {tol:.0%})"
            )
        if jump > self.null_share_jump:
            failed.append(
                f"{got['null_share']:.0%} of answers have null content with the answer "
                f"in reasoning (golden {gold.null_share:.0%})"
            )
        low, high = got["wilson95"]
        head = f"accuracy {got['accuracy']:.0%} [{low:.0%}, {high:.0%}] on {got['n']}"
        if got["cut_share"]:
            head += f" ({got['cut_share']:.0%} cut by the budget, not counted)"
        example = next(
            (
                f"{p.question[:50]!r} → {excerpt(c, 60)}"
                for p, (c, _), a, k in zip(self.problems, replies, got["answers"], cut, strict=True)
                if a != p.answer and not k
            ),
            "",
        )
        evidence = (
            f"{'; '.join(failed)} — {example}" if failed else f"{head}, golden {gold.accuracy:.0%}"
        )
        metrics = {
            k: got[k] for k in ("accuracy", "null_share", "invalid_share", "cut_share", "wilson95")
        }
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=got["accuracy"],
            evidence=evidence,
            details={
                "metrics": metrics,
                "thresholds": {**self.thresholds(golden), "accuracy_drop": tol_doc},
                "answers": got["answers"],
                "budgets": [a.max_tokens for a in asked],
                "finish_reasons": [a.reply.finish_reason for a in asked],
                "power": {
                    "n": got["n"],
                    "golden_accuracy": gold.accuracy,
                    "detectable_drop": detectable_drop(gold.accuracy, got["n"]),
                    "alpha": 0.05,
                    "power": 0.8,
                },
            },
        )
