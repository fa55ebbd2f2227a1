"""One chat reply judged by the canary's rules: null or empty content, degenerate text on
either channel, a budget overrun; against the good build's answer to the same prompt, or
without one by the absolute rules (golden.broken judges the good end itself so). Pure."""

from __future__ import annotations

from typing import Protocol

from .budget import unfinished
from .metrics import degeneration, measure

__all__ = ["WORSE_COMPRESSION", "judge_reply"]


class Answer(Protocol):
    """What a reply is judged against: the good build's answer to the same prompt
    (golden.Answer, which imports this module)."""

    @property
    def content(self) -> str | None: ...

    @property
    def reasoning(self) -> str | None: ...

    @property
    def finished_in(self) -> int | None: ...


WORSE_COMPRESSION = 0.5
"""Where the good build's text was degenerate too, the candidate's counts only when its
compression ratio is under this fraction of the good build's (clearly worse)."""


def judge_reply(
    content: str | None,
    reasoning: str | None,
    finish_reason: str | None = "stop",
    baseline: Answer | None = None,
    used: int | None = None,
) -> list[tuple[str, str]]:
    """Why one reply is unhealthy, as (channel to show, problem); empty when healthy. Pure.

    With `baseline` (the good build's answer to the same prompt) only what the good
    build did not do counts; a cut answer's missing content never counts, but a cut
    answer that had `used` >= twice the tokens the good build finished in does.
    """
    problems = []
    cut = finish_reason == "length"
    had_content = baseline is None or bool(baseline.content and baseline.content.strip())
    if (content is None or not content.strip()) and not cut and had_content:
        state = "null" if content is None else "empty"
        if reasoning:
            problems.append(
                ("reasoning", f"content is {state}, text only in the reasoning channel")
            )
        else:
            problems.append(("content", f"content is {state}"))
    for channel, text in (("content", content), ("reasoning", reasoning)):
        reasons = degeneration(text)
        if not reasons or not _worse(text, channel, baseline):
            continue
        problems.append((channel, f"{channel} degenerate: {'; '.join(reasons)}"))
    late = None
    if baseline is not None and used is not None:
        late = unfinished(baseline.finished_in, cut, used)
    if late is not None:
        problems.append(("content" if content else "reasoning", late))
    return problems


def _worse(text: str | None, channel: str, baseline: Answer | None) -> bool:
    """Degenerate `text` counts unless the good build's was degenerate too and no better."""
    if baseline is None or text is None:
        return True
    base = baseline.content if channel == "content" else baseline.reasoning
    if not degeneration(base):
        return True
    assert base is not None
    return measure(text).compression < WORSE_COMPRESSION * measure(base).compression
