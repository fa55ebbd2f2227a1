"""Retry policies, declared once. Each names the exceptions it retries and logs attempts."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

log = logging.getLogger("llm_bisect.retry")


class NotYetReady(Exception):
    """The server is alive but not ready yet; the readiness policy retries this."""


class _Deadline:
    """Stop once the injected clock passes a deadline (not after a count of tries)."""

    def __init__(self, clock: Callable[[], float], deadline: float) -> None:
        self.clock = clock
        self.deadline = deadline

    def __call__(self, state: RetryCallState) -> bool:
        return self.clock() >= self.deadline


def _log_attempt(state: RetryCallState) -> None:
    if state.outcome is not None and state.attempt_number % 20 == 0:
        log.debug("not ready after %d polls: %s", state.attempt_number, state.outcome.exception())


class _Polls:
    """How long to wait before the next readiness poll: 0.05 s growing to 0.25 s for the
    first QUICK_S seconds (a server that is up in a second is seen within a quarter of one:
    a poll is two cheap GETs), then growing to 2 s (a start that takes minutes)."""

    QUICK_S = 30.0

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.began = clock()
        self.quick = wait_exponential(multiplier=0.05, min=0.05, max=0.25)
        self.slow = wait_exponential(multiplier=0.05, min=0.25, max=2.0)

    def __call__(self, state: RetryCallState) -> float:
        early = self.clock() - self.began < self.QUICK_S
        return (self.quick if early else self.slow)(state)


def readiness(
    timeout: float, *, clock: Callable[[], float], sleep: Callable[[float], None]
) -> Retrying:
    """Poll until ready: retries NotYetReady only (_Polls: every 0.05 s growing to 0.25 s,
    after 30 s to 2 s), until a deadline."""
    return Retrying(
        stop=_Deadline(clock, clock() + timeout),
        wait=_Polls(clock),
        retry=retry_if_exception_type(NotYetReady),
        sleep=sleep,
        after=_log_attempt,
        reraise=True,
    )


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    log.info("registry: attempt %d failed (%s), retrying", state.attempt_number, error)


def transient() -> Retrying:
    """Network hiccups talking to a registry: retries httpx.TransportError 3 times, backing off."""
    return Retrying(
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=4.0),
        retry=retry_if_exception_type(httpx.TransportError),
        before_sleep=_log_retry,
        reraise=True,
    )
