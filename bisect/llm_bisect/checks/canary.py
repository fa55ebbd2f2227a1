"""The degeneration canary: short fixed prompts, both channels inspected."""

from __future__ import annotations

from typing import Any

from ..model import CheckResult
from . import PROMPTS_AT_ONCE, ChatEndpoint, map_concurrent
from .metrics import degeneration, excerpt


def judge_reply(content: str | None, reasoning: str | None) -> list[tuple[str, str]]:
    """Why one reply is unhealthy, as (channel to show, problem); empty when healthy. Pure."""
    problems = []
    if content is None or not content.strip():
        state = "null" if content is None else "empty"
        if reasoning:
            problems.append(
                ("reasoning", f"content is {state}, text only in the reasoning channel")
            )
        else:
            problems.append(("content", f"content is {state}"))
    for channel, text in (("content", content), ("reasoning", reasoning)):
        reasons = degeneration(text)
        if reasons:
            problems.append((channel, f"{channel} degenerate: {'; '.join(reasons)}"))
    return problems


class CanaryCheck:
    """Bad when content or reasoning degenerates, or content is null/empty."""

    name = "canary"

    def __init__(self, prompts: list[str], *, max_tokens: int = 256) -> None:
        self.prompts = prompts
        self.max_tokens = max_tokens

    def run(self, endpoint: ChatEndpoint) -> CheckResult:
        cases: list[dict[str, Any]] = []
        failures: list[str] = []
        replies = map_concurrent(
            lambda prompt: endpoint.chat(prompt, max_tokens=self.max_tokens),
            self.prompts,
            PROMPTS_AT_ONCE,
        )
        for prompt, reply in zip(self.prompts, replies, strict=True):
            problems = judge_reply(reply.content, reply.reasoning)
            cases.append(
                {
                    "prompt": prompt,
                    "content": reply.content,
                    "reasoning": reply.reasoning,
                    "finish_reason": reply.finish_reason,
                    "problems": [p for _, p in problems],
                }
            )
            if problems:
                channel, problem = problems[0]
                shown = reply.reasoning if channel == "reasoning" else reply.content
                failures.append(f"{prompt!r}: {problem} — {channel}: {excerpt(shown)}")
        passed = not failures
        if passed:
            first = cases[0]
            evidence = f"{first['prompt']!r} → {excerpt(first['content'])}"
        else:
            evidence = failures[0]
        return CheckResult(
            name=self.name,
            passed=passed,
            score=1.0 - len(failures) / len(self.prompts),
            evidence=evidence,
            details={"cases": cases},
        )
