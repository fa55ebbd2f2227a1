"""Checks: talk to an endpoint, return a CheckResult.

A check's metrics are pure functions (checks/metrics.py); the check itself
only sends prompts through the client it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..model import CheckResult

if TYPE_CHECKING:  # the simulator imports checks.gsm8k: keep this package stdlib-only
    from ..client import ChatReply


class ChatEndpoint(Protocol):
    """What a check needs of a server: greedy chat completions."""

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply: ...


class Check(Protocol):
    """One kind of semantic test of an endpoint."""

    name: str

    def run(self, endpoint: ChatEndpoint) -> CheckResult: ...
