"""Checks: talk to an endpoint, return a CheckResult.

A check's metrics are pure functions (checks/metrics.py); the check itself
only sends prompts through the client it is given.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..client import ChatReply
from ..config import CanaryConfig, CheckConfig, ExpectConfig
from ..model import CheckResult


class ChatEndpoint(Protocol):
    """What a check needs of a server: greedy chat completions."""

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply: ...


class Check(Protocol):
    """One kind of semantic test of an endpoint."""

    name: str

    def run(self, endpoint: ChatEndpoint) -> CheckResult: ...


def build_checks(configs: list[CheckConfig]) -> list[Check]:
    """The checks a config asks for, in its order."""
    from .canary import CanaryCheck
    from .expect import ExpectCheck

    checks: list[Check] = []
    for cfg in configs:
        if isinstance(cfg, CanaryConfig):
            checks.append(CanaryCheck(cfg.prompts, max_tokens=cfg.max_tokens))
        elif isinstance(cfg, ExpectConfig):
            checks.append(ExpectCheck([(c.prompt, c.match) for c in cfg.cases], cfg.max_tokens))
    return checks
