"""Budgets that grow while the good build's answer is cut, and stop where growing says nothing."""

from __future__ import annotations

from typing import Any

import pytest

from llm_bisect.checks.budget import Budget, ask
from llm_bisect.client import ChatReply
from llm_bisect.errors import RequestRejected

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
