"""Checks: talk to an endpoint, return a CheckResult.

A check's metrics are pure functions (checks/metrics.py); the check itself
only sends prompts through the client it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

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
