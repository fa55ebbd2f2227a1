"""The eval check: a small GSM8K-format set, accuracy against the golden's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..model import CheckResult
from . import ChatEndpoint, map_concurrent
from .gsm8k import (
    Problem,
    default_tolerance,
    detectable_drop,
    extract,
    load_problems,
    wilson,
)
from .metrics import excerpt

INSTRUCTION = "\nSolve it step by step, then end with 'The answer is N.'"
NULL_SHARE_JUMP = 0.1
"""Bad when the share of null/empty content rises by more than this over the golden's."""


def score_answers(
    problems: Sequence[Problem], replies: Sequence[tuple[str | None, str | None]]
) -> dict[str, Any]:
    """Accuracy, Wilson interval, invalid and null-content shares of (content, reasoning)."""
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
        "answers": answers,
    }


class EvalCheck:
    """Bad when accuracy falls below the golden's beyond chance, or null content jumps."""

    name = "eval"

    def __init__(
        self,
        path: Path | None = None,
        *,
        limit: int | None = None,
        concurrency: int = 8,
        max_tokens: int = 256,
        tolerance: float | None = None,
        null_share_jump: float = NULL_SHARE_JUMP,
    ) -> None:
        self.problems = load_problems(path, limit)
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self._configured_tolerance = tolerance
        self.null_share_jump = null_share_jump
        self._golden: Mapping[str, Any] | None = None
        self._limits: dict[str, Any] = {}

    def _answers(self, endpoint: ChatEndpoint) -> list[tuple[str | None, str | None]]:
        def ask(p: Problem) -> tuple[str | None, str | None]:
            reply = endpoint.chat(p.question + INSTRUCTION, max_tokens=self.max_tokens)
            return reply.content, reply.reasoning

        return map_concurrent(ask, self.problems, self.concurrency)

    def record(self, endpoint: ChatEndpoint) -> dict[str, Any]:
        return score_answers(self.problems, self._answers(endpoint))

    def use(self, section: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> None:
        self._golden = section
        n, acc = int(section["n"]), float(section["accuracy"])
        if self._configured_tolerance is not None:
            tol = {"value": self._configured_tolerance, "from": "config"}
        else:
            chance = default_tolerance(acc, n)
            spread = float((calibration or {}).get("accuracy_spread", 0.0))
            tol = (
                {"value": 2 * spread, "from": f"calibration (spread {spread:.3f} x 2)"}
                if 2 * spread > chance
                else {"value": chance, "from": f"binomial, n={n}"}
            )
        self._limits = {
            "accuracy_drop": tol,
            "null_share_jump": {"value": self.null_share_jump, "from": "config/default"},
        }

    def thresholds(self) -> dict[str, Any]:
        return self._limits

    def noise(self, metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        accs = [float(m["accuracy"]) for m in metrics]
        return {"accuracy_spread": (max(accs) - min(accs)) if accs else 0.0, "accuracies": accs}

    def run(self, endpoint: ChatEndpoint) -> CheckResult:
        if self._golden is None:
            raise ValueError("the eval check needs a golden")
        replies = self._answers(endpoint)
        got = score_answers(self.problems, replies)
        gold = self._golden
        drop = float(gold["accuracy"]) - got["accuracy"]
        jump = got["null_share"] - float(gold["null_share"])
        tol = float(self._limits["accuracy_drop"]["value"])
        failed = []
        if drop > tol:
            failed.append(
                f"accuracy {got['accuracy']:.0%} vs golden {gold['accuracy']:.0%} "
                f"(drop {drop:.0%} > {tol:.0%})"
            )
        if jump > self.null_share_jump:
            failed.append(
                f"{got['null_share']:.0%} of answers have null content with the answer "
                f"in reasoning (golden {gold['null_share']:.0%})"
            )
        low, high = got["wilson95"]
        head = f"accuracy {got['accuracy']:.0%} [{low:.0%}, {high:.0%}] on {got['n']}"
        example = next(
            (
                f"{p.question[:50]!r} → {excerpt(c, 60)}"
                for p, (c, _), a in zip(self.problems, replies, got["answers"], strict=True)
                if a != p.answer
            ),
            "",
        )
        evidence = (
            f"{'; '.join(failed)} — {example}"
            if failed
            else f"{head}, golden {gold['accuracy']:.0%}"
        )
        metrics = {k: got[k] for k in ("accuracy", "null_share", "invalid_share", "wilson95")}
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=got["accuracy"],
            evidence=evidence,
            details={
                "metrics": metrics,
                "thresholds": self._limits,
                "answers": got["answers"],
                "power": {
                    "n": got["n"],
                    "golden_accuracy": float(gold["accuracy"]),
                    "detectable_drop": detectable_drop(float(gold["accuracy"]), got["n"]),
                    "alpha": 0.05,
                    "power": 0.8,
                },
            },
        )
