"""Token budgets that fit thinking models: ask again with a larger budget while the answer is cut.

A thinking model spends its `max_tokens` on reasoning first; with too small a
budget the reply ends with `finish_reason: length` and content null, on every
build. So a check records the good build's answers by doubling the budget
until they finish (up to a cap), keeps that budget per prompt in the golden,
and asks every candidate with it (again allowed to double once):

    256 ─length─► 512 ─length─► 1024 ─stop─► golden: {"max_tokens": 1024}

Growing stops early when the text produced is already degenerate (a cut
`now now now` is judged as it is), when the server refuses the budget (HTTP
4xx: past its context), or when a larger budget brought no more tokens (the
server clamped it to its context).

The converse is evidence: where the good build finished in N tokens and a candidate is
still cut after 2N (an EOS ignored, a decode that runs on), the candidate did not finish
where the good build did, whatever its text looks like (`unfinished`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import RequestRejected
from .metrics import degeneration

if TYPE_CHECKING:
    from ..client import ChatReply
    from . import ChatEndpoint

DEFAULT_CAP = 16384
"""The largest budget a check grows to unless configured (`max_tokens_cap`)."""


@dataclass(frozen=True)
class Budget:
    """How many tokens to ask for first, the most to grow to, and what else every request sends."""

    start: int
    cap: int = DEFAULT_CAP
    extra: Mapping[str, Any] | None = None
    """Request fields beside the prompt: `chat_template_kwargs`, the config's `extra_body`."""

    def from_golden(self, recorded: int) -> Budget:
        """A candidate's budget for a prompt the good build finished in `recorded` tokens:
        that, and room to double once (a build may reason a little longer)."""
        return Budget(
            recorded, min(self.cap, 2 * recorded) if recorded < self.cap else recorded, self.extra
        )


@dataclass(frozen=True)
class Asked:
    """An answer and the budget it was given."""

    reply: ChatReply
    max_tokens: int

    @property
    def used(self) -> int:
        """Tokens the answer took: the server's count, else its budget."""
        return self.reply.completion_tokens or self.max_tokens


def ask(endpoint: ChatEndpoint, prompt: str, budget: Budget, **fields: Any) -> Asked:
    """Ask `prompt`, doubling the budget while the answer is cut, up to the cap."""
    extra = {**(budget.extra or {}), **fields}
    tokens = budget.start
    reply = endpoint.chat(prompt, max_tokens=tokens, **extra)
    while reply.cut and tokens < budget.cap and not _degenerate(reply):
        larger = min(budget.cap, 2 * tokens)
        try:
            again = endpoint.chat(prompt, max_tokens=larger, **extra)
        except RequestRejected:
            break  # past the server's context: the last answer stands, cut
        if _no_longer(reply, again):
            break
        reply, tokens = again, larger
    return Asked(reply, tokens)


def unfinished(finished_in: int | None, cut: bool, used: int) -> str | None:
    """Why an answer the budget cut is evidence against its build: the good build finished
    the same prompt in `finished_in` tokens, and this one was still going after twice that.
    None where it is no evidence: it finished, the good build was cut too (`finished_in`
    None), or it had less room than that (the server's context). Pure."""
    if not cut or finished_in is None or used < 2 * finished_in:
        return None
    return f"did not finish where the good build did in {finished_in} tokens (cut at {used})"


def _degenerate(reply: ChatReply) -> bool:
    return bool(degeneration(reply.content) or degeneration(reply.reasoning))


def _no_longer(before: ChatReply, after: ChatReply) -> bool:
    """The larger budget brought no more tokens: the server clamped it (its context is full)."""
    if before.completion_tokens is None or after.completion_tokens is None:
        return False
    return after.cut and after.completion_tokens <= before.completion_tokens


class Asks(Protocol):
    """How a check's requests are shaped (config.Asks, which every built-in check's model is)."""

    @property
    def max_tokens(self) -> int: ...

    @property
    def max_tokens_cap(self) -> int: ...

    def extra(self) -> dict[str, Any]: ...


def budget_of(cfg: Asks) -> Budget:
    """A check config's first token budget, its cap and its request fields."""
    return Budget(cfg.max_tokens, cfg.max_tokens_cap, cfg.extra())
