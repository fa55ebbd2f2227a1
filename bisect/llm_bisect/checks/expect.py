"""Known answers: a prompt and a regex its content must match."""

from __future__ import annotations

import re
from typing import Any

from ..model import CheckResult
from . import PROMPTS_AT_ONCE, ChatEndpoint, map_concurrent
from .metrics import excerpt


class ExpectCheck:
    """Bad when any case's content does not match its pattern."""

    name = "expect"

    def __init__(self, cases: list[tuple[str, str]], max_tokens: int = 64) -> None:
        self.cases = [(prompt, re.compile(pattern)) for prompt, pattern in cases]
        self.max_tokens = max_tokens

    def run(self, endpoint: ChatEndpoint) -> CheckResult:
        details: list[dict[str, Any]] = []
        failures: list[str] = []
        replies = map_concurrent(
            lambda case: endpoint.chat(case[0], max_tokens=self.max_tokens),
            self.cases,
            PROMPTS_AT_ONCE,
        )
        for (prompt, pattern), reply in zip(self.cases, replies, strict=True):
            ok = reply.content is not None and pattern.search(reply.content) is not None
            details.append(
                {
                    "prompt": prompt,
                    "match": pattern.pattern,
                    "content": reply.content,
                    "reasoning": reply.reasoning,
                    "finish_reason": reply.finish_reason,
                    "passed": ok,
                }
            )
            if not ok:
                failures.append(
                    f"{prompt!r} → {excerpt(reply.content)} (expected /{pattern.pattern}/)"
                )
        passed = not failures
        first = details[0]
        evidence = f"{first['prompt']!r} → {excerpt(first['content'])}" if passed else failures[0]
        return CheckResult(
            name=self.name,
            passed=passed,
            score=1.0 - len(failures) / len(self.cases),
            evidence=evidence,
            details={"cases": details},
        )
