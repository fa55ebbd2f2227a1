"""Budgets that grow while the good build's answer is cut, and stop where growing says nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from helpers import History
from llm_bisect.checks.budget import Budget, ask
from llm_bisect.client import ChatReply
from llm_bisect.errors import RequestRejected
from llm_bisect.model import Verdict
from llm_bisect.probe import SilentProgress
from llm_bisect.services.bisection import check_one
from llm_bisect.services.golden import record_golden
from llm_bisect.services.setup import setup

PROSE = (
    "The tide comes in over the flat sand while gulls turn above the harbour and a small "
    "boat waits by the wall for the morning light to reach the water."
)


class Thinker:
    """An endpoint that needs `needs` tokens to finish; past `context` it clamps or refuses."""

    def __init__(
        self, needs: int, *, context: int = 10**6, refuse: bool = False, text: str = PROSE
    ) -> None:
        self.needs, self.context, self.refuse, self.text = needs, context, refuse, text
        self.asked: list[int] = []
        self.extra: list[dict[str, Any]] = []

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        self.asked.append(max_tokens)
        self.extra.append(extra)
        if max_tokens > self.context and self.refuse:
            raise RequestRejected("HTTP 400: max_tokens is past the context")
        used = min(max_tokens, self.context, self.needs)
        done = used >= self.needs
        return ChatReply(
            content="The answer." if done else None,
            reasoning=self.text,
            finish_reason="stop" if done else "length",
            completion_tokens=used,
        )


def test_the_budget_doubles_until_the_answer_finishes_and_candidates_get_room() -> None:
    endpoint = Thinker(needs=700)
    asked = ask(endpoint, "p", Budget(256, extra={"chat_template_kwargs": {"x": 1}}))
    assert endpoint.asked == [256, 512, 1024]
    assert asked.max_tokens == 1024 and asked.reply.content == "The answer."
    assert all(e == {"chat_template_kwargs": {"x": 1}} for e in endpoint.extra)
    # A candidate starts from the recorded budget and may double once, up to the cap.
    assert Budget(256, cap=1500).from_golden(1024) == Budget(1024, 1500)
    assert Budget(256, cap=4096).from_golden(1024).cap == 2048
    assert Budget(256, cap=1024).from_golden(1024) == Budget(1024, 1024)


@pytest.mark.parametrize(
    ("endpoint", "budget", "asked"),
    [
        (Thinker(needs=10**5), Budget(256, cap=1000), [256, 512, 1000]),  # the cap
        (Thinker(needs=10**5, context=400), Budget(256), [256, 512, 1024]),  # clamped: no more
        (Thinker(needs=10**5, context=400, refuse=True), Budget(256), [256, 512]),  # refused
        (Thinker(needs=10**5, text="now " * 300), Budget(256), [256]),  # degenerate: judged as is
    ],
)
def test_growing_stops_where_a_larger_budget_says_nothing_new(
    endpoint: Thinker, budget: Budget, asked: list[int]
) -> None:
    got = ask(endpoint, "p", budget)
    assert endpoint.asked == asked
    assert got.reply.cut and got.reply.content is None
    assert got.max_tokens == (
        asked[-2] if endpoint.refuse or endpoint.context == 400 else asked[-1]
    )


@pytest.mark.parametrize("settings", [{}, {"thinking": 600}], ids=["plain", "thinking"])
def test_a_build_that_never_finishes_is_bad_under_every_check(
    tmp_path: Path, history: Any, settings: dict[str, Any]
) -> None:
    """EOS ignored: every answer runs on in plain prose (nothing repetitive) until its budget,
    where the good build finished well within its own. That is evidence, under every check."""
    h: History = history({1: "eos-ignored"}, n=1, settings=settings)
    checks = [{"type": "canary"}, {"type": "expect"}, {"type": "eval", "limit": 16}]
    config = h.config(checks=checks)
    golden = tmp_path / "golden.json"
    env = dict(os.environ)  # PYTHONPATH: the simulator of this source tree
    record_golden(setup(config, env), h.shas[0], golden, tmp_path / "g")
    said = {}
    for name, sha in (("good", h.shas[0]), ("bad", h.shas[1])):
        _, said[name] = check_one(
            setup(config, env), sha, tmp_path / name, SilentProgress(), golden
        )
    assert said["good"].verdict is Verdict.GOOD, said["good"].reason
    bad = said["bad"]
    assert bad.verdict is Verdict.BAD, bad.reason
    for check in bad.checks:
        assert not check.passed, (check.name, check.evidence)
        assert "did not finish where the good build did in" in check.evidence, check.evidence
