"""Checks: talk to an endpoint, return a CheckResult.

A check's metrics are pure functions (checks/metrics.py); the check itself
only sends prompts through the client it is given. Each check records its
section of the golden from the good build, and is handed the golden when it
runs: rules are judged against what the good build did on the same prompt.

What a check found, case by case, is its own pydantic model in its own module,
a subclass of model.CheckDetails that names the check; defining it registers it,
so result.json, gate.json and journals read it back typed:

    class CanaryDetails(CheckDetails):
        check: ClassVar[str] = "canary"
        cases: list[CanaryCase] = Field(default_factory=list)

(add it to report/documents.Details for the published schema to list it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..model import CheckResult, Threshold

if TYPE_CHECKING:  # the simulator imports checks.gsm8k: keep this package stdlib-only
    from pydantic import BaseModel

    from ..client import ChatReply
    from .golden import Golden


class ChatEndpoint(Protocol):
    """What a check needs of a server: greedy chat completions."""

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply: ...


@runtime_checkable
class CompletionEndpoint(ChatEndpoint, Protocol):
    """An endpoint that also completes raw text (`/v1/completions`, no chat template)."""

    def complete(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply: ...


class ServedEndpoint(ChatEndpoint, Protocol):
    """An endpoint that also names the model it serves (the name its requests carry)."""

    @property
    def model(self) -> str: ...


class Check(Protocol):
    """One kind of semantic test of an endpoint."""

    name: str
    needs_golden: bool
    """False: without a golden, the check judges by absolute rules (canary, expect)."""

    def record(self, endpoint: ChatEndpoint) -> BaseModel:
        """This check's golden section, from the good build."""
        ...

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        """Judge this endpoint, against `golden` when there is one."""
        ...

    def thresholds(self, golden: Golden | None) -> dict[str, Threshold]:
        """The thresholds in force with this golden, and where each came from; {} if none."""
        ...

    def noise(self, results: Sequence[CheckResult]) -> BaseModel | None:
        """Calibration figures from good-vs-good results; None for a check without thresholds."""
        ...


T = TypeVar("T")
R = TypeVar("R")

PROMPTS_AT_ONCE = 16
"""Requests a check keeps in flight at once (eval has its own `concurrency`): a probe's checks
take about as long as their slowest prompt, not the sum of all."""


def map_concurrent(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """`fn` over `items` on up to `workers` threads, results in order.

    Ctrl-C or SIGTERM does not wait for requests in flight (they can hang up
    to the request timeout): the caller goes straight on to stop the server,
    which ends them.
    """
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(items))))
    try:
        results = list(pool.map(fn, items))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


@runtime_checkable
class StopsEarly(Protocol):
    """A check that can decide on part of its cases once the rest cannot change its verdict
    (the eval's SequentialTest: the verdict is the whole set's); used under
    `probe.early_stop` where a probe's suite may stop (never at a run's ends)."""

    def run_early(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult: ...


COST_RANK = {"canary": 0, "expect": 1, "logprobs": 2, "eval": 3}
"""Checks by what a run of each costs, cheapest first: a few short greedy prompts (canary,
expect), a short continuation with its logprobs and the golden's scored, then a set of
problems (eval). Kinds not named here cost at least an eval (a benchmark harness). The
probe ranks by the kinds' declarations (kinds.CheckKind.cost); this is the default."""


def cheapest_first(
    checks: Sequence[Check], cost: Callable[[str], int] | None = None
) -> list[Check]:
    """The suite in the order it runs: cheapest first, so that a suite that stops at its first
    failure (`probe.early_stop`) spends least; checks of one cost keep the config's order."""
    if cost is not None:
        return sorted(checks, key=lambda c: cost(c.name))
    return sorted(checks, key=lambda c: COST_RANK.get(c.name, len(COST_RANK)))
